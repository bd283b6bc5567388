//! The tool executor: validation, permission gate, idempotency table, execution,
//! retries.
//!
//! Every call goes through the same pipeline, in this order:
//! budget granted? → known tool? → arguments valid JSON and schema-valid? →
//! scope granted? → idempotency table (same id + same call: the recorded result,
//! `replayed: true`; same id + different call: `EINVAL`) → preconditions →
//! execute under the call's timeout and the run's cancellation token → envelope.
//! A retryable failure is retried with exponential backoff and jitter while the
//! contract's `max_retries` and the run's retry budget allow; never for
//! `irreversible_external` tools, permission errors or cancellations.
//!
//! Consecutive parallel-safe calls of one step (by default: `read_only` tools)
//! run concurrently, at most `max_parallel` at a time; any other call runs alone,
//! in request order. Results are always returned in request order, whatever the
//! completion order. Once the run is cancelled no further call starts.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use agentry_protocol::accept::{AcceptCheck, CheckOutcome};
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::event::RunEvent;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::now_millis;
use agentry_protocol::state::PendingApproval;
use agentry_protocol::tool::ToolCall;
use agentry_protocol::trace::{AttemptRecord, RunInput};
use agentry_tools::ToolContext;
use futures::{FutureExt, StreamExt};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;
use serde_json::Value;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::accept;
use crate::budget::BudgetMsg;
use crate::call::ask;
use crate::config::ApprovalConfig;
use crate::events::EventSink;
use crate::registry::{Grants, RegisteredTool, ToolRegistry};
use crate::state::StateMsg;

/// The longest a cancelled or timed-out call may run its own cancel path (killing
/// a process group, SIGTERM then SIGKILL) before its future is dropped; each tool
/// declares its own (`Tool::cancel_grace`, zero by default).
pub const CANCEL_GRACE: Duration = Duration::from_millis(75);

/// Default bound on concurrently running calls of one step.
pub const DEFAULT_MAX_PARALLEL: usize = 8;

