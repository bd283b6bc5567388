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
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::event::RunEvent;
use agentry_protocol::fingerprint::{Fingerprinter, hex32};
use agentry_protocol::now_millis;
use agentry_protocol::state::{PendingApproval, Settlement};
use agentry_protocol::tool::{Idempotency, ToolCall};
use agentry_protocol::trace::{AttemptRecord, RunInput};
use agentry_store::{LedgerEntry, LedgerState, Write};
use agentry_tools::ToolContext;
use futures::{FutureExt, StreamExt};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::Value;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::accept;
use crate::budget::BudgetMsg;
use crate::call::ask;
use crate::config::ApprovalConfig;
use crate::durable::{RunLog, rerunnable};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// One envelope per call, in request order (shared with the idempotency
    /// table, and then with the session).
    pub results: Vec<Arc<ResultEnvelope>>,
    /// Every attempt of the calls that were retried.
    pub attempts: Vec<AttemptRecord>,
    /// Approval decisions applied while the calls waited: (input sequence number,
    /// state version, the decision).
    pub approvals: Vec<AppliedInput>,
    /// A call that must not run twice was started (its intent is on disk, for a
    /// durable run).
    pub side_effects: bool,
}

/// Messages the executor accepts.
pub enum ExecutorMsg {
    /// Run a step's calls. Only the first `granted` calls have tool-call budget; the
    /// rest are answered `EBUDGET` without running.
    Execute {
        /// Step number.
        step: u64,
        /// The step's decision (shared with the conductor, which keeps it for the
        /// session); its calls, in request order, are run. Any other decision
        /// runs nothing.
        decision: Arc<Decision>,
        /// How many calls the budget supervisor granted.
        granted: usize,
        /// The step is acted on again after a restart: calls the ledger records as
        /// finished are not run again, and calls it records as started are settled
        /// by their contract.
        redrive: bool,
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
    /// The working directory as a handle, opened once when the run started:
    /// file tools and acceptance checks resolve paths beneath it.
    pub root: Arc<agentry_tools::fs::WorkRoot>,
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
    /// Where a durable run's call ledger is committed; the executor reads it back
    /// when it starts (a resumed run, or a restart after the executor died).
    pub log: Option<RunLog>,
}

/// One row of the idempotency table: the call ledger, in memory.
struct Row {
    /// Digest of name + normalized arguments.
    digest: u128,
    state: LedgerState,
    outcome: Option<Arc<ResultEnvelope>>,
}

/// Executor state: its arguments and the idempotency table.
pub struct ExecutorState {
    args: ExecutorArgs,
    /// call id → ledger row.
    table: HashMap<String, Row>,
    /// intent key → call id, for calls of `required_key` tools.
    intents: HashMap<u128, String>,
}

/// How a call that passed the pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Approval if required, then run.
    Fresh,
    /// A human approved it before a restart: run without asking again.
    Approved,
    /// Started before a restart, safe to run again by its contract.
    Rerun,
    /// Started before a restart, must not run again silently: a human settles it.
    Unsettled,
}

/// What the pipeline decided for one call before anything ran.
enum Prepared<'a> {
    Done(ResultEnvelope),
    Run {
        tool: &'a RegisteredTool,
        args: Value,
        digest: u128,
        mode: Mode,
    },
    /// Same id and call as an earlier call of this batch: reuse its result.
    SameAs(usize),
    /// A keyed action already done under another call id: its recorded outcome,
    /// recorded again under this id.
    Keyed {
        env: ResultEnvelope,
        digest: u128,
    },
}

/// One call as it goes to `run_with_retries`.
struct Job<'a> {
    step: u64,
    position: usize,
    call: &'a ToolCall,
    tool: &'a RegisteredTool,
    digest: u128,
    mode: Mode,
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
        let mut state = ExecutorState {
            args,
            table: HashMap::new(),
            intents: HashMap::new(),
        };
        if let Some(log) = state.args.log.clone() {
            state.load_ledger(&log).await?;
        }
        Ok(state)
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
                reply,
            } => {
                let calls: &[ToolCall] = match &*decision {
                    Decision::ToolCalls { calls } => calls,
                    _ => &[],
                };
                // Boxed for the same reason as the conductor's step: a small
                // handler future is cheap for ractor to move.
                let executed = Box::pin(state.execute(step, calls, granted, redrive)).await;
                let _ = reply.send(executed);
            }
            ExecutorMsg::Verify { checks, reply } => {
                let ctx = state.check_context();
                let outcomes = Box::pin(accept::run_checks(&checks, &ctx)).await;
                let _ = reply.send(outcomes);
            }
        }
        Ok(())
    }
}

