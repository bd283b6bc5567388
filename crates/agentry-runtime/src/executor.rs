//! The tool executor: validation, permission gate, idempotency table, execution.
//!
//! Every call goes through the same pipeline, in this order:
//! budget granted? → known tool? → arguments valid JSON and schema-valid? →
//! scope granted? → idempotency table (same id + same call: the recorded result,
//! `replayed: true`; same id + different call: `EINVAL`) → preconditions →
//! execute under the call's timeout and the run's cancellation token → envelope.
//!
//! Calls of one step whose tools are `read_only` run concurrently with their
//! read-only neighbours; any other call runs alone, in request order. Results are
//! always returned in request order, whatever the completion order.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use agentry_protocol::accept::{AcceptCheck, CheckOutcome};
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::fingerprint;
use agentry_protocol::tool::{Effect, ToolCall};
use agentry_tools::ToolContext;
use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;
use serde_json::{Value, json};
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::accept;
use crate::registry::{Grants, RegisteredTool, ToolRegistry};

/// How long a cancelled or timed-out call may run its own cancel path (killing a
/// process group, SIGTERM then SIGKILL) before its future is dropped.
pub const CANCEL_GRACE: Duration = Duration::from_millis(75);

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
        /// One envelope per call, in request order.
        reply: RpcReplyPort<Vec<ResultEnvelope>>,
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
}

/// Executor state: its arguments and the idempotency table.
pub struct ExecutorState {
    args: ExecutorArgs,
    /// call id → (digest of name + arguments, recorded result).
    table: HashMap<String, (String, ResultEnvelope)>,
}

/// What the pipeline decided for one call before anything ran.
enum Prepared<'a> {
    Done(ResultEnvelope),
    Run {
        tool: &'a RegisteredTool,
        args: Value,
        digest: String,
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
                let results = state.execute(step, &calls, granted).await;
                let _ = reply.send(results);
            }
            ExecutorMsg::Verify { checks, reply } => {
                let outcomes =
                    accept::run_checks(&checks, &state.args.workdir, &state.args.run_token).await;
                let _ = reply.send(outcomes);
            }
        }
        Ok(())
    }
}

impl ExecutorState {
    /// Runs a batch through the pipeline; one envelope per call, in request order.
    pub async fn execute(
        &mut self,
        step: u64,
        calls: &[ToolCall],
        granted: usize,
    ) -> Vec<ResultEnvelope> {
        let registry = Arc::clone(&self.args.registry);
        let mut prepared = Vec::with_capacity(calls.len());
        let mut batch_ids: HashMap<&str, (usize, String)> = HashMap::new();
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
                self.prepare(&registry, call)
            };
            // A repeated id inside one batch is judged against the earlier call.
            let p = match (p, batch_ids.get(call.id.as_str())) {
                (Prepared::Run { digest, .. }, Some((first, first_digest)))
                    if *first_digest == digest =>
                {
                    Prepared::SameAs(*first)
                }
                (Prepared::Run { .. }, Some(_)) => Prepared::Done(conflict(call)),
                (Prepared::Run { tool, args, digest }, None) => {
                    batch_ids.insert(&call.id, (i, digest.clone()));
                    Prepared::Run { tool, args, digest }
                }
                (other, _) => other,
            };
            prepared.push(p);
        }

        let mut results: Vec<Option<ResultEnvelope>> = vec![None; calls.len()];
        let mut i = 0;
        while i < prepared.len() {
            // A group: one non-read-only call, or a run of consecutive read-only calls.
            let mut end = i + 1;
            if is_read_only(&prepared[i]) {
                while end < prepared.len() && is_read_only(&prepared[end]) {
                    end += 1;
                }
            }
            let group = (i..end).filter_map(|k| match &prepared[k] {
                Prepared::Run { tool, args, .. } => Some((k, *tool, args.clone())),
                _ => None,
            });
            let this = &*self;
            let futures: Vec<_> = group
                .map(|(k, tool, args)| {
                    let call = &calls[k];
                    async move { (k, this.run_one(step, call, tool, args).await) }
                })
                .collect();
            for (k, env) in futures::future::join_all(futures).await {
                results[k] = Some(env);
            }
            i = end;
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
        out
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
        let digest = fingerprint::digest(&json!({ "name": call.name, "arguments": args }));
        if let Some((recorded_digest, recorded)) = self.table.get(&call.id) {
            return Prepared::Done(if *recorded_digest == digest {
                replay(recorded)
            } else {
                conflict(call)
            });
        }
        Prepared::Run { tool, args, digest }
    }

    async fn run_one(
        &self,
        step: u64,
        call: &ToolCall,
        tool: &RegisteredTool,
        args: Value,
    ) -> ResultEnvelope {
        let started = Instant::now();
        let token = self.args.run_token.child_token();
        let ctx = ToolContext {
            run_id: Arc::clone(&self.args.run_id),
            call_id: call.id.clone(),
            workdir: Arc::clone(&self.args.workdir),
            artifacts: Arc::clone(&self.args.artifacts),
            cancel: token.clone(),
            attempt: 1,
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
        let outcome = tokio::select! {
            biased;
            r = &mut work => match r {
                Ok(r) => r,
                Err(panic) => Err(ToolError::new(
                    ErrorCode::Einternal,
                    format!("tool {} panicked: {}", call.name, panic_message(&panic)),
                )),
            },
            _ = token.cancelled() => Err(self.cancelled_error()),
            _ = sleep => Err(ToolError::new(
                ErrorCode::Etimedout,
                format!("call exceeded its {timeout_ms} ms timeout"),
            )
            .with_action("retry later or with a smaller request")),
        };
        if outcome.is_err() && !token.is_cancelled() {
            token.cancel();
        }
        if token.is_cancelled() {
            // Give the tool a short grace to release what it holds outside its
            // future (a process group) through its cancel path, then drop it.
            let _ = tokio::time::timeout(CANCEL_GRACE, &mut work).await;
        }
        let mut env = match outcome {
            Ok(out) => ResultEnvelope::success(&call.id, &call.name, out.data, out.refs),
            Err(e) => fail(call, e),
        };
        env.cost.latency_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(run_id = %self.args.run_id, step, call_id = %call.id, tool = %call.name, ok = env.ok, "tool call finished");
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

fn is_read_only(p: &Prepared<'_>) -> bool {
    matches!(p, Prepared::Run { tool, .. } if tool.contract.effect == Effect::ReadOnly)
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
