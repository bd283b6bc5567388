//! Stopping the run: record the stop, close the trace, publish the outcome, let
//! the parent and the store claim go, and stop every actor of the run.

use std::path::PathBuf;

use agentry_protocol::accept::CheckOutcome;
use agentry_protocol::budget::{BudgetSnapshot, Usage};
use agentry_protocol::event::RunEvent;
use agentry_protocol::state::RunSnapshot;
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::{TraceEnd, TraceLine};
use agentry_store::StoreError;
use ractor::ActorRef;

use super::msg::ConductorMsg;
use super::outcome::{RunOutcome, TakenOver};
use super::record::ApplyError;
use super::state::ConductorState;
use super::step_result::Stop;
use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::state::{StateMsg, StateUpdate};

/// Where the run's trace went, and why it is incomplete if it is.
#[derive(Default)]
struct TraceClosed {
    path: Option<PathBuf>,
    error: Option<String>,
}

impl ConductorState {
    /// The run's token was cancelled while no step ran.
    pub(super) async fn on_token_cancelled(&mut self, myself: &ActorRef<ConductorMsg>) {
        let reason = self.cancel_cause().await;
        let detail = format!("{reason} while the run was idle (step {})", self.steps);
        self.finish(myself, reason, detail, Vec::new()).await;
    }

    /// Stopped from outside: cancel every call in flight, then finish.
    pub(super) async fn abort(&mut self, myself: &ActorRef<ConductorMsg>, reason: StopReason) {
        let _ = self.children.budget.cast(BudgetMsg::CancelAll(reason));
        self.wiring.run_token.cancel();
        self.finish(
            myself,
            reason,
            format!("run stopped from outside ({reason})"),
            Vec::new(),
        )
        .await;
    }

    /// Why the run's token was cancelled: its own budget's cause, else (a child
    /// cancelled with its parent) the parent's, else an abort or shutdown.
    pub(super) async fn cancel_cause(&self) -> StopReason {
        if let Some(cause) = ask(&self.children.budget, BudgetMsg::StopCause)
            .await
            .ok()
            .flatten()
        {
            return cause;
        }
        if let Some(parent) = &self.wiring.parent_budget
            && let Some(cause) = ask(parent, BudgetMsg::StopCause).await.ok().flatten()
        {
            return cause;
        }
        StopReason::UserAbort
    }

    /// The stop of a run whose token was cancelled `during` something.
    pub(super) async fn cancelled_stop(&self, during: &str) -> Stop {
        // Boxed: the step stages that may end here await this on a rare path,
        // and each awaited future's size is copied on every step.
        let reason = Box::pin(self.cancel_cause()).await;
        Stop::new(
            reason,
            format!("{reason} while {during} (step {})", self.steps),
        )
    }

    /// Stops the run. Boxed so the handler futures that may call it stay small
    /// (ractor moves a handler future per message; see `handle`).
    pub(super) async fn finish(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        reason: StopReason,
        detail: String,
        checks: Vec<CheckOutcome>,
    ) {
        Box::pin(self.finish_inner(myself, reason, detail, checks)).await
    }

    async fn finish_inner(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        reason: StopReason,
        detail: String,
        checks: Vec<CheckOutcome>,
    ) {
        self.phase.stop();
        if let Some(ticker) = self.ticks.take() {
            ticker.stop();
        }
        // Nothing of this run may outlive it.
        self.wiring.run_token.cancel();
        // Taken over (the store refused a write or a heartbeat): whatever
        // stopped the run, it is not this process's to stop.
        if let Some(taken) = self.taken_over() {
            return self.leave(myself, taken).await;
        }
        let budget = ask(&self.children.budget, BudgetMsg::Snapshot)
            .await
            .unwrap_or_default();
        let stored_version = self.record_stop(reason, budget.spent).await;
        if stored_version.is_none()
            && let Some(taken) = self.taken_over()
        {
            return self.leave(myself, taken).await;
        }
        let state = ask(&self.children.state, StateMsg::Snapshot)
            .await
            .unwrap_or_default();
        let state_version = stored_version.unwrap_or(state.version);
        let trace = self
            .close_trace(reason, &detail, budget, state_version, &state)
            .await;
        super::span::record_end(
            &self.wiring.span,
            reason,
            self.steps,
            self.allowance.own_calls(),
            &budget,
        );
        // Closed before the outcome is published: whoever waits for the run
        // (and then flushes the exporter) finds its span ended.
        drop(std::mem::replace(
            &mut self.wiring.span,
            tracing::Span::none(),
        ));
        self.children.executor_args.span = tracing::Span::none();
        self.emit(|| RunEvent::RunStopped {
            stop_reason: reason,
        });
        tracing::info!(run_id = %self.wiring.run_id, %reason, steps = self.steps, "run stopped");
        let outcome = RunOutcome {
            run_id: self.wiring.run_id.to_string(),
            task_id: self.wiring.config.task_id.clone(),
            stop_reason: reason,
            detail,
            answer: state.task.answer.clone(),
            steps: self.steps,
            tool_calls: self.allowance.own_calls(),
            budget,
            checks,
            state,
            workdir: self.wiring.config.workdir.clone(),
            trace: trace.path,
            trace_error: trace.error,
        };
        // What this run did not use of its allowance returns to its parent (its
        // budget supervisor also says so when it stops; a second release is a no-op).
        if let Some(parent) = &self.wiring.parent_budget {
            let _ = parent.cast(BudgetMsg::Release {
                child_id: self.wiring.run_id.to_string(),
            });
        }
        drop(self.wiring.claim.take());
        let published = &self.wiring.outcome;
        self.wiring.live.release_with(|| published.publish(outcome));
        self.stop_children(myself);
    }

