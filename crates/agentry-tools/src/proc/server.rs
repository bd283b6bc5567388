//! [`ServerProcess`]: a long-lived child (an MCP server) under the same
//! process-group rules as a call's process, for crates that keep one running
//! across calls.

use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use agentry_protocol::ProcessGroupRecord;
use agentry_sandbox::CallSandbox;
use tokio::process::{ChildStderr, ChildStdin, ChildStdout, Command};

use super::env::{ENV_SPAWN_ID, HOST_ENV, next_spawn_id};
use super::group::ProcessGroup;
use super::warden::HOST_WARDEN;

/// A program started in its own process group with piped stdin, stdout and
/// stderr, listed with the warden (so it dies with the host process), and
/// killed (SIGTERM, then SIGKILL) by [`ServerProcess::terminate`] or, failing
/// that, SIGKILLed when dropped.
///
/// Unlike a call's process it carries no run or call id in its environment
/// (only its spawn mark, `AGENTRY_SPAWN_ID`): it serves several calls, and a
/// resumed run's fence, which kills whatever carries the run's id, must not
/// take down the server a resumed run starts. Callers record
/// [`ServerProcess::record`] with each call instead (`ToolContext::processes`).
#[derive(Debug)]
pub struct ServerProcess {
    group: ProcessGroup,
    /// After the group: dropped once it is killed, removing the server's
    /// `TMPDIR`.
    _sandbox: Option<CallSandbox>,
}

impl ServerProcess {
    /// Starts `argv` in `cwd` with exactly `env` (the host's ids are removed
    /// from it; the spawn mark is added), under `sandbox` when given (a
    /// call of the run's [`RunSandboxes`](super::RunSandboxes) held for the
    /// server's life: its `TMPDIR` replaces any other and is removed when
    /// the server is gone).
    pub fn spawn(
        argv: &[String],
        env: Vec<(String, OsString)>,
        cwd: &Path,
        sandbox: Option<CallSandbox>,
    ) -> std::io::Result<ServerProcess> {
        let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the command is empty",
            ));
        };
        let spawn_id = next_spawn_id();
        let mut command = Command::new(program);
        command
            .args(&argv[1..])
            .env_clear()
            .envs(
                env.into_iter()
                    .filter(|(name, _)| !HOST_ENV.contains(&name.as_str())),
            )
            .env(ENV_SPAWN_ID, &spawn_id)
            .current_dir(cwd)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(sandbox) = &sandbox {
            sandbox.apply(command.as_std_mut());
        }
        let group = ProcessGroup::spawn(&mut command, spawn_id, &HOST_WARDEN)?;
        Ok(ServerProcess {
            group,
            _sandbox: sandbox,
        })
    }

    /// The group as a call records it, so a resume's fence kills a survivor.
    pub fn record(&self) -> &ProcessGroupRecord {
        self.group.record()
    }

    /// The leader's pid (the group id).
    pub fn pid(&self) -> u32 {
        self.group.pgid().unsigned_abs()
    }

    /// The leader's standard input (once).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.group.child.stdin.take()
    }

    /// The leader's standard output (once).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.group.child.stdout.take()
    }

    /// The leader's standard error (once).
    pub fn take_stderr(&mut self) -> Option<ChildStderr> {
        self.group.child.stderr.take()
    }

    /// Whether the leader has exited; then whatever it left in its group is
    /// killed too when the process is terminated or dropped.
    pub fn has_exited(&mut self) -> bool {
        self.group.leader_exited()
    }

    /// SIGTERM the group, SIGKILL it after `grace`, reap. Bounded by about
    /// `grace` plus a few tens of milliseconds; what is left then is killed
    /// when this is dropped.
    pub async fn terminate(&mut self, grace: Duration) {
        if self.group.leader_exited() {
            self.group.kill_leftovers().await;
        } else {
            self.group.terminate(grace).await;
        }
    }
}
