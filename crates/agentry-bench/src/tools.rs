//! The workload's tools, as ordinary agentry [`Tool`]s with real JSON Schemas:
//! `add` (W1, W2), `sleep_echo` (W3, parallel), `sleep_subprocess` (W4), and the
//! process-group tools built on agentry's [`CommandTool`] (W4 `--grandchildren`,
//! cancel).

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agentry::tools::proc::CommandTool;
use agentry::{
    Effect, ErrorCode, Idempotency, Tool, ToolContext, ToolContract, ToolError, ToolOutput,
    ToolRegistry, async_trait,
};
use serde_json::{Value, json};

/// The auth scope of every benchmark tool; runs are granted exactly this.
pub const SCOPE: &str = "bench";

/// Name of the W1/W2 tool.
pub const ADD: &str = "add";
/// Name of the W3/parallel tool.
pub const SLEEP_ECHO: &str = "sleep_echo";
/// Name of the W4 tool (a plain child, or a process group with `--grandchildren`).
pub const SLEEP_SUBPROCESS: &str = "sleep_subprocess";

fn int_arg(args: &Value, name: &str) -> Result<i64, ToolError> {
    args.get(name).and_then(Value::as_i64).ok_or_else(|| {
        ToolError::new(
            ErrorCode::Einval,
            format!("argument {name} must be an integer"),
        )
    })
}

/// `add(a, b)`: returns `a + b` as a string, at once (no await).
#[derive(Debug, Clone, Copy, Default)]
pub struct AddTool;

#[async_trait]
impl Tool for AddTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            ADD,
            "Add two integers; returns the sum as a string.",
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": false
            }),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope(SCOPE)
        .timeout_ms(1_000)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let sum = int_arg(&args, "a")?.wrapping_add(int_arg(&args, "b")?);
        Ok(ToolOutput::data(Value::String(sum.to_string())))
    }
}

/// `sleep_echo(step, i[, ms])`: an async sleep of `ms` (default `50 − i`)
/// milliseconds, then `"<step>:<i>"`. Read-only, so the calls of one step run
/// concurrently.
#[derive(Debug, Clone, Copy, Default)]
pub struct SleepEchoTool {
    /// Sleep with [`precise_sleep`] instead of `tokio::time::sleep`.
    pub precise: bool,
}

/// How long before the end of a [`precise_sleep`] tokio's timer hands over.
const PRECISE_LEAD: Duration = Duration::from_millis(2);

/// An async sleep that ends within ~0.1 ms of `d`: tokio's timer (1 ms ticks,
/// a driver that parks in whole milliseconds, so it wakes 0–2 ms late) until
/// 2 ms before the end, then a `nanosleep` on a blocking-pool thread. The
/// technique of agentry's deadline alarm; W3 with `--precise-sleep` uses it in
/// its tool and its floor alike, so what is left is agentry's own overhead.
pub async fn precise_sleep(d: Duration) {
    let at = tokio::time::Instant::now() + d;
    tokio::time::sleep_until(at.checked_sub(PRECISE_LEAD).unwrap_or(at)).await;
    let rest = at.saturating_duration_since(tokio::time::Instant::now());
    if !rest.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
    }
}

#[async_trait]
impl Tool for SleepEchoTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            SLEEP_ECHO,
            "Sleep, then echo \"<step>:<i>\". Sleeps `ms` milliseconds, by default 50 - i.",
            json!({
                "type": "object",
                "properties": {
                    "step": {"type": "integer", "minimum": 0},
                    "i": {"type": "integer", "minimum": 0, "maximum": 1000},
                    "ms": {"type": "integer", "minimum": 0, "maximum": 10000}
                },
                "required": ["step", "i"],
                "additionalProperties": false
            }),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope(SCOPE)
        .timeout_ms(15_000)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let step = int_arg(&args, "step")?;
        let i = int_arg(&args, "i")?;
        let ms = match args.get("ms") {
            Some(_) => int_arg(&args, "ms")?,
            None => (50 - i).max(0),
        };
        let d = Duration::from_millis(ms.max(0) as u64);
        if self.precise {
            precise_sleep(d).await;
        } else {
            tokio::time::sleep(d).await;
        }
        Ok(ToolOutput::data(Value::String(format!("{step}:{i}"))))
    }
}

/// `sleep_subprocess()`: spawns the OS process `sleep 10` and waits for it.
///
/// Cancellation-aware "in the ordinary way of the language" (WORKLOAD.md W4):
/// the child is spawned with `kill_on_drop(true)`, so dropping the call's
/// future kills it. With `watch_cancel` it also kills the child explicitly as
/// soon as [`ToolContext::cancel`] fires, which the executor's cancel grace
/// rewards (see BENCHMARKS.md).
#[derive(Debug, Clone, Default)]
pub struct SleepSubprocessTool {
    /// The pid of the last child spawned (0 before the first).
    pub pid: Arc<AtomicU32>,
    /// Kill on the cancel token too, not only on drop.
    pub watch_cancel: bool,
}

/// The contract shared by both W4 tools and the cancel tool.
pub fn subprocess_contract(name: &str) -> ToolContract {
    ToolContract::new(
        name,
        "Run a long subprocess and wait for it.",
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    )
    .effect(Effect::Reversible)
    .idempotency(Idempotency::None)
    .scope(SCOPE)
    .max_retries(0)
    .timeout_ms(60_000)
}

#[async_trait]
impl Tool for SleepSubprocessTool {
    fn contract(&self) -> ToolContract {
        subprocess_contract(SLEEP_SUBPROCESS)
    }

    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let mut child = tokio::process::Command::new("sleep")
            .arg("10")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ToolError::new(ErrorCode::Einternal, format!("spawn sleep: {e}")))?;
        self.pid.store(child.id().unwrap_or(0), Ordering::SeqCst);
        let status = if self.watch_cancel {
            tokio::select! {
                status = child.wait() => status,
                () = ctx.cancel.cancelled() => {
                    let _ = child.start_kill();
                    return Err(ToolError::new(ErrorCode::Ecanceled, "cancelled; sleep killed"));
                }
            }
        } else {
            child.wait().await
        };
        let status =
            status.map_err(|e| ToolError::new(ErrorCode::Einternal, format!("wait: {e}")))?;
        Ok(ToolOutput::data(json!({ "exit_code": status.code() })))
    }
}

/// A command tool named `name` running `sh -c SCRIPT` in its own process group,
/// through agentry's process machinery (SIGTERM then SIGKILL of the whole group
/// on cancel, members reaped).
pub fn group_tool(name: &str, script: &str) -> Result<CommandTool, ToolError> {
    CommandTool::new(subprocess_contract(name), ["sh", "-c", script])
        .map_err(|e| ToolError::new(ErrorCode::Einternal, e.to_string()))
}

/// The registry every workload runs on: the built-ins plus `add` and
/// `sleep_echo`, plus the W4/cancel tool given.
pub fn registry(extra: Option<Arc<dyn Tool>>) -> Result<ToolRegistry, agentry::RuntimeError> {
    registry_with(extra, SleepEchoTool::default())
}

/// [`registry`] with this `sleep_echo`.
pub fn registry_with(
    extra: Option<Arc<dyn Tool>>,
    sleep_echo: SleepEchoTool,
) -> Result<ToolRegistry, agentry::RuntimeError> {
    let mut registry = ToolRegistry::with_builtins()?;
    registry.register(Arc::new(AddTool))?;
    registry.register(Arc::new(sleep_echo))?;
    if let Some(tool) = extra {
        registry.register(tool)?;
    }
    Ok(registry)
}
