//! Acceptance checks: the host's evidence that a task is done.
//!
//! The model may have shaped everything a check touches, so checks are held to
//! the same rules as its tools:
//!
//! - a `file` check resolves the path beneath the run's root handle (no link
//!   out, no window), refuses a link at the path itself, opens without blocking
//!   and reads a regular file of at most [`MAX_ACCEPT_FILE_BYTES`]: a FIFO, a
//!   device or a huge sparse file fails the check instead of hanging the host;
//! - a `command` check runs through [`run_command`], the process tools' runner:
//!   the environment allowlist (no secrets of the host), its own process group,
//!   output capped like a tool's, and everything it started — in the group or
//!   not — killed when it exits, times out or the run is cancelled.

use std::sync::Arc;

use agentry_protocol::ErrorCode;
use agentry_protocol::accept::{AcceptCheck, CheckOutcome};
use agentry_tools::ToolContext;
use agentry_tools::proc::{ProcConfig, run_command};
use tokio::time::Duration;

/// Largest file a `file` check reads: 16 MiB.
pub const MAX_ACCEPT_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Runs every check in the working directory, in order. `ctx` describes the
/// run (its root, artifacts, run token); each command check runs as call
/// `accept-<n>` under a child of `ctx.cancel`. A cancelled run fails the checks
/// that had not finished.
pub async fn run_checks(checks: &[AcceptCheck], ctx: &ToolContext) -> Vec<CheckOutcome> {
    let mut out = Vec::with_capacity(checks.len());
    for (index, check) in checks.iter().enumerate() {
        out.push(tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => CheckOutcome::fail(check, CANCELLED),
            outcome = run_check(check, index, ctx) => outcome,
        });
    }
    out
}

/// The detail of a check the run's cancellation cut short.
const CANCELLED: &str = "cancelled before the check finished";

async fn run_check(check: &AcceptCheck, index: usize, ctx: &ToolContext) -> CheckOutcome {
    let fail = |detail: String| CheckOutcome::fail(check, detail);
    match check {
        AcceptCheck::File {
            file,
            equals,
            contains,
        } => {
            let content = match read_checked_file(ctx, file).await {
                Ok(content) => content,
                Err(detail) => return fail(detail),
            };
            if let Some(want) = equals
                && content.trim() != want.trim()
            {
                return fail(format!(
                    "{file}: expected {:?}, found {:?}",
                    want.trim(),
                    truncate(content.trim())
                ));
            }
            if let Some(want) = contains
                && !content.contains(want.as_str())
            {
                return fail(format!("{file}: does not contain {want:?}"));
            }
            CheckOutcome::pass(check, format!("{file}: ok"))
        }
        AcceptCheck::Command { argv, timeout_ms } => {
            run_command_check(check, argv, *timeout_ms, index, ctx).await
        }
    }
}

/// The file's text, or the check's failure detail naming the file.
async fn read_checked_file(ctx: &ToolContext, file: &str) -> Result<String, String> {
    let root = Arc::clone(&ctx.run.root);
    let path = file.to_string();
    let read =
        tokio::task::spawn_blocking(move || root.read_file(&path, MAX_ACCEPT_FILE_BYTES, false))
            .await;
    let bytes = match read {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(format!("{file}: {e}")),
        Err(e) => return Err(format!("{file}: cannot read: {e}")),
    };
    String::from_utf8(bytes).map_err(|e| {
        format!(
            "{file}: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

async fn run_command_check(
    check: &AcceptCheck,
    argv: &[String],
    timeout_ms: u64,
    index: usize,
    ctx: &ToolContext,
) -> CheckOutcome {
    let fail = |detail: String| CheckOutcome::fail(check, detail);
    let Some(program) = argv.first() else {
        return fail("empty command".to_string());
    };
    let token = ctx.cancel.child_token();
    let check_ctx = ToolContext {
        call_id: format!("accept-{}", index + 1),
        cancel: token.clone(),
        attempt: 1,
        ..ctx.clone()
    };
    let config = ProcConfig::default();
    let run = run_command(argv.to_vec(), &config, &check_ctx);
    tokio::pin!(run);
    // On timeout the token stops the command: the runner kills what it started.
    let (result, timed_out) = tokio::select! {
        r = &mut run => (r, false),
        () = tokio::time::sleep(Duration::from_millis(timeout_ms)) => {
            token.cancel();
            (run.await, true)
        }
    };
    match result {
        Ok(output) => {
            let exit = output.data["exit_code"].as_i64();
            if exit == Some(0) {
                return CheckOutcome::pass(check, "command exited 0");
            }
            let status = match (exit, output.data["signal"].as_i64()) {
                (Some(code), _) => format!("exit status: {code}"),
                (None, Some(signal)) => format!("signal: {signal}"),
                (None, None) => "no exit status".to_string(),
            };
            let stderr = output.data["stderr"].as_str().unwrap_or_default();
            fail(format!(
                "command failed ({status}): {}",
                truncate(stderr.trim())
            ))
        }
        Err(_) if timed_out => fail(format!("command timed out after {timeout_ms} ms")),
        Err(e) if e.code == ErrorCode::Ecanceled => fail(CANCELLED.to_string()),
        Err(e) => fail(format!("{program}: {}", e.message)),
    }
}

fn truncate(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
