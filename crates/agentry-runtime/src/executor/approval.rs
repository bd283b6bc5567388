//! The gate before a call runs: a human's approval for calls that need one,
//! and a human's settlement of a call a crash interrupted. Both park the call in
//! the state keeper and wait (the wall clock keeps running).

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::event::RunEvent;
use agentry_protocol::now_millis;
use agentry_protocol::state::{PendingApproval, Settlement};
use agentry_protocol::tool::ToolCall;
use agentry_protocol::trace::RunInput;
use agentry_store::LedgerState;
use tokio::sync::oneshot;
use tokio::time::Duration;

use super::envelope::fail;
use super::msg::{AppliedInput, CallOutcome};
use super::prepared::{Job, Mode};
use super::state::ExecutorState;
use crate::ask::ask;
use crate::state::{ApprovalDecision, Settled, StateMsg};

/// What the gate decided for a call.
// Moved once per call and never kept; boxing `Closed` would allocate.
#[allow(clippy::large_enum_variant)]
pub(super) enum Gate {
    /// Run it; with the human decision that let it through, if one did.
    Open(Option<AppliedInput>),
    /// It ends here, without running (denied, settled, or the wait failed).
    Closed(CallOutcome),
}

/// What waiting for a human came to: the outcome, and the input the state
/// keeper applied when a human answered (none when the wait ended otherwise).
struct Waited<T> {
    outcome: Result<T, ToolError>,
    applied: Option<AppliedInput>,
}

impl<T> Waited<T> {
    /// The wait ended without a human's answer.
    fn failed(error: ToolError) -> Self {
        Waited {
            outcome: Err(error),
            applied: None,
        }
    }
}

impl ExecutorState {
    /// Approval for a fresh call that needs it, settlement for a call a crash
    /// interrupted; every other call passes at once.
    pub(super) async fn gate(&self, job: &Job<'_>) -> Gate {
        // Both waits are boxed: every call's future is as large as its
        // largest await, and most calls pass at once.
        match job.mode {
            Mode::Fresh if self.args.approval.required_for(&job.tool.contract) => {
                Box::pin(self.approve(job)).await
            }
            Mode::Unsettled => Box::pin(self.settle(job)).await,
            Mode::Fresh | Mode::Approved | Mode::Rerun | Mode::Follow => Gate::Open(None),
        }
    }

    /// A fresh call that needs a human's approval: parked until a human
    /// approves or denies it (or the wait ends otherwise).
    async fn approve(&self, job: &Job<'_>) -> Gate {
        let call = job.call;
        let _ = self
            .record(job, LedgerState::AwaitingApproval, None, false)
            .await;
        let waited = self.await_approval(job).await;
        if let Err(refused) = waited.outcome {
            let env = fail(call, refused);
            if waited.applied.is_some() {
                let _ = self
                    .record(job, LedgerState::Denied, Some(&env), false)
                    .await;
                return Gate::Closed(CallOutcome::not_run(env, waited.applied));
            }
            // Withdrawn by an interrupt, timed out, or the run stopped.
            let outcome = CallOutcome::not_run(env, None);
            return Gate::Closed(outcome.cut(self.cut_short()));
        }
        let _ = self.record(job, LedgerState::Approved, None, false).await;
        Gate::Open(waited.applied)
    }

