//! Process tools: the built-in `proc.run`, and [`CommandTool`] for embedders.
//!
//! Both run a program directly from an argv (never through a shell, unless the
//! argv itself runs one) with the same machinery:
//!
//! - **Environment.** The child's environment is cleared; only variables named in
//!   [`ProcConfig::env_allowlist`] are passed, with the host's values. `proc.run`
//!   may set allowlisted variables through its `env` argument; naming any other
//!   variable is `EPERM`. On top of that the host always sets [`ENV_RUN_ID`],
//!   [`ENV_CALL_ID`] and [`ENV_OPERATION_ID`] (`AGENTRY_RUN_ID`,
//!   `AGENTRY_CALL_ID`, `AGENTRY_OPERATION_ID`) from the [`ToolContext`],
//!   overriding any value of the same name: the operation id is the same for
//!   every attempt of an action, so a command can drop a duplicate
//!   (`grep -qx "$AGENTRY_OPERATION_ID" done.txt || ...`).
//! - **Working directory.** The run's working directory, or for `proc.run` a
//!   relative `cwd` inside it (checked by [`resolve_in_workdir`]: absolute paths,
//!   `..` and symlinks leading out are `EPERM`).
//! - **Output caps.** Each of stdout and stderr keeps at most
//!   [`ProcConfig::max_inline`] bytes inline (the head, as lossy UTF-8 cut at a
//!   character boundary). A longer stream is streamed in full to
//!   `<artifacts>/out/<call id>.<attempt>.stdout` (or `.stderr`), the data says
//!   `stdout_truncated: true`, and the envelope's `refs` carry the file's path
//!   (relative to the working directory when inside it), the sha256 of the full
//!   stream and its length. Memory stays bounded whatever the output size.
//! - **Process groups.** Each call runs in its own process group. When the call's
//!   [`ToolContext::cancel`] fires (its timeout, the run's deadline, a user abort,
//!   shutdown) the whole group gets SIGTERM, then SIGKILL after
//!   [`ProcConfig::term_grace`], and is reaped; the call returns `ECANCELED`. If
//!   the future is dropped before that finished, a drop guard SIGKILLs the group
//!   synchronously. When the leader exits on its own, whatever it left running in
//!   its group is SIGKILLed too: a call's processes end with the call.
//! - **Orphans.** Group members whose parent died are re-parented to init, which
//!   this process cannot reap for them. Call [`reap_orphans_here`] once at startup
//!   (the CLI and the tests do) to make this process their subreaper, so the
//!   kill path reaps them and no zombie is left.
//!
//! # `proc.run`
//!
//! Arguments ([`RunArgs`]): `argv` (non-empty array of strings), optional `stdin`
//! (text fed to the process, then closed; without it stdin is `/dev/null`),
//! `cwd`, `env`. Data:
//!
//! ```json
//! {"exit_code": 0, "signal": null,
//!  "stdout": "...", "stderr": "", "stdout_truncated": false, "stderr_truncated": false,
//!  "stdout_bytes": 12, "stderr_bytes": 0}
//! ```
//!
//! A non-zero exit status is still a successful call (`ok: true`): the model reads
//! `exit_code` (`null` when the process was killed by a signal, which is then in
//! `signal`). A program that cannot be started (not found, not executable) is
//! `EINVAL` naming it. A `problems` array appears only when output could not be
//! fully captured (artifact not writable, output still open after the process
//! group was killed).
//!
//! `proc.run` is registered by [`crate::builtins`] but not granted by default: a
//! run grants it explicitly (`"proc.run"` or the scope `"proc"`).
//!
//! # Command-backed tools
//!
//! [`CommandTool`] wraps a fixed argv template behind a full [`ToolContract`], so
//! an embedder exposes `git.status` or `grep` to a model without exposing a
//! general `proc.run`:
//!
//! ```
//! use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
//! use agentry_tools::Tool;
//! use agentry_tools::proc::CommandTool;
//! use serde_json::json;
//!
//! let status = CommandTool::new(
//!     ToolContract::new(
//!         "git.status",
//!         "Show the working tree status in porcelain format.",
//!         json!({"type": "object", "properties": {}, "additionalProperties": false}),
//!     )
//!     .effect(Effect::ReadOnly)
//!     .idempotency(Idempotency::Idempotent)
//!     .scope("git.read"),
//!     ["git", "status", "--porcelain"],
//! )?;
//!
//! // `{pattern}` and `{path}` are each replaced by one argv element. `-e` and `--`
//! // keep a pattern or path starting with `-` from being read as an option.
//! let grep = CommandTool::new(
//!     ToolContract::new(
//!         "grep",
//!         "Search a file for a regular expression; prints matching lines with numbers.",
//!         json!({
//!             "type": "object",
//!             "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}},
//!             "required": ["pattern", "path"],
//!             "additionalProperties": false
//!         }),
//!     )
//!     .effect(Effect::ReadOnly)
//!     .scope("search"),
//!     ["grep", "-n", "-e", "{pattern}", "--", "{path}"],
//! )?;
//! assert_eq!(status.contract().name, "git.status");
//! assert_eq!(grep.contract().timeout_ms, 30_000);
//! # Ok::<(), agentry_tools::proc::CommandToolError>(())
//! ```
//!
//! # Layout
//! - this file: [`ProcConfig`], [`ProcTool`] (`proc.run`), the shared runner,
//!   [`reap_orphans_here`];
//! - `command.rs`: [`CommandTool`] and its argv template;
//! - `group.rs`: the process group (spawn, terminate, reap, drop guard);
//! - `capture.rs`: bounded capture of one output stream.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, Command};

