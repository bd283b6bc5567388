//! One call from the gate to its recorded outcome: attempts, and retries of
//! retryable failures with exponential backoff and jitter while the contract's
//! `max_retries` and the run's retry budget allow.

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope};
use agentry_protocol::event::RunEvent;
use agentry_protocol::tool::ToolContract;
use agentry_protocol::trace::AttemptRecord;
use agentry_store::LedgerState;
use serde_json::Value;
use tokio::time::Duration;

use super::approval::Gate;
use super::envelope::fail;
use super::ledger::operation_id;
use super::msg::CallOutcome;
use super::prepared::Job;
use super::state::ExecutorState;
use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::durable::rerunnable;

impl ExecutorState {
    /// Runs one call, retrying retryable failures within the contract's and the
    /// run's retry allowance. One async fn from the gate to the recorded
    /// outcome: every nested future would add its locals to the executor's
    /// per-step future, which is boxed and moved once per step.
    pub(super) async fn run_with_retries(&self, job: Job<'_>, args: Value) -> CallOutcome {
        let approval = match self.gate(&job).await {
            Gate::Open(approval) => approval,
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
            return CallOutcome::not_run(fail(job.call, e), approval);
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
                .run_one(step, call, tool, this_args, attempt, &operation_id)
                .await;
            env.attempt = attempt;
            let retry = self.may_retry(&env, contract, attempt)
                // Check-before-spend on the run's retry budget.
                && Box::pin(ask(&self.args.budget, BudgetMsg::SpendRetry))
                    .await
                    .unwrap_or(false);
            if !retry {
                if env.attempt > 1 {
                    attempts.push(attempt_record(call, contract, &env, None));
                }
                // A call the run's cancellation cut short may or may not have
                // taken effect: its row keeps the intent. The run is stopping;
                // should its stop not reach the disk (the process went away), a
                // resume then settles the call by its contract (re-run or a
                // human) instead of replaying "cancelled" as if it never ran.
                let cut_short = !env.ok && self.args.run_token.is_cancelled();
                if !cut_short {
                    let _ = self
                        .record(&job, LedgerState::Outcome, Some(&env), false)
                        .await;
                }
                return CallOutcome {
                    envelope: env,
                    attempts,
                    approval,
                };
            }
            let backoff = self.args.retry.backoff(attempt);
            attempts.push(attempt_record(call, contract, &env, Some(backoff)));
            tokio::select! {
                _ = self.args.run_token.cancelled() => {
                    let _ = self.record(&job, LedgerState::Outcome, Some(&env), false).await;
                    return CallOutcome { envelope: env, attempts, approval };
                }
                _ = tokio::time::sleep(backoff) => {}
            }
            attempt += 1;
        }
    }

    /// Whether a failed attempt may be retried, before asking the budget: a
    /// retryable error, a contract that allows another attempt, not a permission
    /// error or a cancellation, and a run that is not stopping.
    fn may_retry(&self, env: &ResultEnvelope, contract: &ToolContract, attempt: u32) -> bool {
        match &env.error {
            Some(e) => {
                e.retryable
                    && contract.may_retry()
                    && attempt <= contract.max_retries
                    && !matches!(e.code, ErrorCode::Eperm | ErrorCode::Ecanceled)
                    && !self.args.run_token.is_cancelled()
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