impl ExecutorState {
    /// What acceptance checks run with: the run's root, artifacts and token
    /// (each command check gets its own call id and a child token).
    fn check_context(&self) -> ToolContext {
        ToolContext {
            run_id: Arc::clone(&self.args.run_id),
            call_id: "accept".to_string(),
            workdir: Arc::clone(&self.args.workdir),
            root: Arc::clone(&self.args.root),
            artifacts: Arc::clone(&self.args.artifacts),
            cancel: self.args.run_token.clone(),
            attempt: 1,
            operation_id: Arc::from("accept"),
            agents: None,
        }
    }

    /// Reads the run's ledger back from the store, after everything queued
    /// before has landed.
    async fn load_ledger(&mut self, log: &RunLog) -> Result<(), ActorProcessingErr> {
        log.writer.commit(Vec::new()).await?;
        let Some(run) = log.writer.store().load(&log.run_id)? else {
            return Ok(());
        };
        for entry in run.ledger {
            let Ok(digest) = u128::from_str_radix(&entry.digest, 16) else {
                continue;
            };
            if let Ok(key) = u128::from_str_radix(&entry.intent_key, 16) {
                let keyed = self
                    .args
                    .registry
                    .get(&entry.call.name)
                    .is_some_and(|t| t.contract.idempotency == Idempotency::RequiredKey);
                if keyed {
                    self.intents.insert(key, entry.call_id.clone());
                }
            }
            self.table.insert(
                entry.call_id,
                Row {
                    digest,
                    state: entry.state,
                    outcome: entry.outcome.map(Arc::new),
                },
            );
        }
        Ok(())
    }

    /// Records a call's ledger row (durable runs: in the store too). With `wait`
    /// the row is on disk when this returns.
    async fn record(
        &self,
        job: &Job<'_>,
        state: LedgerState,
        outcome: Option<&ResultEnvelope>,
        wait: bool,
    ) -> Result<(), ToolError> {
        let Some(log) = &self.args.log else {
            return Ok(());
        };
        let key = intent_key(&self.args.run_id, job.digest);
        let entry = LedgerEntry {
            call_id: job.call.id.clone(),
            step: job.step,
            position: job.position as u32,
            call: job.call.clone(),
            digest: String::from(&*hex32(job.digest)),
            intent_key: String::from(&*hex32(key)),
            operation_id: operation_id(&self.args.run_id, job.digest).to_string(),
            state,
            outcome: outcome.cloned(),
            updated_at_ms: now_millis(),
        };
        let writes = vec![Write::Ledger {
            run_id: log.run_id.to_string(),
            entry,
        }];
        if !wait {
            log.writer.submit(writes);
            return Ok(());
        }
        log.writer.commit(writes).await.map_err(|e| {
            ToolError::new(
                ErrorCode::Einternal,
                format!("the call could not be recorded before it ran, so it was not run: {e}"),
            )
        })
    }

    /// Keeps a call's outcome in the idempotency table.
    fn remember(&mut self, call_id: &str, digest: u128, env: &Arc<ResultEnvelope>) {
        self.table.insert(
            call_id.to_string(),
            Row {
                digest,
                state: LedgerState::Outcome,
                outcome: Some(Arc::clone(env)),
            },
        );
    }