use crate::fs::resolve_in_workdir;
use crate::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

mod capture;
mod command;
mod group;
mod strays;
#[cfg(test)]
mod tests;

pub use command::{CommandTool, CommandToolError};

use capture::{Artifact, Capture, Captured};
use group::ProcessGroup;

/// Name of the run tool.
pub const RUN_TOOL: &str = "proc.run";

/// Auth scope of `proc.run`.
pub const PROC_SCOPE: &str = "proc";

/// Per-call timeout of `proc.run`, in milliseconds.
pub const RUN_TIMEOUT_MS: u64 = 60_000;

/// Default inline cap per output stream: 16 KiB.
pub const DEFAULT_MAX_INLINE: usize = 16 * 1024;

/// Default time between SIGTERM and SIGKILL on cancel. It must fit, with the
/// reaping after it, inside the executor's 75 ms cancel grace.
pub const DEFAULT_TERM_GRACE: Duration = Duration::from_millis(40);

/// Variables passed to children by default (with the host's values).
pub const DEFAULT_ENV_ALLOWLIST: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// Set on every child to [`ToolContext::run_id`].
pub const ENV_RUN_ID: &str = "AGENTRY_RUN_ID";

/// Set on every child to [`ToolContext::call_id`].
pub const ENV_CALL_ID: &str = "AGENTRY_CALL_ID";

/// Set on every child to [`ToolContext::operation_id`]: the same for every
/// attempt of one action, the key a `required_key` command dedupes on.
pub const ENV_OPERATION_ID: &str = "AGENTRY_OPERATION_ID";

/// The variables the host sets on every child; nobody else may set them.
pub const HOST_ENV: [&str; 3] = [ENV_RUN_ID, ENV_CALL_ID, ENV_OPERATION_ID];

/// How long output is still read after the leader exited and its group was
/// killed. Only a process that left the group (`setsid`) while holding the pipe
/// keeps it open that long.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// How process tools run their processes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcConfig {
    /// Bytes of each output stream kept inline; the rest goes to an artifact.
    pub max_inline: usize,
    /// Time between SIGTERM and SIGKILL when a call is cancelled.
    pub term_grace: Duration,
    /// Environment variables a child may see; everything else is cleared.
    pub env_allowlist: Vec<String>,
}

impl Default for ProcConfig {
    fn default() -> Self {
        ProcConfig {
            max_inline: DEFAULT_MAX_INLINE,
            term_grace: DEFAULT_TERM_GRACE,
            env_allowlist: DEFAULT_ENV_ALLOWLIST
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}

/// Makes this process a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so that
/// processes orphaned by a process-group kill are re-parented to it instead of
/// init, and the tools' `waitpid(-pgid)` loop can reap them: no zombie is left.
///
/// Call once, early (the CLI does at startup; the tests do). The setting is
/// per process and inherited by nothing: side effect, every orphaned descendant
/// of this process now comes here, and one not in a tool's process group stays a
/// zombie until this process exits. Fails with `Unsupported` off Linux.
pub fn reap_orphans_here() -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "child subreapers exist only on Linux",
        ))
    }
}