    /// A call whose outcome is unknown (a crash, or an interrupt, cut it after
    /// it started) and which must not run again silently: parked until a
    /// human settles it. `Retry` opens the gate; `Happened` and `Skip` close it
    /// with the recorded outcome.
    pub(super) async fn settle(&self, job: &Job<'_>) -> Gate {
        let call = job.call;
        let waited = Box::pin(self.await_settlement(job)).await;
        match waited.outcome {
            Ok(Settlement::Retry) => Gate::Open(waited.applied),
            Ok(settlement @ (Settlement::Happened | Settlement::Skip)) => {
                let env = settled_envelope(call, settlement);
                let _ = self
                    .record(job, LedgerState::Outcome, Some(&env), false)
                    .await;
                Gate::Closed(CallOutcome::not_run(env, waited.applied))
            }
            // No human settled it (the run was cancelled, or the process is
            // going away and took the state keeper with it): whether the call
            // took effect is as unknown as before, so its row stays parked and
            // the next resume asks again. Recording this error as the outcome
            // would have the resumed run replay "cancelled" and go on without
            // the call.
            Err(e) => Gate::Closed(CallOutcome::not_run(fail(call, e), waited.applied)),
        }
    }

    /// Parks a call a crash interrupted until a human settles it (or the run is
    /// cancelled: the deadline still applies). The park is on disk before the
    /// `awaiting_decision` event goes out, so an embedder may exit on that event
    /// and resume later.
    async fn await_settlement(&self, job: &Job<'_>) -> Waited<Settlement> {
        let call = job.call;
        if let Err(e) = self
            .record(job, LedgerState::AwaitingDecision, None, true)
            .await
        {
            return Waited::failed(e);
        }
        let (tx, rx) = oneshot::channel();
        let pending = PendingApproval {
            step: job.step,
            call: call.clone(),
            requested_at: now_millis(),
            effect: Some(job.tool.contract.effect),
            preview: None,
        };
        let parked = ask(&self.args.state, |parked| StateMsg::AwaitDecision {
            pending,
            parked,
            decision: tx.into(),
        });
        let parked = tokio::select! {
            r = parked => r,
            _ = self.args.run_token.cancelled() => return Waited::failed(self.cancelled_error()),
        };
        // The store's error, or the state keeper's absence.
        let why = match parked {
            Ok(Ok(())) => None,
            Ok(Err(store)) => Some(store.to_string()),
            Err(ask) => Some(ask.to_string()),
        };
        if let Some(why) = why {
            let error = ToolError::new(
                ErrorCode::Einternal,
                format!("the call could not be parked for a decision: {why}"),
            );
            return Waited::failed(error);
        }
        let step = job.step;
        self.args.events.emit(|| RunEvent::AwaitingDecision {
            step,
            call: call.clone(),
        });
        let Settled { settlement, at } = tokio::select! {
            d = rx => match d {
                Ok(d) => d,
                Err(_) => return Waited::failed(self.cancelled_error()),
            },
            _ = self.args.run_token.cancelled() => return Waited::failed(self.cancelled_error()),
        };
        let input = RunInput::Settlement {
            tool_call_id: call.id.clone(),
            settlement,
        };
        let event_input = input.clone();
        self.args.events.emit(|| RunEvent::InputApplied {
            seq: at.input_seq,
            input: event_input,
        });
        Waited {
            outcome: Ok(settlement),
            applied: Some(AppliedInput { at, input }),
        }
    }

    /// Parks the call in the state keeper until a human decides, the approval
    /// timeout passes, or the run is cancelled (the wall clock keeps running).
    async fn await_approval(&self, job: &Job<'_>) -> Waited<()> {
        let call = job.call;
        let decided = match self.park_for_approval(job) {
            Ok(decided) => decided,
            Err(e) => return Waited::failed(e),
        };
        let decision = match self.wait_for_decision(call, decided).await {
            Ok(decision) => decision,
            Err(e) => return Waited::failed(e),
        };
        let input = RunInput::Approval {
            tool_call_id: call.id.clone(),
            approved: decision.approved,
            reason: decision.reason.clone(),
        };
        let at = decision.applied;
        let event_input = input.clone();
        self.args.events.emit(|| RunEvent::InputApplied {
            seq: at.input_seq,
            input: event_input,
        });
        let outcome = if decision.approved {
            Ok(())
        } else {
            let why = decision
                .reason
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            Err(
                ToolError::new(ErrorCode::Eperm, format!("a human denied this call{why}"))
                    .with_action("do not repeat it; choose another way or finish"),
            )
        };
        Waited {
            outcome,
            applied: Some(AppliedInput { at, input }),
        }
    }