    /// Who took the run over, once the store refused one of its writes
    /// (its lease is lost).
    fn taken_over(&self) -> Option<TakenOver> {
        let lease = self.wiring.claim.as_ref()?.lease();
        let lost = lease.lost()?;
        // Only a fenced write loses a lease; anything else names itself.
        Some(if let StoreError::Fenced { epoch, owner, .. } = lost {
            TakenOver {
                epoch: *epoch,
                owner: owner.clone(),
            }
        } else {
            TakenOver {
                epoch: 0,
                owner: Some(format!("another process ({lost})")),
            }
        })
    }

    /// Another process took the run over: stop working on it here without
    /// recording anything (the stop, the trace's end, the outcome are the new
    /// owner's). The run's token is cancelled (its tools' process groups
    /// killed as the executor goes), its claim let go, and its handles told
    /// ([`crate::RuntimeError::TakenOver`]).
    async fn leave(&mut self, myself: &ActorRef<ConductorMsg>, taken: TakenOver) {
        tracing::warn!(run_id = %self.wiring.run_id, epoch = taken.epoch, owner = taken.owner.as_deref().unwrap_or("nobody"), steps = self.steps, "run taken over by another process: its actors and tools stop here");
        if let Some(trace) = self.wiring.trace.take() {
            // What was traced so far stays; no stop line (the run did not stop).
            let _ = trace.finish().await;
        }
        drop(std::mem::replace(
            &mut self.wiring.span,
            tracing::Span::none(),
        ));
        self.children.executor_args.span = tracing::Span::none();
        if let Some(parent) = &self.wiring.parent_budget {
            let _ = parent.cast(BudgetMsg::Release {
                child_id: self.wiring.run_id.to_string(),
            });
        }
        drop(self.wiring.claim.take());
        let outcome = &self.wiring.outcome;
        self.wiring.live.release_with(|| outcome.taken_over(taken));
        self.stop_children(myself);
    }

    /// Applies the stop through the state keeper; the state version it got, if
    /// it was stored.
    async fn record_stop(&self, reason: StopReason, spent: Usage) -> Option<u64> {
        match self
            .apply_state(StateUpdate::Stopped { reason, spent })
            .await
        {
            Ok(a) => Some(a.at.state_version),
            Err(ApplyError::Store(e)) => {
                tracing::error!(run_id = %self.wiring.run_id, error = %e, "the run's stop could not be stored");
                None
            }
            Err(ApplyError::Actor(_)) => None,
        }
    }

    /// Writes the trace's stop line and closes the trace, if the run has one.
    async fn close_trace(
        &mut self,
        reason: StopReason,
        detail: &str,
        budget: BudgetSnapshot,
        state_version: u64,
        state: &RunSnapshot,
    ) -> TraceClosed {
        let Some(trace) = self.wiring.trace.take() else {
            return TraceClosed::default();
        };
        let children = ask(&self.children.budget, BudgetMsg::Children)
            .await
            .unwrap_or_default();
        // A sampled-out run keeps its step records when it did not stop `done`
        // (said before the final record, which releases what was held).
        trace.keep_steps(reason != StopReason::Done);
        trace.write(TraceLine::Stop(Box::new(TraceEnd {
            run_id: self.wiring.run_id.to_string(),
            parent_id: self.wiring.parent_id.as_deref().map(str::to_string),
            traceparent: self.wiring.traceparent.to_string(),
            children,
            task_id: self.wiring.config.task_id.clone(),
            steps: self.steps,
            tool_calls: self.allowance.own_calls(),
            stop_reason: reason,
            detail: detail.to_string(),
            answer: state.task.answer.clone(),
            budget,
            state_version,
            world: state.world.clone(),
            at: agentry_protocol::now_millis(),
            origin: self.wiring.config.origin.clone(),
            sandbox: serde_json::to_value(self.wiring.config.sandbox.summary()).ok(),
        })));
        let path = trace.path().to_path_buf();
        let mut error = None;
        if let Err(e) = trace.finish().await {
            tracing::error!(run_id = %self.wiring.run_id, error = %e, "trace could not be written completely");
            error = Some(e.to_string());
        }
        TraceClosed {
            path: Some(path),
            error,
        }
    }

    /// The policy or executor may be stuck inside a handler (a hung model call, a
    /// tool ignoring cancellation): kill, which aborts the handler, rather than
    /// stop, which would wait for it.
    pub(super) fn stop_children(&self, myself: &ActorRef<ConductorMsg>) {
        self.children.policy.kill();
        self.children.executor.kill();
        self.children.state.stop(None);
        self.children.budget.stop(None);
        myself.stop(None);
    }
}
