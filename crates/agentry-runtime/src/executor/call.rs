//! One attempt of one call: the tool runs under the call's timeout and the
//! step's cancellation token (a user's interrupt, or the run's cancellation);
//! a panic, a timeout or a cancellation becomes an
//! envelope like any other failure.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use agentry_protocol::envelope::{CutData, ErrorCode, ResultEnvelope, ToolError, cut_head};
use agentry_protocol::tool::ToolCall;
use agentry_tools::{Deadlines, ProcessLog, RemoteLog, ToolContext};
use futures::FutureExt;
use serde_json::Value;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::envelope::fail;
use super::ledger::{LedgerProcesses, LedgerRemote};
use super::msg::CutShort;
use super::state::ExecutorState;
use crate::registry::RegisteredTool;

/// The longest a cancelled or timed-out call may run its own cancel path (killing
/// a process group, SIGTERM then SIGKILL) before its future is dropped; each tool
/// declares its own (`Tool::cancel_grace`, zero by default).
pub const CANCEL_GRACE: Duration = Duration::from_millis(75);

/// One attempt of a call, as `run_one` takes it.
pub(super) struct Attempt<'a> {
    pub(super) step: u64,
    pub(super) call: &'a ToolCall,
    pub(super) tool: &'a RegisteredTool,
    /// From 1.
    pub(super) attempt: u32,
    pub(super) operation_id: &'a Arc<str>,
    /// The token it runs under: the step's, or the run's for a call a human
    /// chose to run again after it was left unsettled.
    pub(super) under: &'a CancellationToken,
    /// The call's `execute_tool` span.
    pub(super) span: &'a tracing::Span,
}