    /// Parks the call in the state keeper (visible in snapshots from now on) and
    /// says so; the decision comes back on the returned receiver.
    fn park_for_approval(
        &self,
        job: &Job<'_>,
    ) -> Result<oneshot::Receiver<ApprovalDecision>, ToolError> {
        let (step, call) = (job.step, job.call);
        let (tx, rx) = oneshot::channel();
        let effect = Some(job.tool.contract.effect);
        // What the human is shown besides the arguments; the tool reads, never writes.
        let preview = call
            .arguments
            .to_value()
            .ok()
            .and_then(|args| job.tool.tool.preview(&args, &self.check_context()));
        let pending = PendingApproval {
            step,
            call: call.clone(),
            requested_at: now_millis(),
            effect,
            preview: preview.clone(),
        };
        if let Err(e) = self
            .args
            .state
            .cast(StateMsg::AwaitApproval(pending, tx.into()))
        {
            let error = ToolError::new(ErrorCode::Einternal, format!("state keeper gone: {e}"));
            return Err(error);
        }
        self.args.events.emit(|| RunEvent::AwaitingApproval {
            step,
            call: Box::new(call.clone()),
            effect,
            preview,
        });
        Ok(rx)
    }

    /// Waits for a parked call's decision; a call nobody decided in time (or
    /// whose run was cancelled) leaves the state keeper.
    async fn wait_for_decision(
        &self,
        call: &ToolCall,
        decided: oneshot::Receiver<ApprovalDecision>,
    ) -> Result<ApprovalDecision, ToolError> {
        let timeout = self.args.approval.timeout.unwrap_or(Duration::MAX);
        let withdraw = || {
            let _ = self.args.state.cast(StateMsg::Withdraw(call.id.clone()));
        };
        tokio::select! {
            decision = decided => decision.map_err(|_| self.cancelled_error()),
            // A user's interrupt withdraws the request as the run's
            // cancellation does: the call is not run.
            _ = self.cut.cancelled() => {
                withdraw();
                Err(self.withdrawn_error())
            }
            _ = tokio::time::sleep(timeout) => {
                withdraw();
                Err(ToolError::new(
                    ErrorCode::Eperm,
                    format!("no human approved this call within {} ms", timeout.as_millis()),
                )
                .with_action("ask for approval again later, or finish without it"))
            }
        }
    }
}

impl ExecutorState {
    /// Why a call waiting for approval was not run when the step's token fired.
    fn withdrawn_error(&self) -> ToolError {
        if crate::interrupt::is_cut(&self.cut, &self.args.run_token) {
            ToolError::new(
                ErrorCode::Ecanceled,
                "interrupted by the user while this call waited for approval: the request was withdrawn and the call was not run",
            )
            .retryable(false)
            .with_action("read the user's message that follows; call again only if it still applies")
        } else {
            self.cancelled_error()
        }
    }
}

/// The outcome recorded when a human settles an interrupted call (`Retry` runs
/// it instead, so never gets here).
fn settled_envelope(call: &ToolCall, settlement: Settlement) -> ResultEnvelope {
    match settlement {
        Settlement::Skip => fail(
            call,
            ToolError::new(
                ErrorCode::Ecanceled,
                "the run was interrupted during this call and a human chose to skip it; treat it as not done",
            )
            .retryable(false)
            .with_action("do not assume it took effect; choose another way or finish"),
        ),
        Settlement::Happened | Settlement::Retry => ResultEnvelope::success(
            &call.id,
            &call.name,
            serde_json::json!({
                "settled": "happened",
                "note": "the run was interrupted during this call; a human confirmed it took effect (its output was not recorded)"
            }),
            Vec::new(),
        ),
    }
}
