//! The runner every process tool shares: spawn in a new group, feed stdin,
//! capture output, wait or cancel, kill what is left; and [`reap_orphans_here`].

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_sandbox::{CallSandbox, SandboxOverride};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, Command};

use super::capture::{Artifact, Capture, Captured};
use super::config::ProcConfig;
use super::env::{
    ENV_CALL_ID, ENV_OPERATION_ID, ENV_RUN_ID, ENV_RUN_MARK, ENV_SPAWN_ID, ENV_TRACEPARENT,
    HOST_ENV, host_env, next_spawn_id,
};
use super::group::ProcessGroup;
use super::refusal::classify;
use super::warden::HOST_WARDEN;
use crate::tool::{ToolContext, ToolOutput};

/// How long output is still read after the leader exited and its group was
/// killed. Only a process that left the group (`setsid`) while holding the pipe
/// keeps it open that long.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

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

/// Makes a write past the file-size limit (`RLIMIT_FSIZE`, `ulimit -f`) fail
/// with `EFBIG` instead of killing the process with `SIGXFSZ`: a store that
/// cannot grow then fails its commit, and the run stops with an error naming
/// the store, its last commit intact. The signal is caught (tokio's handler,
/// kept for the life of the process), not ignored, so the programs tools
/// start get the default disposition back at `exec`.
///
/// Call once, early, inside a tokio runtime (the CLI and the service do).
pub fn survive_file_size_limit() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let xfsz = SignalKind::from_raw(nix::sys::signal::Signal::SIGXFSZ as i32);
    // Dropping the stream keeps the handler: tokio never uninstalls one.
    signal(xfsz).map(drop)
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
        cwd: ctx.run.workdir.to_path_buf(),
        env: host_env(&config.env_allowlist),
        sandbox: SandboxOverride::default(),
    };
    run(invocation, config, ctx).await
}

/// One process to run, after the tool-specific checks.
#[derive(Debug)]
pub(super) struct Invocation {
    pub(super) argv: Vec<String>,
    pub(super) stdin: Option<String>,
    pub(super) cwd: PathBuf,
    /// The child's complete environment (`TMPDIR` is replaced by the call's
    /// own under a sandbox).
    pub(super) env: Vec<(String, OsString)>,
    /// The tool's override of the run's sandbox.
    pub(super) sandbox: SandboxOverride,
}

/// What ended the wait for the leader.
enum Event {
    Cancelled,
    Exited(std::io::Result<ExitStatus>),
    OutputClosed,
}

/// Sets the host's variables in `env` (dropping any value of theirs already
/// there) and returns the spawn id. Done in [`run`], the one path every
/// process tool takes, and last, so neither an allowlisted host value nor a
/// fixed or model-given one can forge the ids, the run's fence mark or the
/// trace context.
fn set_host_env(env: &mut Vec<(String, OsString)>, ctx: &ToolContext) -> String {
    env.retain(|(name, _)| !HOST_ENV.contains(&name.as_str()));
    let spawn_id = next_spawn_id();
    env.extend([
        (ENV_RUN_ID.to_string(), OsString::from(&*ctx.run.run_id)),
        (ENV_CALL_ID.to_string(), OsString::from(&ctx.call_id)),
        (
            ENV_OPERATION_ID.to_string(),
            OsString::from(&*ctx.operation_id),
        ),
        (ENV_SPAWN_ID.to_string(), OsString::from(&spawn_id)),
    ]);
    if let Some(mark) = ctx.processes.as_ref().and_then(|log| log.run_mark()) {
        env.push((ENV_RUN_MARK.to_string(), OsString::from(mark)));
    }
    if let Some(traceparent) = &ctx.traceparent {
        env.push((ENV_TRACEPARENT.to_string(), OsString::from(&**traceparent)));
    }
    spawn_id
}

/// Runs `invocation` to completion or cancellation (see the module docs).
pub(super) async fn run(
    mut invocation: Invocation,
    config: &ProcConfig,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    let spawn_id = set_host_env(&mut invocation.env, ctx);
    if ctx.cancel.is_cancelled() {
        // Nothing started yet: do not start it.
        return Err(ToolError::new(
            ErrorCode::Ecanceled,
            "cancelled before the process was started",
        ));
    }
    // Held until the process is gone: its drop removes the call's TMPDIR.
    let sandboxed = match &ctx.run.sandbox {
        Some(sandboxes) => Some(sandboxes.call(&invocation.sandbox)?),
        None => None,
    };
    // Listed with the warden as it is spawned (its mark before, its group
    // after): if this process dies from here on, the warden kills what it
    // started, and a resume finds the group in the ledger.
    let mut group = spawn(&invocation, spawn_id, sandboxed.as_ref().map(|s| &s.call))?;
    if let Some(log) = &ctx.processes {
        log.started(group.record().clone());
    }
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

    let out = out.finish(&ctx.run.workdir).await;
    let err = err.finish(&ctx.run.workdir).await;
    let output = output(status, out, err, problems);
    let confinement = sandboxed.as_ref().and_then(|s| s.confinement.as_ref());
    refused_or(output, status, &invocation.cwd, confinement)
}

/// `ESANDBOX` when the sandbox refused what made the process fail (see
/// `refusal.rs`), else the output as it is.
fn refused_or(
    output: ToolOutput,
    status: ExitStatus,
    cwd: &std::path::Path,
    confinement: Option<&super::refusal::Confinement>,
) -> Result<ToolOutput, ToolError> {
    let Some(confinement) = confinement else {
        return Ok(output);
    };
    let stderr = output.data["stderr"].as_str().unwrap_or_default();
    match classify(status.code(), stderr, cwd, confinement) {
        Some(refusal) => Err(refusal.to_error(&output.data)),
        None => Ok(output),
    }
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

/// Spawns the leader in a new process group listed with the warden, under
/// the call's sandbox if any (its `TMPDIR` replaces any other).
fn spawn(
    invocation: &Invocation,
    spawn_id: String,
    sandbox: Option<&CallSandbox>,
) -> Result<ProcessGroup, ToolError> {
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
    if let Some(sandbox) = sandbox {
        sandbox.apply(command.as_std_mut());
    }
    ProcessGroup::spawn(&mut command, spawn_id, &HOST_WARDEN).map_err(|e| spawn_error(program, &e))
}

// `io::ErrorKind` is non_exhaustive: every kind not listed is a bad program.
#[allow(clippy::wildcard_enum_match_arm)]
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
        root: Arc::clone(&ctx.run.root),
        dir: ctx.run.artifacts.join("out"),
        name: OsString::from(format!(
            "{}.{}.{stream}",
            sanitize(&ctx.call_id),
            ctx.attempt
        )),
    }
}

/// A call id as a file name: `[A-Za-z0-9_-]` kept, anything else `_`, at most 100
/// characters. No `.` survives, so the name cannot be `..` or hidden.
pub(super) fn sanitize(call_id: &str) -> String {
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
