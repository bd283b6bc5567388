//! The state keeper: the only writer of run state.
//!
//! Every change is a [`StateMsg::Apply`] carrying one [`StateUpdate`]; the actor
//! applies them one at a time in mailbox order and bumps the version by one per
//! update, so updates that arrive together are serialized, never lost.
//!
//! # Layout
//! In import order (each file uses only those above it):
//! - `msg`: [`StateMsg`], [`StateUpdate`] and what the keeper answers.
//! - `run_state`: [`RunState`] and how each update changes it.
//! - `parked`: calls waiting for a human (approvals, settlements).
//! - `persist`: how a durable run's state reaches the store.
//! - `observe`: status changes as `agentry::metrics` events.

mod msg;
mod observe;
mod parked;
mod persist;
mod run_state;
#[cfg(test)]
mod tests;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use self::persist::Applying;

pub use self::msg::{
    Applied, AppliedAt, AppliedPort, ApprovalDecision, HumanInputError, InputSource, Settled,
    StateMsg, StateUpdate, StepUpdate,
};
pub use self::run_state::RunState;

/// The state keeper actor.
#[derive(Debug, Default)]
pub struct StateKeeper;

impl Actor for StateKeeper {
    type Msg = StateMsg;
    // Boxed: ractor moves its arguments and state through every level of its
    // spawn and into the actor's task; a pointer is cheap to move.
    type State = Box<RunState>;
    type Arguments = Box<RunState>;

    async fn pre_start(
        &self,
        _myself: ActorRef<StateMsg>,
        initial: Box<RunState>,
    ) -> Result<Box<RunState>, ActorProcessingErr> {
        // A resumed run may start paused or sleeping.
        observe::status(&initial, None);
        Ok(initial)
    }

    async fn handle(
        &self,
        _myself: ActorRef<StateMsg>,
        message: StateMsg,
        state: &mut Box<RunState>,
    ) -> Result<(), ActorProcessingErr> {
        // Only a durable run's commit is awaited here, and a human's answer
        // (boxed, being rare): ractor keeps this handler's future inline in the
        // actor's task for the run's life, so it is kept small.
        let before = state.status;
        match message {
            StateMsg::Apply(update, reply) => {
                let Applying { applied, commit } = state.apply_committed(update);
                let committed = commit.await.map(|()| applied);
                if let Some(reply) = reply {
                    // The requester may have gone away (run stopping); nothing to do then.
                    let _ = reply.send(committed);
                }
            }
            StateMsg::ApplyTraced {
                update,
                record,
                trace,
                reply,
            } => {
                let Applying { applied, commit } = state.apply_committed(update);
                let committed = commit.await.map(|()| applied);
                // A step that could not be committed gets no record: the run
                // stops on it and the stop line says why.
                if let Ok(applied) = &committed {
                    state.trace_step(record, applied, &trace);
                }
                if let Some(reply) = reply {
                    let _ = reply.send(committed);
                }
            }
            StateMsg::AwaitDecision {
                pending,
                parked,
                decision,
            } => {
                let _ = parked.send(Box::pin(state.await_decision(pending, decision)).await);
            }
            StateMsg::Settle {
                tool_call_id,
                settlement,
                reply,
            } => {
                let settled = Box::pin(state.settle_call(&tool_call_id, settlement)).await;
                let _ = reply.send(settled);
            }
            StateMsg::Snapshot(reply) => {
                let _ = reply.send(state.snapshot());
            }
            StateMsg::AwaitApproval(pending, port) => {
                state.park(pending, port);
                // The park itself is re-created when the step is acted on again,
                // so it is queued, not waited for (a queued commit is done).
                drop(state.persist(false));
            }
            StateMsg::Resolve {
                tool_call_id,
                decision,
                reply,
            } => {
                let resolved = Box::pin(state.resolve(&tool_call_id, decision)).await;
                let _ = reply.send(resolved);
            }
            StateMsg::Withdraw(tool_call_id) => {
                state.unpark(&tool_call_id);
            }
        }
        if state.status != before {
            observe::status(state, Some(before));
        }
        Ok(())
    }
}
