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
use super::call::Attempt;
use super::envelope::fail;
use super::ledger::operation_id;
use super::msg::{AppliedInput, CallOutcome, CutShort};
use super::prepared::{Job, Mode};
use super::span;
use super::state::ExecutorState;
use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::durable::rerunnable;
use crate::interrupt::is_cut;

/// One call's attempts so far, and what it carries to its outcome.
struct Tries {
    /// The next attempt's number, from 1.
    attempt: u32,
    /// Every attempt, when there was more than one.
    attempts: Vec<AttemptRecord>,
    /// Human decisions the call waited for, in the order applied.
    applied: Vec<AppliedInput>,
    /// The token attempts run under: the step's; the run's once a human chose
    /// to run an unsettled call again (the step's stays cut until it ends).
    under: CancellationToken,
    cut: CutShort,
}

impl Tries {
    fn outcome(self, envelope: ResultEnvelope) -> CallOutcome {
        CallOutcome {
            envelope,
            attempts: self.attempts,
            applied: self.applied,
            cut: self.cut,
        }
    }
}

/// What follows an attempt a user's interrupt cut.
enum AfterCut {
    /// Report it cancelled.
    Report,
    /// A human chose to run it again.
    RunAgain,
    /// A human settled it: this is its result.
    Settled(Box<ResultEnvelope>),
}

impl ExecutorState {
    /// Runs one call, retrying retryable failures within the contract's and the
    /// run's retry allowance, in its `execute_tool` span.
    pub(super) async fn run_with_retries(&self, job: Job<'_>, args: Value) -> CallOutcome {
        let span = span::tool_span(&self.args.span, job.call, &job.tool.contract);
        span::record_sandbox(&span, job.tool.tool.as_ref(), &self.args.sandbox);
        let content = self.args.content.as_deref();
        span::record_content(&span, content, "gen_ai.tool.call.arguments", Some(&args));
        let outcome = self.attempts(job, args, &span).await;
        let env = &outcome.envelope;
        // A cut result's head, as every other sink records it.
        let head = (content.is_some() && env.data.is_none())
            .then(|| env.cut.as_ref().map(|c| Value::String(c.head.clone())))
            .flatten();
        let result = env.data.as_ref().or(head.as_ref());
        span::record_content(&span, content, "gen_ai.tool.call.result", result);
        // What the call's row in a durable run's ledger says now (a call the
        // run's cancellation cut short keeps its intent; see `record_last`).
        let ledger = self.args.log.as_ref().map(|_| {
            if !env.ok && self.args.run_token.is_cancelled() {
                "intent"
            } else {
                "outcome"
            }
        });
        span::record_outcome(&span, env, ledger);
        outcome
    }