/// Arguments of `proc.run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// The program and its arguments, e.g. `["ls", "-la"]`. Run directly, not by a
    /// shell: use `["sh", "-c", "..."]` for pipes or globs.
    #[schemars(length(min = 1))]
    pub argv: Vec<String>,
    /// Text written to the program's standard input, which is then closed.
    /// Without it, standard input is empty.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Directory to run in, relative to the working directory (default: the
    /// working directory).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Environment variables to set. Only allowlisted names are accepted.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// The `proc.run` tool: runs a program in its own process group.
#[derive(Debug, Clone, Default)]
pub struct ProcTool {
    config: ProcConfig,
}

impl ProcTool {
    /// A `proc.run` tool with this configuration.
    pub fn new(config: ProcConfig) -> Self {
        ProcTool { config }
    }

    /// The configuration.
    pub fn config(&self) -> &ProcConfig {
        &self.config
    }
}

#[async_trait]
impl Tool for ProcTool {
    /// The group gets SIGTERM, then SIGKILL after `term_grace`, then is reaped:
    /// that needs the grace plus a little for the reaping.
    fn cancel_grace(&self) -> std::time::Duration {
        self.config.term_grace + std::time::Duration::from_millis(25)
    }

    fn contract(&self) -> ToolContract {
        ToolContract::new(
            RUN_TOOL,
            format!(
                "Run a program (argv[0]) with arguments, without a shell, in the working \
                 directory. Returns exit_code, signal, stdout and stderr. A non-zero \
                 exit_code is still a successful call: read it. Each stream shows at most \
                 {} bytes; longer output is marked *_truncated and saved to a file named \
                 in refs (read it with fs.read). Only these environment variables may be \
                 set: {}.",
                self.config.max_inline,
                self.config.env_allowlist.join(", ")
            ),
            schema_for::<RunArgs>(),
        )
        .effect(Effect::Reversible)
        .idempotency(Idempotency::None)
        .scope(PROC_SCOPE)
        .timeout_ms(RUN_TIMEOUT_MS)
        .version("1")
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: RunArgs = parse_args(args)?;
        let cwd = match args.cwd.as_deref() {
            Some(rel) => {
                let dir = resolve_in_workdir(&ctx.workdir, rel, false)?;
                if !dir.is_dir() {
                    return Err(ToolError::new(
                        ErrorCode::Einval,
                        format!("cwd is not a directory: {rel}"),
                    )
                    .with_action("call fs.list to see what exists"));
                }
                dir
            }
            None => ctx.workdir.to_path_buf(),
        };
        let env = model_env(&self.config.env_allowlist, &args.env)?;
        let invocation = Invocation {
            argv: args.argv,
            stdin: args.stdin,
            cwd,
            env,
        };
        run(invocation, &self.config, ctx).await
    }
}

/// Runs `argv` in the working directory the way every process tool runs its
/// programs: its own process group, an environment of only the
/// [`ProcConfig::env_allowlist`] plus the host's ids, output capped inline and
/// saved past that as `<artifacts>/out/<call id>.<attempt>.stdout|stderr`, and
/// everything it started killed when the leader exits or `ctx.cancel` fires.
/// For commands the host runs itself, such as acceptance checks, which must be
/// held to the same rules as the model's tools.
pub async fn run_command(
    argv: Vec<String>,
    config: &ProcConfig,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let invocation = Invocation {
        argv,
        stdin: None,
        cwd: ctx.workdir.to_path_buf(),
        env: host_env(&config.env_allowlist),
    };
    run(invocation, config, ctx).await
}

/// The host's values of the allowlisted variables, overridden by the model's
/// `env`, every name of which must be allowlisted (else `EPERM` naming them).
fn model_env(
    allowlist: &[String],
    given: &BTreeMap<String, String>,
) -> Result<Vec<(String, OsString)>, ToolError> {
    let refused: Vec<&str> = given
        .keys()
        .filter(|name| !allowlist.contains(name))
        .map(String::as_str)
        .collect();
    if !refused.is_empty() {
        return Err(ToolError::new(
            ErrorCode::Eperm,
            format!(
                "environment variable not allowed: {} (allowed: {})",
                refused.join(", "),
                allowlist.join(", ")
            ),
        )
        .retryable(false)
        .with_action("set only allowlisted variables, or none"));
    }
    let mut env = host_env(allowlist);
    for (name, value) in given {
        env.retain(|(n, _)| n != name);
        env.push((name.clone(), OsString::from(value)));
    }
    Ok(env)
}

/// The host's values of the allowlisted variables that are set.
fn host_env(allowlist: &[String]) -> Vec<(String, OsString)> {
    allowlist
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|value| (name.clone(), value)))
        .collect()
}