/// Backoff between automatic retries: `base · 2^(attempt-1)`, capped, with jitter
/// drawn from the upper half so retries of parallel calls do not line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Backoff before the first retry.
    pub base: Duration,
    /// Upper bound of any backoff.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(50),
            max: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The backoff after failed attempt `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let full = exp.min(self.max);
        let half = full / 2;
        half + Duration::from_micros(fastrand::u64(0..=half.as_micros() as u64))
    }
}

/// An input applied by the state keeper: (input sequence number, state version,
/// the input).
pub type AppliedInput = (u64, u64, RunInput);

/// One call's envelope, its attempts (if retried), and its approval decision.
type CallOutcome = (ResultEnvelope, Vec<AttemptRecord>, Option<AppliedInput>);

/// A step's results plus every attempt made to produce them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Executed {
    /// One envelope per call, in request order.
    pub results: Vec<ResultEnvelope>,
    /// Every attempt of the calls that were retried.
    pub attempts: Vec<AttemptRecord>,
    /// Approval decisions applied while the calls waited: (input sequence number,
    /// state version, the decision).
    pub approvals: Vec<AppliedInput>,
}

/// Messages the executor accepts.
#[derive(RactorMessage)]
pub enum ExecutorMsg {
    /// Run a step's calls. Only the first `granted` calls have tool-call budget; the
    /// rest are answered `EBUDGET` without running.
    Execute {
        /// Step number.
        step: u64,
        /// Calls, in request order.
        calls: Vec<ToolCall>,
        /// How many calls the budget supervisor granted.
        granted: usize,
        /// The results.
        reply: RpcReplyPort<Executed>,
    },
    /// Run the task's acceptance checks in the working directory.
    Verify {
        /// The checks.
        checks: Vec<AcceptCheck>,
        /// One outcome per check.
        reply: RpcReplyPort<Vec<CheckOutcome>>,
    },
}

/// Start-up arguments.
#[derive(Clone)]
pub struct ExecutorArgs {
    /// Run id.
    pub run_id: Arc<str>,
    /// Tools.
    pub registry: Arc<ToolRegistry>,
    /// What this run may call.
    pub grants: Grants,
    /// Working directory.
    pub workdir: Arc<Path>,
    /// Artifacts directory (full outputs referenced from envelopes).
    pub artifacts: Arc<Path>,
    /// Cancelled at the deadline or on abort; every call is selected against it.
    pub run_token: CancellationToken,
    /// The run's absolute deadline, to tell `ETIMEDOUT` from `ECANCELED`.
    pub deadline: Option<Instant>,
    /// The budget supervisor, asked before every retry.
    pub budget: ActorRef<BudgetMsg>,
    /// Where `ToolCallStarted` events go.
    pub events: EventSink,
    /// Bound on concurrently running calls of one step.
    pub max_parallel: usize,
    /// Backoff between retries.
    pub retry: RetryPolicy,
    /// The state keeper, where calls park while they wait for approval.
    pub state: ActorRef<StateMsg>,
    /// Which calls need approval.
    pub approval: ApprovalConfig,
    /// Starts child agents for `agent.spawn`.
    pub agents: Option<Arc<dyn agentry_tools::agents::AgentDesk>>,
}

/// Executor state: its arguments and the idempotency table.
pub struct ExecutorState {
    args: ExecutorArgs,
    /// call id → (digest of name + arguments, recorded result).
    table: HashMap<String, (u128, ResultEnvelope)>,
}

/// What the pipeline decided for one call before anything ran.
enum Prepared<'a> {
    Done(ResultEnvelope),
    Run {
        tool: &'a RegisteredTool,
        args: Value,
        digest: u128,
    },
    /// Same id and call as an earlier call of this batch: reuse its result.
    SameAs(usize),
}

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
        Ok(ExecutorState {
            args,
            table: HashMap::new(),
        })
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
                calls,
                granted,
                reply,
            } => {
                // Boxed for the same reason as the conductor's step: a small
                // handler future is cheap for ractor to move.
                let executed = Box::pin(state.execute(step, &calls, granted)).await;
                let _ = reply.send(executed);
            }
            ExecutorMsg::Verify { checks, reply } => {
                let outcomes = Box::pin(accept::run_checks(
                    &checks,
                    &state.args.workdir,
                    &state.args.run_token,
                ))
                .await;
                let _ = reply.send(outcomes);
            }
        }
        Ok(())
    }
}

impl ExecutorState {
    /// Runs a batch through the pipeline.
    pub async fn execute(&mut self, step: u64, calls: &[ToolCall], granted: usize) -> Executed {
        let registry = Arc::clone(&self.args.registry);
        let mut prepared = self.prepare_all(&registry, calls, granted);

        let mut results: Vec<Option<ResultEnvelope>> = vec![None; calls.len()];
        let mut attempts = Vec::new();
        let mut approvals = Vec::new();
        let mut i = 0;
        while i < prepared.len() {
            // A group: one call that must run alone, or a run of consecutive
            // parallel-safe calls.
            let mut end = i + 1;
            if is_parallel_safe(&prepared[i]) {
                while end < prepared.len() && is_parallel_safe(&prepared[end]) {
                    end += 1;
                }
            }
            // The arguments move into the run; `prepared` keeps the digest.
            let mut group: Vec<(usize, &RegisteredTool, Value)> = Vec::with_capacity(end - i);
            for (k, p) in prepared.iter_mut().enumerate().take(end).skip(i) {
                if let Prepared::Run { tool, args, .. } = p {
                    group.push((k, *tool, std::mem::take(args)));
                }
            }
            i = end;
            if self.args.run_token.is_cancelled() {
                // Calls queued behind a cancellation never start.
                for (k, _, _) in group {
                    results[k] = Some(fail(&calls[k], self.cancelled_error()));
                }
                continue;
            }
            let this = &*self;
            if let [(k, tool, _)] = group.as_slice() {
                // The common case, one call: no stream machinery.
                let (k, tool) = (*k, *tool);
                let args = group.pop().map(|(_, _, a)| a).unwrap_or_default();
                let (env, tries, approval) =
                    this.run_with_retries(step, &calls[k], tool, args).await;
                results[k] = Some(env);
                attempts.extend(tries);
                approvals.extend(approval);
                continue;
            }
            let ks: Vec<usize> = group.iter().map(|(k, _, _)| *k).collect();
            // Collected first: a lazy `map` closure inside the stream trips the
            // compiler's higher-ranked lifetime inference for the actor future.
            let runs: Vec<_> = group
                .into_iter()
                .map(|(k, tool, args)| this.run_with_retries(step, &calls[k], tool, args))
                .collect();
            let done: Vec<CallOutcome> = futures::stream::iter(runs)
                .buffered(self.args.max_parallel.max(1))
                .collect()
                .await;
            for (k, (env, tries, approval)) in ks.into_iter().zip(done) {
                results[k] = Some(env);
                attempts.extend(tries);
                approvals.extend(approval);
            }
        }

        let mut out = Vec::with_capacity(calls.len());
        for (k, p) in prepared.into_iter().enumerate() {
            let env = match p {
                Prepared::Done(env) => env,
                Prepared::Run { digest, .. } => {
                    let env = results[k].take().unwrap_or_else(|| lost(&calls[k]));
                    if is_recordable(&env) {
                        self.table
                            .insert(calls[k].id.clone(), (digest, env.clone()));
                    }
                    env
                }
                Prepared::SameAs(first) => out
                    .get(first)
                    .map(replay)
                    .unwrap_or_else(|| lost(&calls[k])),
            };
            out.push(env);
        }
        Executed {
            results: out,
            attempts,
            approvals,
        }
    }

    fn prepare_all<'a>(
        &self,
        registry: &'a ToolRegistry,
        calls: &'a [ToolCall],
        granted: usize,
    ) -> Vec<Prepared<'a>> {
        let mut prepared = Vec::with_capacity(calls.len());
        // Batches are small: a linear scan beats hashing (and allocates nothing for
        // the usual single call).
        let mut batch_ids: Vec<(&str, usize, u128)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let p = if i >= granted {
                Prepared::Done(fail(
                    call,
                    ToolError::new(
                        ErrorCode::Ebudget,
                        "tool-call budget exhausted; the call was not run",
                    )
                    .with_action("finish with what you have"),
                ))
            } else {
                self.prepare(registry, call)
            };
            // A repeated id inside one batch is judged against the earlier call.
            let earlier = batch_ids.iter().find(|(id, _, _)| *id == call.id.as_str());
            let p = match (p, earlier) {
                (Prepared::Run { digest, .. }, Some((_, first, first_digest)))
                    if *first_digest == digest =>
                {
                    Prepared::SameAs(*first)
                }
                (Prepared::Run { .. }, Some(_)) => Prepared::Done(conflict(call)),
                (Prepared::Run { tool, args, digest }, None) => {
                    if calls.len() > 1 {
                        batch_ids.push((&call.id, i, digest));
                    }
                    Prepared::Run { tool, args, digest }
                }
                (other, _) => other,
            };
            prepared.push(p);
        }
        prepared
    }

    fn prepare<'a>(&self, registry: &'a ToolRegistry, call: &ToolCall) -> Prepared<'a> {
        let Some(tool) = registry.get(&call.name) else {
            return Prepared::Done(fail(
                call,
                ToolError::new(
                    ErrorCode::Enotool,
                    format!("no tool named \"{}\"", call.name),
                )
                .with_action(format!("call one of: {}", registry.names().join(", "))),
            ));
        };
        let args = match call.arguments.to_value() {
            Ok(v) => v,
            Err(msg) => {
                return Prepared::Done(fail(
                    call,
                    ToolError::new(ErrorCode::Einval, msg)
                        .with_action("send the arguments as one valid JSON object"),
                ));
            }
        };
        if let Err(problems) = tool.validate(&args) {
            return Prepared::Done(fail(
                call,
                ToolError::new(
                    ErrorCode::Einval,
                    format!(
                        "arguments do not match the schema of {}: {problems}",
                        call.name
                    ),
                )
                .with_action("fix the arguments to match the tool's input_schema and call again"),
            ));
        }
        if !self.args.grants.allows(&tool.contract) {
            return Prepared::Done(fail(
                call,
                ToolError::new(
                    ErrorCode::Eperm,
                    format!(
                        "this run is not granted tool {} (scope {})",
                        call.name, tool.contract.auth_scope
                    ),
                )
                .with_action("use a granted tool or finish"),
            ));
        }
        let mut f = Fingerprinter::new();
        f.str(&call.name).value(&args);
        let digest = f.finish_u128();
        if let Some((recorded_digest, recorded)) = self.table.get(&call.id) {
            return Prepared::Done(if *recorded_digest == digest {
                replay(recorded)
            } else {
                conflict(call)
            });
        }
        Prepared::Run { tool, args, digest }
    }

    /// Runs one call, retrying retryable failures within the contract's and the
    /// run's retry allowance. Returns the final envelope and, when the call was
    /// retried, a record of every attempt (a call that ran once is fully described
    /// by its envelope, whose `attempt` is 1).
    async fn run_with_retries(
        &self,
        step: u64,
        call: &ToolCall,
        tool: &RegisteredTool,
        args: Value,
    ) -> (ResultEnvelope, Vec<AttemptRecord>, Option<AppliedInput>) {
        let contract = &tool.contract;
        let mut approval = None;
        if self.args.approval.required_for(contract) {
            let (outcome, applied) = self.await_approval(step, call).await;
            approval = applied;
            if let Err(refused) = outcome {
                return (fail(call, refused), Vec::new(), approval);
            }
        }
        let mut records = Vec::new();
        let mut attempt = 1u32;
        // Arguments are only kept for another attempt when one is possible.
        let mut args = Some(args);
        loop {
            self.args.events.emit(|| RunEvent::ToolCallStarted {
                step,
                tool_call_id: call.id.clone(),
                tool: call.name.clone(),
                attempt,
            });
            let this_args = if contract.may_retry() {
                args.clone().unwrap_or_default()
            } else {
                args.take().unwrap_or_default()
            };
            let mut env = self.run_one(step, call, tool, this_args, attempt).await;
            env.attempt = attempt;
            let retry = match &env.error {
                Some(e) => {
                    e.retryable
                        && contract.may_retry()
                        && attempt <= contract.max_retries
                        && !matches!(e.code, ErrorCode::Eperm | ErrorCode::Ecanceled)
                        && !self.args.run_token.is_cancelled()
                        // Check-before-spend on the run's retry budget.
                        && ask(&self.args.budget, BudgetMsg::SpendRetry).await.unwrap_or(false)
                }
                None => false,
            };
            if !retry {
                if attempt > 1 {
                    records.push(attempt_record(call, contract, &env, None));
                }
                return (env, records, approval);
            }
            let backoff = self.args.retry.backoff(attempt);
            records.push(attempt_record(call, contract, &env, Some(backoff)));
            tokio::select! {
                _ = self.args.run_token.cancelled() => return (env, records, approval),
                _ = tokio::time::sleep(backoff) => {}
            }
            attempt += 1;
        }
    }

    /// Parks the call in the state keeper until a human decides, the approval
    /// timeout passes, or the run is cancelled (the wall clock keeps running).
    async fn await_approval(
        &self,
        step: u64,
        call: &ToolCall,
    ) -> (Result<(), ToolError>, Option<AppliedInput>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pending = PendingApproval {
            step,
            call: call.clone(),
            requested_at: now_millis(),
        };
        if let Err(e) = self
            .args
            .state
            .cast(StateMsg::AwaitApproval(pending, tx.into()))
        {
            let error = ToolError::new(ErrorCode::Einternal, format!("state keeper gone: {e}"));
            return (Err(error), None);
        }
        self.args.events.emit(|| RunEvent::AwaitingApproval {
            step,
            call: call.clone(),
        });
        let timeout = self.args.approval.timeout.unwrap_or(Duration::MAX);
        let withdraw = || {
            let _ = self.args.state.cast(StateMsg::Withdraw(call.id.clone()));
        };
        let decision = tokio::select! {
            decision = rx => match decision {
                Ok(d) => d,
                Err(_) => return (Err(self.cancelled_error()), None),
            },
            _ = self.args.run_token.cancelled() => {
                withdraw();
                return (Err(self.cancelled_error()), None);
            }
            _ = tokio::time::sleep(timeout) => {
                withdraw();
                let error = ToolError::new(
                    ErrorCode::Eperm,
                    format!("no human approved this call within {} ms", timeout.as_millis()),
                )
                .with_action("ask for approval again later, or finish without it");
                return (Err(error), None);
            }
        };
        let input = RunInput::Approval {
            tool_call_id: call.id.clone(),
            approved: decision.approved,
            reason: decision.reason.clone(),
        };
        let (seq, version) = decision.applied;
        let event_input = input.clone();
        self.args.events.emit(|| RunEvent::InputApplied {
            seq,
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
        (outcome, Some((seq, version, input)))
    }

    async fn run_one(
        &self,
        step: u64,
        call: &ToolCall,
        tool: &RegisteredTool,
        args: Value,
        attempt: u32,
    ) -> ResultEnvelope {
        if self.args.run_token.is_cancelled() {
            return fail(call, self.cancelled_error());
        }
        let started = Instant::now();
        let token = self.args.run_token.child_token();
        let ctx = ToolContext {
            run_id: Arc::clone(&self.args.run_id),
            call_id: call.id.clone(),
            workdir: Arc::clone(&self.args.workdir),
            artifacts: Arc::clone(&self.args.artifacts),
            cancel: token.clone(),
            attempt,
            agents: self.args.agents.clone(),
        };
        let timeout_ms = tool.contract.timeout_ms;
        let work = async {
            tool.tool.precondition(&args, &ctx).await?;
            tool.tool.call(args, &ctx).await
        };
        // A panicking tool becomes EINTERNAL; the executor and the run live on.
        let work = AssertUnwindSafe(work).catch_unwind();
        tokio::pin!(work);
        let sleep = tokio::time::sleep(Duration::from_millis(timeout_ms));
        let mut finished = true;
        let outcome = tokio::select! {
            biased;
            r = &mut work => match r {
                Ok(r) => r,
                Err(panic) => Err(ToolError::new(
                    ErrorCode::Einternal,
                    format!("tool {} panicked: {}", call.name, panic_message(&panic)),
                )),
            },
            _ = token.cancelled() => {
                finished = false;
                Err(self.cancelled_error())
            }
            _ = sleep => {
                finished = false;
                Err(ToolError::new(
                    ErrorCode::Etimedout,
                    format!("call exceeded its {timeout_ms} ms timeout"),
                )
                .with_action("retry later or with a smaller request"))
            }
        };
        if !finished {
            // Tools that hold something outside their future (a process group) get
            // their declared grace, capped, to release it; others are dropped now.
            token.cancel();
            let grace = tool.cancel_grace.min(CANCEL_GRACE);
            if !grace.is_zero() {
                let _ = tokio::time::timeout(grace, &mut work).await;
            }
        }
        let mut env = match outcome {
            Ok(out) => ResultEnvelope::success(&call.id, &call.name, out.data, out.refs),
            Err(e) => fail(call, e),
        };
        env.cost.latency_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(run_id = %self.args.run_id, step, call_id = %call.id, tool = %call.name, attempt, ok = env.ok, "tool call finished");
        env
    }

    fn cancelled_error(&self) -> ToolError {
        if self.args.deadline.is_some_and(|d| Instant::now() >= d) {
            ToolError::new(
                ErrorCode::Etimedout,
                "cancelled: the run's wall-clock deadline passed",
            )
            .retryable(false)
        } else {
            ToolError::new(ErrorCode::Ecanceled, "cancelled before completion")
        }
    }
}

fn attempt_record(
    call: &ToolCall,
    contract: &agentry_protocol::tool::ToolContract,
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

fn is_parallel_safe(p: &Prepared<'_>) -> bool {
    matches!(p, Prepared::Run { tool, .. } if tool.contract.is_parallel_safe())
}

/// Transient outcomes are not recorded, so the same call id may be tried again.
fn is_recordable(env: &ResultEnvelope) -> bool {
    !matches!(
        env.error_code(),
        Some(ErrorCode::Ecanceled | ErrorCode::Etimedout | ErrorCode::Eunavail)
    )
}

fn fail(call: &ToolCall, error: ToolError) -> ResultEnvelope {
    ResultEnvelope::failure(&call.id, &call.name, error)
}

fn conflict(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(
            ErrorCode::Einval,
            format!(
                "call id \"{}\" was already used for a different call; nothing was run",
                call.id
            ),
        )
        .with_action("use a fresh call id for a new call"),
    )
}

fn replay(recorded: &ResultEnvelope) -> ResultEnvelope {
    let mut env = recorded.clone();
    env.replayed = true;
    env.observed_at = agentry_protocol::now_millis();
    env.cost.latency_ms = 0;
    env
}

fn lost(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(ErrorCode::Einternal, "the executor lost this call's result"),
    )
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}