impl ExecutorState {
    /// Runs one attempt of a call.
    pub(super) async fn run_one(&self, one: Attempt<'_>, args: Value) -> ResultEnvelope {
        let Attempt {
            step,
            call,
            tool,
            attempt,
            operation_id,
            under,
            span,
        } = one;
        if under.is_cancelled() {
            return fail(call, self.cancelled_error());
        }
        let started = Instant::now();
        let token = under.child_token();
        let mut ctx = self.tool_context(call, &token, attempt, operation_id);
        ctx.deadlines = self.deadlines(tool.contract.timeout_ms);
        self.humans.at_step(step);
        // What the tool passes on (a process's TRACEPARENT, an MCP call's
        // _meta, a child run's parent): this call's span when it is exported.
        if let Some(tp) = agentry_telemetry::traceparent(span) {
            ctx.traceparent = Some(tp.into());
        }
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
            // The tool saw its token first and answered its own cancellation:
            // the host says why it was cancelled (the deadline, an abort, the
            // user's interrupt), as when the host's select sees it first.
            Err(e) if e.code == ErrorCode::Ecanceled && under.is_cancelled() => {
                fail(call, self.cancelled_error())
            }
            Ok(out) => ResultEnvelope::success(&call.id, &call.name, out.data, out.refs),
            Err(e) => fail(call, e),
        };
        self.save_if_large(&mut env, tool).await;
        env.cost.latency_ms = started.elapsed().as_millis() as u64;
        tracing::debug!(run_id = %self.args.run_id, step, call_id = %call.id, tool = %call.name, attempt, ok = env.ok, "tool call finished");
        env
    }

    /// A result longer than the run's cap keeps only its head: its data is
    /// saved whole for the model to read back in parts (`result.read`), the
    /// envelope keeps the head and the ref, so no holder of the result (the
    /// session, the policy, events, the ledger, the store, the trace) holds
    /// what a tool returned past the cap. A result that cannot be saved is
    /// cut all the same and logged: the model is told the rest was not saved.
    /// `task.finish` keeps its data: the host reads the answer from it, and
    /// it is the model's own output, held in its decision already.
    async fn save_if_large(&self, env: &mut ResultEnvelope, tool: &RegisteredTool) {
        let cap = self.args.result_cap;
        if let Some(error) = &mut env.error
            && error.message.len() > cap
        {
            cut_message(&mut error.message, cap);
        }
        let Some(data) = &env.data else { return };
        if longer_than(data, cap) {
            // Boxed: the rare path; unboxed, its locals would be in every call's future.
            Box::pin(self.save_large(env, tool)).await;
        }
    }

    /// Saves the data of a result longer than the cap, then cuts it.
    async fn save_large(&self, env: &mut ResultEnvelope, tool: &RegisteredTool) {
        let cap = self.args.result_cap;
        let Some(Ok(text)) = env.data.as_ref().map(serde_json::to_string) else {
            return;
        };
        // Secret fields anywhere in the data, before the data is gone.
        crate::redaction::register_result(self.args.events.redactor(), &tool.contract, env);
        let cut = CutData::of(&text, cap);
        let root = Arc::clone(&self.args.root);
        let workdir = Arc::clone(&self.args.workdir);
        let artifacts = Arc::clone(&self.args.artifacts);
        let saved = tokio::task::spawn_blocking(move || {
            agentry_tools::save_result(&root, &workdir, &artifacts, text.as_bytes())
        })
        .await;
        match saved {
            Ok(Ok(reference)) => env.saved = Some(reference),
            Ok(Err(e)) => {
                tracing::warn!(run_id = %self.args.run_id, call_id = %env.tool_call_id, error = %e, "a large result could not be saved");
            }
            Err(e) => {
                tracing::warn!(run_id = %self.args.run_id, call_id = %env.tool_call_id, error = %e, "a large result could not be saved");
            }
        }
        if tool.contract.name != agentry_tools::FINISH_TOOL {
            env.data = None;
            env.cut = Some(cut);
        }
    }

    /// What a tool sees of the run for one attempt of a call.
    fn tool_context(
        &self,
        call: &ToolCall,
        token: &CancellationToken,
        attempt: u32,
        operation_id: &Arc<str>,
    ) -> ToolContext {
        ToolContext {
            run: Arc::clone(&self.scope),
            call_id: call.id.clone(),
            cancel: token.clone(),
            attempt,
            operation_id: Arc::clone(operation_id),
            processes: self
                .args
                .log
                .as_ref()
                .map(|log| Arc::new(LedgerProcesses::new(log, &call.id)) as Arc<dyn ProcessLog>),
            remote: self.args.log.as_ref().map(|log| {
                let follow = self.ledger.follow(&call.id).cloned();
                Arc::new(LedgerRemote::new(log, &call.id, follow)) as Arc<dyn RemoteLog>
            }),
            deadlines: Deadlines::default(),
            traceparent: Some(Arc::clone(&self.args.traceparent)),
        }
    }

    /// A call's deadlines on the wall clock, for a tool to pass on: the
    /// earlier of its timeout (from now) and the run's deadline.
    fn deadlines(&self, timeout_ms: u64) -> Deadlines {
        let now = Instant::now();
        let wall = std::time::SystemTime::now();
        let run = self
            .args
            .deadline
            .map(|d| wall + d.saturating_duration_since(now));
        let timeout = wall.checked_add(Duration::from_millis(timeout_ms));
        let call = match (timeout, run) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        };
        Deadlines { call, run }
    }

    /// The error of a call a cancellation stopped: `ETIMEDOUT` once the run's
    /// deadline passed, `ECANCELED` for the run's cancellation, and for a user's
    /// interrupt an `ECANCELED` that points the model at the user's message.
    pub(super) fn cancelled_error(&self) -> ToolError {
        if self.args.deadline.is_some_and(|d| Instant::now() >= d) {
            ToolError::new(
                ErrorCode::Etimedout,
                "cancelled: the run's wall-clock deadline passed",
            )
            .retryable(false)
        } else if self.args.run_token.is_cancelled() {
            ToolError::new(ErrorCode::Ecanceled, "cancelled before completion")
        } else {
            ToolError::new(
                ErrorCode::Ecanceled,
                "interrupted by the user: this call was cancelled before it finished (or before it started)",
            )
            .retryable(false)
            .with_action("read the user's message that follows and do what it asks")
        }
    }

    /// What the step's cancellation did to a call it stopped: an interrupt's
    /// cut, or nothing of the user's (the run is being cancelled).
    pub(super) fn cut_short(&self) -> CutShort {
        if crate::interrupt::is_cut(&self.cut, &self.args.run_token) {
            CutShort::Cancelled
        } else {
            CutShort::No
        }
    }
}

/// Whether `value` is longer than `cap` bytes as JSON; stops writing at the cap,
/// so a small result costs one serialization into nothing.
fn longer_than(value: &Value, cap: usize) -> bool {
    struct Counter {
        left: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self.left.checked_sub(buf.len()) {
                Some(left) => {
                    self.left = left;
                    Ok(buf.len())
                }
                None => Err(std::io::Error::other("over the cap")),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(&mut Counter { left: cap }, value).is_err()
}

/// An error message longer than `cap` bytes keeps its head and says how long
/// it was (the model is shown at most the cap of it anyway).
fn cut_message(message: &mut String, cap: usize) {
    let len = message.len();
    let head = cut_head(message, cap).len();
    message.truncate(head);
    message.push_str(&format!(" … (cut: the message is {len} bytes)"));
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}