/// One process to run, after the tool-specific checks.
#[derive(Debug)]
struct Invocation {
    argv: Vec<String>,
    stdin: Option<String>,
    cwd: PathBuf,
    /// The child's complete environment.
    env: Vec<(String, OsString)>,
}

/// What ended the wait for the leader.
enum Event {
    Cancelled,
    Exited(std::io::Result<ExitStatus>),
    OutputClosed,
}

/// Runs `invocation` to completion or cancellation (see the module docs).
async fn run(
    mut invocation: Invocation,
    config: &ProcConfig,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    // Set here, the one path every process tool takes, and last, so neither an
    // allowlisted host value nor a fixed or model-given one can forge the ids.
    invocation
        .env
        .retain(|(name, _)| !HOST_ENV.contains(&name.as_str()));
    invocation.env.extend([
        (ENV_RUN_ID.to_string(), OsString::from(&*ctx.run_id)),
        (ENV_CALL_ID.to_string(), OsString::from(&ctx.call_id)),
        (
            ENV_OPERATION_ID.to_string(),
            OsString::from(&*ctx.operation_id),
        ),
    ]);
    if ctx.cancel.is_cancelled() {
        // Nothing started yet: do not start it.
        return Err(ToolError::new(
            ErrorCode::Ecanceled,
            "cancelled before the process was started",
        ));
    }
    let mut group = spawn(&invocation, strays::Marks::new(&ctx.run_id, &ctx.call_id))?;
    let stdin = group.child.stdin.take();
    let stdout = group.child.stdout.take();
    let stderr = group.child.stderr.take();
    let mut out = Capture::new(config.max_inline, artifact(ctx, "stdout"));
    let mut err = Capture::new(config.max_inline, artifact(ctx, "stderr"));

    let (status, problems) = {
        // Output is read while the process runs, so a chatty process never
        // blocks on a full pipe. The captures outlive this future, so output
        // read before a cut-off drain is kept.
        let io = std::pin::pin!(async {
            tokio::join!(
                feed(stdin, invocation.stdin.as_deref()),
                async {
                    if let Some(pipe) = stdout {
                        out.pump(pipe).await;
                    }
                },
                async {
                    if let Some(pipe) = stderr {
                        err.pump(pipe).await;
                    }
                },
            )
        });
        supervise(&mut group, io, config, ctx).await
    }
    .map_err(|e| match e {
        Supervised::Cancelled => cancelled(group.pgid(), config.term_grace),
        Supervised::WaitFailed(e) => ToolError::new(
            ErrorCode::Einternal,
            format!("waiting for {} failed: {e}", invocation.argv[0]),
        ),
    })?;

    let out = out.finish(&ctx.workdir).await;
    let err = err.finish(&ctx.workdir).await;
    Ok(output(status, out, err, problems))
}

/// Why [`supervise`] returned without an exit status.
enum Supervised {
    Cancelled,
    WaitFailed(std::io::Error),
}

/// Waits for the leader while `io` moves the output, or terminates the group on
/// cancel. After the leader exited: kills its leftovers (which also closes the
/// pipes they inherited) and lets `io` finish, for at most [`DRAIN_AFTER_EXIT`].
/// Returns the exit status and any problem met.
async fn supervise<F: Future>(
    group: &mut ProcessGroup,
    mut io: std::pin::Pin<&mut F>,
    config: &ProcConfig,
    ctx: &ToolContext,
) -> Result<(ExitStatus, Vec<String>), Supervised> {
    let mut io_done = false;
    let status = loop {
        let event = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Event::Cancelled,
            status = group.wait_leader() => Event::Exited(status),
            _ = &mut io, if !io_done => Event::OutputClosed,
        };
        match event {
            Event::Cancelled => {
                group.terminate(config.term_grace).await;
                return Err(Supervised::Cancelled);
            }
            Event::Exited(status) => break status.map_err(Supervised::WaitFailed)?,
            Event::OutputClosed => io_done = true,
        }
    };
    group.kill_leftovers().await;
    let mut problems = Vec::new();
    if !io_done {
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Err(Supervised::Cancelled),
            _ = &mut io => {}
            () = tokio::time::sleep(DRAIN_AFTER_EXIT) => problems.push(format!(
                "output was still open {} ms after the process exited and its group \
                 was killed (a process left the group); it is cut there",
                DRAIN_AFTER_EXIT.as_millis()
            )),
        }
    }
    Ok((status, problems))
}

