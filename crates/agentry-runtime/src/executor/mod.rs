//! The tool executor: validation, permission gate, idempotency table, execution,
//! retries.
//!
//! Every call goes through the same pipeline, in this order:
//! budget granted? → known tool? → arguments valid JSON and schema-valid? →
//! scope granted? → idempotency table (same id + same call: the recorded result,
//! `replayed: true`; same id + different call: `EINVAL`) → preconditions →
//! execute under the call's timeout and the step's cancellation token (the run's
//! cancellation, or a user's interrupt) → envelope.
//! A retryable failure is retried with exponential backoff and jitter while the
//! contract's `max_retries` and the run's retry budget allow; never for
//! `irreversible_external` tools, permission errors or cancellations.
//!
//! Consecutive parallel-safe calls of one step (by default: `read_only` tools)
//! run concurrently, at most `max_parallel` at a time; any other call runs alone,
//! in request order. Results are always returned in request order, whatever the
//! completion order. Once the run is cancelled or the step interrupted no
//! further call starts.
//!
//! # Layout
//! In import order (each file uses only those above it):
//! - `msg`: [`ExecutorMsg`], [`ExecutorArgs`], [`Executed`], one call's outcome.
//! - `envelope`: the envelopes the executor writes itself (refused, replayed, lost).
//! - `prepared`: what the pipeline decided for a call, and a call on its way to run.
//! - `ledger`: the idempotency table, [`intent_key`], [`operation_id`].
//! - `human`: a running call's questions to a human.
//! - `state`: [`ExecutorState`] and how a ledger row reaches the store.
//! - `pipeline`: the checks before anything runs. `batch`: a step's calls, group
//!   by group. `approval`: the human gate. `call`: one attempt under its
//!   timeout. `span`: a call's `execute_tool` span. `retry`: attempts and
//!   retries.

mod approval;
mod batch;
mod call;
mod envelope;
mod human;
mod ledger;
mod msg;
mod pipeline;
mod prepared;
mod retry;
mod span;
mod state;

use agentry_protocol::decision::Decision;
use agentry_protocol::tool::ToolCall;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::accept;

pub use self::msg::{AppliedInput, Executed, ExecutorArgs, ExecutorMsg, KnownLedger};
pub use self::state::ExecutorState;

/// The tool executor actor.
#[derive(Debug, Default)]
pub struct ToolExecutor;

impl Actor for ToolExecutor {
    type Msg = ExecutorMsg;
    type State = ExecutorState;
    type Arguments = ExecutorArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ExecutorMsg>,
        args: ExecutorArgs,
    ) -> Result<ExecutorState, ActorProcessingErr> {
        ExecutorState::start(args).await
    }

    async fn handle(
        &self,
        _myself: ActorRef<ExecutorMsg>,
        message: ExecutorMsg,
        state: &mut ExecutorState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            ExecutorMsg::Execute {
                step,
                decision,
                granted,
                redrive,
                cut,
                reply,
            } => {
                state.cut = cut;
                let calls: &[ToolCall] = match &*decision {
                    Decision::ToolCalls { calls } => calls,
                    Decision::Final { .. } | Decision::Failed { .. } => &[],
                };
                // Boxed for the same reason as the conductor's step: a small
                // handler future is cheap for ractor to move.
                let executed = Box::pin(state.execute(step, calls, granted, redrive)).await;
                let _ = reply.send(executed);
            }
            ExecutorMsg::Verify { checks, reply } => {
                // The context inside the box too: this handler's future is kept
                // for the run's life, so it holds nothing large across an await.
                let outcomes = Box::pin(async {
                    let ctx = state.check_context();
                    accept::run_checks(&checks, &ctx).await
                })
                .await;
                let _ = reply.send(outcomes);
            }
        }
        Ok(())
    }
}
