//! One call from the gate to its recorded outcome: attempts, and retries of
//! retryable failures with exponential backoff and jitter while the contract's
//! `max_retries` and the run's retry budget allow.

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope};
use agentry_protocol::event::RunEvent;
use agentry_protocol::tool::{Effect, ToolContract};
use agentry_protocol::trace::AttemptRecord;
use agentry_store::LedgerState;
use serde_json::Value;
use tokio::time::Duration;
use tokio_util::sync::CancellationToken;

use super::approval::Gate;
use super::envelope::fail;
use super::ledger::operation_id;
use super::msg::{AppliedInput, CallOutcome, CutShort};
use super::prepared::{Job, Mode};
use super::state::ExecutorState;
use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::durable::rerunnable;
use crate::interrupt::is_cut;

impl ExecutorState {
    /// Runs one call, retrying retryable failures within the contract's and the
    /// run's retry allowance. One async fn from the gate to the recorded
    /// outcome: every nested future would add its locals to the executor's
    /// per-step future, which is boxed and moved once per step.
    pub(super) async fn run_with_retries(&self, job: Job<'_>, args: Value) -> CallOutcome {
        // A step cut before the call started: it never starts (a call a crash
        // left unsettled still waits for its human: its outcome is unknown).
        if self.cut.is_cancelled() && job.mode != Mode::Unsettled {
            let env = fail(job.call, self.cancelled_error());
            return CallOutcome::not_run(env, None).cut(self.cut_short());
        }
        let mut applied: Vec<AppliedInput> = match self.gate(&job).await {
            Gate::Open(approval) => approval.into_iter().collect(),
            Gate::Closed(outcome) => return outcome,
        };
        // On disk before the tool starts when running it twice would be wrong.
        if let Err(e) = self
            .record(
                &job,
                LedgerState::Intent,
                None,
                !rerunnable(&job.tool.contract),
            )
            .await
        {
            return CallOutcome::not_run(fail(job.call, e), applied.pop());
        }
        let (step, call, tool) = (job.step, job.call, job.tool);
        let contract = &tool.contract;
        let operation_id = operation_id(&self.args.run_id, job.digest);
        let mut attempts = Vec::new();
        let mut attempt = 1u32;
        // The first attempt takes the parsed arguments; a retry (rare) parses the
        // call's arguments again (they parsed and validated before) rather than
        // every call keeping a copy in case.
        let mut args = Some(args);
        // The step's token; the run's once a human chose to run an interrupted
        // call again (the step's stays cut until the step ends).
        let mut under = self.cut.clone();
        let mut cut = CutShort::No;
        loop {
            self.args.events.emit(|| RunEvent::ToolCallStarted {
                step,
                tool_call_id: call.id.clone(),
                tool: call.name.clone(),
                attempt,
            });
            let this_args = match args.take() {
                Some(first) => first,
                None => call.arguments.to_value().unwrap_or_default(),
            };
            let mut env = self
                .run_one(step, call, tool, this_args, attempt, &operation_id, &under)
                .await;
            env.attempt = attempt;
            if is_cut(&under, &self.args.run_token)
                && env.error_code() == Some(ErrorCode::Ecanceled)
            {
                if contract.effect != Effect::IrreversibleExternal {
                    cut = CutShort::Cancelled;
                } else {
                    // An irreversible call started and cut: whether it took
                    // effect is unknown, as after a crash. A human settles it
                    // before the step ends. (Other calls are reported
                    // cancelled; the model is told so and may call again.)
                    attempts.push(attempt_record(call, contract, &env, None));
                    match Box::pin(self.settle(&job)).await {
                        Gate::Open(settled) => {
                            applied.extend(settled);
                            under = self.args.run_token.clone();
                            cut = CutShort::Unsettled;
                            attempt += 1;
                            continue;
                        }
                        Gate::Closed(mut outcome) => {
                            applied.append(&mut outcome.applied);
                            outcome.applied = applied;
                            outcome.attempts = attempts;
                            return outcome.cut(CutShort::Unsettled);
                        }
                    }
                }
            }
            let retry = self.may_retry(&env, contract, attempt, &under)
                // Check-before-spend on the run's retry budget.
                && Box::pin(ask(&self.args.budget, BudgetMsg::SpendRetry))
                    .await
                    .unwrap_or(false);
            if !retry {
                if env.attempt > 1 {
                    attempts.push(attempt_record(call, contract, &env, None));
                }
                self.record_last(&job, &env).await;
                return CallOutcome {
                    envelope: env,
                    attempts,
                    applied,
                    cut,
                };
            }
            let backoff = self.args.retry.backoff(attempt);
            attempts.push(attempt_record(call, contract, &env, Some(backoff)));
            tokio::select! {
                _ = under.cancelled() => {
                    let _ = self.record(&job, LedgerState::Outcome, Some(&env), false).await;
                    let cut = self.cut_short();
                    return CallOutcome { envelope: env, attempts, applied, cut };
                }
                _ = tokio::time::sleep(backoff) => {}
            }
            attempt += 1;
        }
    }

    /// Records a call's last attempt as its outcome. A call the run's
    /// cancellation cut short may or may not have taken effect: its row keeps
    /// the intent. The run is stopping; should its stop not reach the disk
    /// (the process went away), a resume then settles the call by its contract
    /// (re-run or a human) instead of replaying "cancelled" as if it never ran.
    async fn record_last(&self, job: &Job<'_>, env: &ResultEnvelope) {
        let cut_short = !env.ok && self.args.run_token.is_cancelled();
        if !cut_short {
            let _ = self
                .record(job, LedgerState::Outcome, Some(env), false)
                .await;
        }
    }

    /// Whether a failed attempt may be retried, before asking the budget: a
    /// retryable error, a contract that allows another attempt, not a permission
    /// error or a cancellation, and a run that is not stopping.
    fn may_retry(
        &self,
        env: &ResultEnvelope,
        contract: &ToolContract,
        attempt: u32,
        under: &CancellationToken,
    ) -> bool {
        match &env.error {
            Some(e) => {
                e.retryable
                    && contract.may_retry()
                    && attempt <= contract.max_retries
                    && !matches!(e.code, ErrorCode::Eperm | ErrorCode::Ecanceled)
                    && !under.is_cancelled()
            }
            None => false,
        }
    }
}

/// One attempt of a retried call, for the trace.
fn attempt_record(
    call: &agentry_protocol::tool::ToolCall,
    contract: &ToolContract,
    env: &ResultEnvelope,
    backoff: Option<Duration>,
) -> AttemptRecord {
    AttemptRecord {
        tool_call_id: call.id.clone(),
        tool: call.name.clone(),
        tool_version: contract.version.clone(),
        attempt: env.attempt,
        ok: env.ok,
        error: env.error_code(),
        latency_ms: env.cost.latency_ms,
        backoff_ms: backoff.map(|b| b.as_millis() as u64),
    }
}
