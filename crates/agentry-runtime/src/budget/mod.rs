//! The budget supervisor: holds the budget vector, answers spends check-before-spend,
//! and owns the run's wall-clock deadline.
//!
//! It never waits on anything: every handler is a few comparisons. The deadline is a
//! timer task that, when it fires, first tells the supervisor (so the cause is on
//! record before anyone can observe the cancellation) and then cancels the run's
//! token, which every in-flight tool call is selected against.
//!
//! # Layout
//! In import order (each file uses only those above it):
//! - `allowance`: `ToolCallAllowance`, the run's tool calls, shared with the
//!   conductor.
//! - `msg`: [`BudgetMsg`], its replies, [`OnStepGranted`] and `BudgetArgs`.
//! - `deadline`: the deadline alarm.
//! - `books`: `BudgetState` and every answer the supervisor gives.

mod allowance;
mod books;
mod deadline;
mod msg;
#[cfg(test)]
mod tests;

use agentry_protocol::budget::Usage;
use agentry_protocol::stop::StopReason;
use ractor::{Actor, ActorProcessingErr, ActorRef};

pub(crate) use self::allowance::ToolCallAllowance;
pub(crate) use self::books::BudgetState;
pub(crate) use self::msg::{BudgetArgs, ChildBooks};
pub use self::msg::{BudgetMsg, OnStepGranted, ParentLink, ReserveRefused, SpendReply};

/// The budget supervisor actor.
#[derive(Debug, Default)]
pub(crate) struct BudgetSupervisor;

impl Actor for BudgetSupervisor {
    type Msg = BudgetMsg;
    type State = BudgetState;
    type Arguments = BudgetArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<BudgetMsg>,
        args: BudgetArgs,
    ) -> Result<BudgetState, ActorProcessingErr> {
        Ok(BudgetState::start(args, myself))
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<BudgetMsg>,
        state: &mut BudgetState,
    ) -> Result<(), ActorProcessingErr> {
        state.stop();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<BudgetMsg>,
        message: BudgetMsg,
        state: &mut BudgetState,
    ) -> Result<(), ActorProcessingErr> {
        state.book_tool_calls();
        match message {
            BudgetMsg::Spend(charge, reply) => {
                let _ = reply.send(state.spend(charge));
            }
            BudgetMsg::SpendStep { granted, then } => {
                let answer = state.spend(Usage::step());
                let _ = granted.send(answer);
                if let SpendReply::Granted { before, .. } = answer {
                    then.granted(before);
                }
            }
            BudgetMsg::SpendRetry(reply) => {
                let _ = reply.send(state.spend_retry());
            }
            BudgetMsg::Charge(usage) => state.charge(usage),
            BudgetMsg::Reserve {
                child_id,
                request,
                reply,
            } => {
                let _ = reply.send(state.reserve(child_id, &request));
            }
            BudgetMsg::ChildSpent { child_id, usage } => state.child_spent(&child_id, usage),
            BudgetMsg::Release { child_id } => state.release(&child_id),
            BudgetMsg::HoldRelease { child_id } => state.hold(child_id),
            BudgetMsg::Collect { child_id } => state.collect(&child_id),
            BudgetMsg::Children(reply) => {
                let _ = reply.send(state.spawned());
            }
            BudgetMsg::LiveChildren(reply) => {
                let _ = reply.send(state.live_children());
            }
            BudgetMsg::Snapshot(reply) => {
                let _ = reply.send(state.snapshot());
            }
            BudgetMsg::Delegable(reply) => {
                let _ = reply.send(state.delegable());
            }
            BudgetMsg::StopCause(reply) => {
                let _ = reply.send(state.stop_cause());
            }
            BudgetMsg::CancelAll(reason) => state.cancel(reason),
            BudgetMsg::DeadlineReached => state.cancel(StopReason::Deadline),
        }
        Ok(())
    }
}