/// Spawns the leader in a new process group.
fn spawn(invocation: &Invocation, marks: strays::Marks) -> Result<ProcessGroup, ToolError> {
    let Some(program) = invocation.argv.first() else {
        return Err(ToolError::new(ErrorCode::Einval, "argv is empty")
            .with_action("give the program and its arguments, e.g. [\"ls\", \"-la\"]"));
    };
    if program.is_empty() {
        return Err(ToolError::new(ErrorCode::Einval, "argv[0] is empty")
            .with_action("give the program's name or path as argv[0]"));
    }
    if let Some(i) = invocation.argv.iter().position(|a| a.contains('\0')) {
        return Err(ToolError::new(
            ErrorCode::Einval,
            format!("argv[{i}] contains a NUL byte"),
        ));
    }
    let mut command = Command::new(program);
    command
        .args(&invocation.argv[1..])
        .env_clear()
        .envs(invocation.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&invocation.cwd)
        .process_group(0)
        .stdin(if invocation.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().map_err(|e| spawn_error(program, &e))?;
    ProcessGroup::new(child, marks).ok_or_else(|| {
        ToolError::new(
            ErrorCode::Einternal,
            format!("{program} was spawned but has no pid"),
        )
    })
}

fn spawn_error(program: &str, e: &std::io::Error) -> ToolError {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => ToolError::new(
            ErrorCode::Einval,
            format!("cannot run {program}: no such program (not found on PATH or at that path)"),
        )
        .with_action(
            "check the program name; run [\"sh\", \"-c\", \"command -v NAME\"] to look it up",
        ),
        ErrorKind::PermissionDenied => ToolError::new(
            ErrorCode::Einval,
            format!("cannot run {program}: permission denied (not executable?)"),
        )
        .with_action("run it through its interpreter, e.g. [\"sh\", \"script.sh\"]"),
        ErrorKind::InvalidInput => {
            ToolError::new(ErrorCode::Einval, format!("cannot run {program}: {e}"))
        }
        ErrorKind::WouldBlock | ErrorKind::ResourceBusy | ErrorKind::OutOfMemory => ToolError::new(
            ErrorCode::Eunavail,
            format!("cannot run {program} right now: {e}"),
        ),
        _ => ToolError::new(ErrorCode::Einval, format!("cannot run {program}: {e}")),
    }
}

/// Writes the stdin text, then closes the pipe. A process that exits without
/// reading it all is not an error (`BrokenPipe` is ignored).
async fn feed(pipe: Option<ChildStdin>, text: Option<&str>) {
    if let (Some(mut pipe), Some(text)) = (pipe, text) {
        let _ = pipe.write_all(text.as_bytes()).await;
        let _ = pipe.shutdown().await;
    }
}

fn cancelled(pgid: i32, grace: Duration) -> ToolError {
    ToolError::new(
        ErrorCode::Ecanceled,
        format!(
            "cancelled: the process group {pgid} was terminated (SIGTERM, then SIGKILL after {} ms)",
            grace.as_millis()
        ),
    )
}

/// `<artifacts>/out/<sanitized call id>.<attempt>.<stream>`.
fn artifact(ctx: &ToolContext, stream: &str) -> Artifact {
    Artifact {
        root: Arc::clone(&ctx.root),
        dir: ctx.artifacts.join("out"),
        name: OsString::from(format!(
            "{}.{}.{stream}",
            sanitize(&ctx.call_id),
            ctx.attempt
        )),
    }
}

/// A call id as a file name: `[A-Za-z0-9_-]` kept, anything else `_`, at most 100
/// characters. No `.` survives, so the name cannot be `..` or hidden.
fn sanitize(call_id: &str) -> String {
    let name: String = call_id
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "call".to_string()
    } else {
        name
    }
}

fn output(
    status: ExitStatus,
    out: Captured,
    err: Captured,
    mut problems: Vec<String>,
) -> ToolOutput {
    let refs = [&out, &err]
        .iter()
        .filter_map(|c| c.reference.clone())
        .collect();
    for (stream, captured) in [("stdout", &out), ("stderr", &err)] {
        problems.extend(captured.problems.iter().map(|p| format!("{stream}: {p}")));
    }
    let mut data = json!({
        "exit_code": status.code(),
        "signal": status.signal(),
        "stdout": out.text,
        "stderr": err.text,
        "stdout_truncated": out.truncated,
        "stderr_truncated": err.truncated,
        "stdout_bytes": out.bytes,
        "stderr_bytes": err.bytes,
    });
    if !problems.is_empty() {
        data["problems"] = json!(problems);
    }
    ToolOutput { data, refs }
}
