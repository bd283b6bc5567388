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
//! - `tally`: [`ToolCallTally`], the run's own tool calls, shared with the conductor.
//! - `msg`: [`BudgetMsg`], its replies and [`BudgetArgs`].
//! - `deadline`: the deadline alarm.
//! - `books`: [`BudgetState`] and every answer the supervisor gives.

mod books;
mod deadline;
mod msg;
mod tally;
#[cfg(test)]
mod tests;

use agentry_protocol::budget::Usage;
use agentry_protocol::stop::StopReason;
use ractor::{Actor, ActorProcessingErr, ActorRef};

pub use self::books::BudgetState;
pub use self::msg::{BudgetArgs, BudgetMsg, DecideAfterSpend, ParentLink, SpendReply};
pub use self::tally::ToolCallTally;

/// The budget supervisor actor.
#[derive(Debug, Default)]
pub struct BudgetSupervisor;

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
            BudgetMsg::SpendAndDecide(ask) => {
                let answer = state.spend(Usage::step());
                ask.relay(answer);
            }
            BudgetMsg::SpendToolCalls(n, reply) => {
                let _ = reply.send(state.spend_tool_calls(n));
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
            BudgetMsg::Children(reply) => {
                let _ = reply.send(state.spawned());
            }
            BudgetMsg::LiveChildren(reply) => {
                let _ = reply.send(state.live_children());
            }
            BudgetMsg::Snapshot(reply) => {
                let _ = reply.send(state.snapshot());
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
