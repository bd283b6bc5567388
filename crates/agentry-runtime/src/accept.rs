//! Acceptance checks: the host's evidence that a task is done.

use std::path::Path;
use std::process::Stdio;

use agentry_protocol::accept::{AcceptCheck, CheckOutcome};
use tokio::time::Duration;
use tokio_util::sync::CancellationToken;

/// Runs every check in the working directory, in order. A cancelled run fails the
/// checks that had not finished.
pub async fn run_checks(
    checks: &[AcceptCheck],
    workdir: &Path,
    cancel: &CancellationToken,
) -> Vec<CheckOutcome> {
    let mut out = Vec::with_capacity(checks.len());
    for check in checks {
        let (passed, detail) = tokio::select! {
            biased;
            _ = cancel.cancelled() => (false, "cancelled before the check finished".to_string()),
            r = run_check(check, workdir) => r,
        };
        out.push(CheckOutcome {
            check: check.clone(),
            passed,
            detail,
        });
    }
    out
}

async fn run_check(check: &AcceptCheck, workdir: &Path) -> (bool, String) {
    match check {
        AcceptCheck::File {
            file,
            equals,
            contains,
        } => {
            let path = match agentry_tools::fs::resolve_in_workdir(workdir, file, false) {
                Ok(p) => p,
                Err(e) => return (false, format!("{file}: {}", e.message)),
            };
            let content = match tokio::fs::read_to_string(&path).await {
                Ok(c) => c,
                Err(e) => return (false, format!("{file}: cannot read: {e}")),
            };
            if let Some(want) = equals
                && content.trim() != want.trim()
            {
                return (
                    false,
                    format!(
                        "{file}: expected {:?}, found {:?}",
                        want.trim(),
                        truncate(content.trim())
                    ),
                );
            }
            if let Some(want) = contains
                && !content.contains(want.as_str())
            {
                return (false, format!("{file}: does not contain {want:?}"));
            }
            (true, format!("{file}: ok"))
        }
        AcceptCheck::Command { argv, timeout_ms } => {
            let Some((program, rest)) = argv.split_first() else {
                return (false, "empty command".to_string());
            };
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(rest)
                .current_dir(workdir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            let child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) => return (false, format!("{program}: cannot start: {e}")),
            };
            match tokio::time::timeout(Duration::from_millis(*timeout_ms), child.wait_with_output())
                .await
            {
                Ok(Ok(out)) if out.status.success() => (true, "command exited 0".to_string()),
                Ok(Ok(out)) => (
                    false,
                    format!(
                        "command failed ({}): {}",
                        out.status,
                        truncate(String::from_utf8_lossy(&out.stderr).trim())
                    ),
                ),
                Ok(Err(e)) => (false, format!("command did not run: {e}")),
                Err(_) => (false, format!("command timed out after {timeout_ms} ms")),
            }
        }
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