    /// Runs a batch through the pipeline.
    pub async fn execute(
        &mut self,
        step: u64,
        calls: &[ToolCall],
        granted: usize,
        redrive: bool,
    ) -> Executed {
        let registry = Arc::clone(&self.args.registry);
        let mut prepared = self.prepare_all(&registry, calls, granted, redrive);
        let side_effects = prepared
            .iter()
            .any(|p| matches!(p, Prepared::Run { tool, .. } if !rerunnable(&tool.contract)));

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
            let mut group: Vec<(Job<'_>, Value)> = Vec::with_capacity(end - i);
            for (k, p) in prepared.iter_mut().enumerate().take(end).skip(i) {
                if let Prepared::Run {
                    tool,
                    args,
                    digest,
                    mode,
                } = p
                {
                    let job = Job {
                        step,
                        position: k,
                        call: &calls[k],
                        tool,
                        digest: *digest,
                        mode: *mode,
                    };
                    group.push((job, std::mem::take(args)));
                }
            }
            i = end;
            if self.args.run_token.is_cancelled() {
                // Calls queued behind a cancellation never start.
                for (job, _) in group {
                    results[job.position] = Some(fail(job.call, self.cancelled_error()));
                }
                continue;
            }
            let this = &*self;
            if group.len() == 1 {
                // The common case, one call: no stream machinery.
                if let Some((job, args)) = group.pop() {
                    let k = job.position;
                    let (env, tries, approval) = this.run_with_retries(job, args).await;
                    results[k] = Some(env);
                    attempts.extend(tries);
                    approvals.extend(approval);
                }
                continue;
            }
            let ks: Vec<usize> = group.iter().map(|(job, _)| job.position).collect();
            // Collected first: a lazy `map` closure inside the stream trips the
            // compiler's higher-ranked lifetime inference for the actor future.
            let runs: Vec<_> = group
                .into_iter()
                .map(|(job, args)| this.run_with_retries(job, args))
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

        let mut out: Vec<Arc<ResultEnvelope>> = Vec::with_capacity(calls.len());
        for (k, p) in prepared.into_iter().enumerate() {
            let env = match p {
                Prepared::Done(env) => Arc::new(env),
                Prepared::Run { digest, tool, .. } => {
                    let env = Arc::new(results[k].take().unwrap_or_else(|| lost(&calls[k])));
                    if is_recordable(&env) {
                        if tool.contract.idempotency == Idempotency::RequiredKey {
                            let key = intent_key(&self.args.run_id, digest);
                            self.intents.insert(key, calls[k].id.clone());
                        }
                        self.remember(&calls[k].id, digest, &env);
                    }
                    env
                }
                Prepared::SameAs(first) => Arc::new(
                    out.get(first)
                        .map(|env| replay(env, &calls[k]))
                        .unwrap_or_else(|| lost(&calls[k])),
                ),
                Prepared::Keyed { env, digest } => {
                    let env = Arc::new(env);
                    let job = Job {
                        step,
                        position: k,
                        call: &calls[k],
                        tool: match registry.get(&calls[k].name) {
                            Some(t) => t,
                            None => {
                                out.push(env);
                                continue;
                            }
                        },
                        digest,
                        mode: Mode::Fresh,
                    };
                    let _ = self
                        .record(&job, LedgerState::Outcome, Some(&env), false)
                        .await;
                    self.remember(&calls[k].id, digest, &env);
                    env
                }
            };
            out.push(env);
        }
        Executed {
            results: out,
            attempts,
            approvals,
            side_effects,
        }
    }

    fn prepare_all<'a>(
        &self,
        registry: &'a ToolRegistry,
        calls: &'a [ToolCall],
        granted: usize,
        redrive: bool,
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
                self.prepare(registry, call, redrive)
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
                (
                    Prepared::Run {
                        tool,
                        args,
                        digest,
                        mode,
                    },
                    None,
                ) => {
                    if calls.len() > 1 {
                        batch_ids.push((&call.id, i, digest));
                    }
                    Prepared::Run {
                        tool,
                        args,
                        digest,
                        mode,
                    }
                }
                (other, _) => other,
            };
            prepared.push(p);
        }
        prepared
    }

    fn prepare<'a>(
        &self,
        registry: &'a ToolRegistry,
        call: &ToolCall,
        redrive: bool,
    ) -> Prepared<'a> {
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
        let run = |mode| Prepared::Run {
            tool,
            args,
            digest,
            mode,
        };
        if let Some(row) = self.table.get(&call.id) {
            if row.digest != digest {
                return Prepared::Done(conflict(call));
            }
            match (row.state, &row.outcome) {
                // A transient failure may be tried again under the same id, except
                // when the step is acted on again: then it is that step's outcome.
                (LedgerState::Outcome | LedgerState::Denied, Some(recorded))
                    if redrive || is_recordable(recorded) =>
                {
                    return Prepared::Done(replay(recorded, call));
                }
                // Started and never finished: only a crash leaves a row like this
                // (every finished attempt records an outcome, even a cancelled
                // one), so whether it took effect is unknown, redriven or not.
                (LedgerState::Intent | LedgerState::AwaitingDecision, _) => {
                    return run(if rerunnable(&tool.contract) {
                        Mode::Rerun
                    } else {
                        Mode::Unsettled
                    });
                }
                (LedgerState::Approved, _) if redrive => return run(Mode::Approved),
                _ => {}
            }
        }
        // The same action under a fresh call id: a keyed tool's recorded outcome.
        if tool.contract.idempotency == Idempotency::RequiredKey
            && let Some(row) = self
                .intents
                .get(&intent_key(&self.args.run_id, digest))
                .and_then(|id| self.table.get(id))
            && let Some(recorded) = row.outcome.as_ref().filter(|r| is_recordable(r))
        {
            return Prepared::Keyed {
                env: replay(recorded, call),
                digest,
            };
        }
        run(Mode::Fresh)
    }

    /// Runs one call, retrying retryable failures within the contract's and the
    /// run's retry allowance. Returns the final envelope and, when the call was
    /// retried, a record of every attempt (a call that ran once is fully described
    /// by its envelope, whose `attempt` is 1).
    async fn run_with_retries(
        &self,
        job: Job<'_>,
        args: Value,
    ) -> (ResultEnvelope, Vec<AttemptRecord>, Option<AppliedInput>) {
        let (step, call, tool) = (job.step, job.call, job.tool);
        let contract = &tool.contract;
        let operation_id = operation_id(&self.args.run_id, job.digest);
        let mut approval = None;
        match job.mode {
            Mode::Fresh if self.args.approval.required_for(contract) => {
                let _ = self
                    .record(&job, LedgerState::AwaitingApproval, None, false)
                    .await;
                // Rare paths are boxed: every call's future is as large as its
                // largest await, and the common path should stay small.
                let (outcome, applied) = Box::pin(self.await_approval(step, call)).await;
                approval = applied;
                if let Err(refused) = outcome {
                    let env = fail(call, refused);
                    if approval.is_some() {
                        let _ = self
                            .record(&job, LedgerState::Denied, Some(&env), false)
                            .await;
                    }
                    return (env, Vec::new(), approval);
                }
                let _ = self.record(&job, LedgerState::Approved, None, false).await;
            }
            Mode::Unsettled => {
                let (settled, applied) = Box::pin(self.await_settlement(&job)).await;
                approval = applied;
                match settled {
                    Ok(Settlement::Retry) => {}
                    Ok(_) => {
                        let env = settled_envelope(call, approval.as_ref());
                        let _ = self
                            .record(&job, LedgerState::Outcome, Some(&env), false)
                            .await;
                        return (env, Vec::new(), approval);
                    }
                    // No human settled it (the run was cancelled, or the process
                    // is going away and took the state keeper with it): whether
                    // the call took effect is as unknown as before, so its row
                    // stays parked and the next resume asks again. Recording
                    // this error as the outcome would have the resumed run
                    // replay "cancelled" and go on without the call.
                    Err(e) => return (fail(call, e), Vec::new(), approval),
                }
            }
            _ => {}
        }
        // On disk before the tool starts when running it twice would be wrong.
        if let Err(e) = self
            .record(&job, LedgerState::Intent, None, !rerunnable(contract))
            .await
        {
            return (fail(call, e), Vec::new(), approval);
        }
        let mut records = Vec::new();
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
            let retry = match &env.error {
                Some(e) => {
                    e.retryable
                        && contract.may_retry()
                        && attempt <= contract.max_retries
                        && !matches!(e.code, ErrorCode::Eperm | ErrorCode::Ecanceled)
                        && !self.args.run_token.is_cancelled()
                        // Check-before-spend on the run's retry budget.
                        && Box::pin(ask(&self.args.budget, BudgetMsg::SpendRetry))
                            .await
                            .unwrap_or(false)
                }
                None => false,
            };
            if !retry {
                if attempt > 1 {
                    records.push(attempt_record(call, contract, &env, None));
                }
                // A call the run's cancellation cut short may or may not have
                // taken effect: its row keeps the intent. The run is stopping;
                // should its stop not reach the disk (the process went away),
                // a resume then settles the call by its contract (re-run or a
                // human) instead of replaying "cancelled" as if it never ran.
                let cut_short = !env.ok && self.args.run_token.is_cancelled();
                if !cut_short {
                    let _ = self
                        .record(&job, LedgerState::Outcome, Some(&env), false)
                        .await;
                }
                return (env, records, approval);
            }
            let backoff = self.args.retry.backoff(attempt);
            records.push(attempt_record(call, contract, &env, Some(backoff)));
            tokio::select! {
                _ = self.args.run_token.cancelled() => {
                    let _ = self.record(&job, LedgerState::Outcome, Some(&env), false).await;
                    return (env, records, approval);
                }
                _ = tokio::time::sleep(backoff) => {}
            }
            attempt += 1;
        }
    }

    /// Parks a call a crash interrupted until a human settles it (or the run is
    /// cancelled: the deadline still applies). The park is on disk before the
    /// `awaiting_decision` event goes out, so an embedder may exit on that event
    /// and resume later.
    async fn await_settlement(
        &self,
        job: &Job<'_>,
    ) -> (Result<Settlement, ToolError>, Option<AppliedInput>) {
        let call = job.call;
        if let Err(e) = self
            .record(job, LedgerState::AwaitingDecision, None, true)
            .await
        {
            return (Err(e), None);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pending = PendingApproval {
            step: job.step,
            call: call.clone(),
            requested_at: now_millis(),
        };
        let parked = ask(&self.args.state, |parked| StateMsg::AwaitDecision {
            pending,
            parked,
            decision: tx.into(),
        });
        let parked = tokio::select! {
            r = parked => r.and_then(|r| r),
            _ = self.args.run_token.cancelled() => return (Err(self.cancelled_error()), None),
        };
        if let Err(e) = parked {
            let error = ToolError::new(
                ErrorCode::Einternal,
                format!("the call could not be parked for a decision: {e}"),
            );
            return (Err(error), None);
        }
        let step = job.step;
        self.args.events.emit(|| RunEvent::AwaitingDecision {
            step,
            call: call.clone(),
        });
        let (settlement, (seq, version)) = tokio::select! {
            d = rx => match d {
                Ok(d) => d,
                Err(_) => return (Err(self.cancelled_error()), None),
            },
            _ = self.args.run_token.cancelled() => return (Err(self.cancelled_error()), None),
        };
        let input = RunInput::Settlement {
            tool_call_id: call.id.clone(),
            settlement,
        };
        let event_input = input.clone();
        self.args.events.emit(|| RunEvent::InputApplied {
            seq,
            input: event_input,
        });
        (Ok(settlement), Some((seq, version, input)))
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
        operation_id: &Arc<str>,
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
            root: Arc::clone(&self.args.root),
            artifacts: Arc::clone(&self.args.artifacts),
            cancel: token.clone(),
            attempt,
            operation_id: Arc::clone(operation_id),
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

/// The host-issued operation id of an action: a digest of the run, the tool and
/// its normalized arguments, so a retry, a re-run after a crash and the same
/// action under a fresh call id all carry the same id.
pub fn operation_id(run_id: &str, call_digest: u128) -> Arc<str> {
    let mut id = [0u8; 35];
    id[..3].copy_from_slice(b"op-");
    id[3..].copy_from_slice(hex32(intent_key(run_id, call_digest)).as_bytes());
    // Only ASCII was written.
    Arc::from(std::str::from_utf8(&id).unwrap_or_default())
}

/// hash(tool, normalized arguments, operation scope = the run): the ledger's key
/// for "the same action".
pub fn intent_key(run_id: &str, call_digest: u128) -> u128 {
    let mut f = Fingerprinter::new();
    f.str(run_id).str(&hex32(call_digest));
    f.finish_u128()
}

/// The outcome recorded when a human settles an interrupted call.
fn settled_envelope(call: &ToolCall, applied: Option<&AppliedInput>) -> ResultEnvelope {
    match applied.map(|(_, _, input)| input) {
        Some(RunInput::Settlement {
            settlement: Settlement::Skip,
            ..
        }) => fail(
            call,
            ToolError::new(
                ErrorCode::Ecanceled,
                "the run was interrupted during this call and a human chose to skip it; treat it as not done",
            )
            .retryable(false)
            .with_action("do not assume it took effect; choose another way or finish"),
        ),
        _ => ResultEnvelope::success(
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

/// A recorded outcome handed back for `call` (the same call id, or the same
/// keyed action under a fresh id), marked `replayed`.
fn replay(recorded: &ResultEnvelope, call: &ToolCall) -> ResultEnvelope {
    let mut env = recorded.clone();
    env.tool_call_id.clone_from(&call.id);
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