    async fn attempts(&self, job: Job<'_>, args: Value, span: &tracing::Span) -> CallOutcome {
        // Size: one async fn from the gate to the recorded outcome: every nested
        // future would add its locals to the executor's per-step future, which
        // is boxed and moved once per step (the rare paths are boxed).
        //
        // A step cut before the call started: it never starts (a call a crash
        // left unsettled still waits for its human: its outcome is unknown).
        if self.cut.is_cancelled() && job.mode != Mode::Unsettled {
            let env = fail(job.call, self.cancelled_error());
            return CallOutcome::not_run(env, None).cut(self.cut_short());
        }
        let gated = (!span.is_disabled()).then(tokio::time::Instant::now);
        let applied: Vec<AppliedInput> = match self.gate(&job).await {
            Gate::Open(approval) => approval.into_iter().collect(),
            Gate::Closed(outcome) => return outcome,
        };
        if let Some(gated) = gated
            && !applied.is_empty()
        {
            span.record(
                "agentry.approval_wait_ms",
                agentry_telemetry::int(gated.elapsed().as_millis() as u64),
            );
        }
        let contract = &job.tool.contract;
        // On disk before the tool starts when running it twice would be wrong.
        let intent = self.record(&job, LedgerState::Intent, None, !rerunnable(contract));
        if let Err(e) = intent.await {
            return CallOutcome::not_run(fail(job.call, e), applied.into_iter().next_back());
        }
        let operation_id = operation_id(&self.args.run_id, job.digest);
        if !span.is_disabled() {
            span.record("agentry.operation_id", &*operation_id);
        }
        let mut tries = Tries {
            attempt: 1,
            attempts: Vec::new(),
            applied,
            // A human already chose to run a call a crash left unsettled.
            under: if job.mode == Mode::Unsettled {
                self.args.run_token.clone()
            } else {
                self.cut.clone()
            },
            cut: CutShort::No,
        };
        // The first attempt takes the parsed arguments; a retry (rare) parses the
        // call's arguments again (they parsed and validated before) rather than
        // every call keeping a copy in case.
        let mut args = Some(args);
        loop {
            let (call, attempt) = (job.call, tries.attempt);
            self.args.events.emit(|| RunEvent::ToolCallStarted {
                step: job.step,
                tool_call_id: call.id.clone(),
                tool: call.name.clone(),
                attempt,
            });
            let one = Attempt {
                step: job.step,
                call,
                tool: job.tool,
                attempt,
                operation_id: &operation_id,
                under: &tries.under,
                span,
            };
            let this_args = args.take();
            let this_args =
                this_args.unwrap_or_else(|| call.arguments.to_value().unwrap_or_default());
            // Built in place when nobody wants spans: wrapping it would move
            // the attempt's future (kilobytes) on every call.
            let mut env = if span.is_disabled() {
                self.run_one(one, this_args).await
            } else {
                agentry_telemetry::in_span(self.run_one(one, this_args), span).await
            };
            env.attempt = attempt;
            if is_cut(&tries.under, &self.args.run_token)
                && env.error_code() == Some(ErrorCode::Ecanceled)
            {
                match Box::pin(self.after_cut(&job, &mut tries, &env)).await {
                    AfterCut::Report => {}
                    AfterCut::RunAgain => {
                        tries.attempt += 1;
                        continue;
                    }
                    AfterCut::Settled(envelope) => return tries.outcome(*envelope),
                }
            }
            let retry = self.may_retry(&env, contract, attempt, &tries.under)
                // Check-before-spend on the run's retry budget.
                && Box::pin(ask(&self.args.budget, BudgetMsg::SpendRetry))
                    .await
                    .unwrap_or(false);
            if !retry {
                if env.attempt > 1 {
                    tries
                        .attempts
                        .push(attempt_record(call, contract, &env, None));
                }
                self.record_last(&job, &env).await;
                return tries.outcome(env);
            }
            let backoff = self.args.retry.backoff(attempt);
            span::retry_event(span, &env, backoff.as_millis() as u64);
            tries
                .attempts
                .push(attempt_record(call, contract, &env, Some(backoff)));
            tokio::select! {
                _ = tries.under.cancelled() => {
                    let _ = self.record(&job, LedgerState::Outcome, Some(&env), false).await;
                    tries.cut = self.cut_short();
                    return tries.outcome(env);
                }
                _ = tokio::time::sleep(backoff) => {}
            }
            tries.attempt += 1;
        }
    }

    /// An attempt a user's interrupt cut. An irreversible call had started:
    /// whether it took effect is unknown, as after a crash, so a human settles
    /// it before the step ends. Any other call is reported cancelled (the model
    /// is told so and may call again).
    async fn after_cut(&self, job: &Job<'_>, tries: &mut Tries, env: &ResultEnvelope) -> AfterCut {
        let contract = &job.tool.contract;
        if contract.effect != Effect::IrreversibleExternal {
            tries.cut = CutShort::Cancelled;
            return AfterCut::Report;
        }
        tries
            .attempts
            .push(attempt_record(job.call, contract, env, None));
        tries.cut = CutShort::Unsettled;
        match self.settle(job).await {
            Gate::Open(settled) => {
                tries.applied.extend(settled);
                tries.under = self.args.run_token.clone();
                AfterCut::RunAgain
            }
            Gate::Closed(mut outcome) => {
                tries.applied.append(&mut outcome.applied);
                AfterCut::Settled(Box::new(outcome.envelope))
            }
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
