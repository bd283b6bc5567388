//! The watchdog: the server does not outlive the test process.
//!
//! `postgres` runs in the foreground of a small `sh` (not under `pg_ctl
//! start`, which would detach it), and that shell waits on a pipe from the
//! test process. A line on the pipe (`stop`) is a stop that keeps the data;
//! the end of the pipe — the test process dropped the server, or died in any
//! way, SIGKILL included, since the kernel closes its end — is a stop that
//! also removes the data directory. Either way the shell sends the server
//! SIGINT (PostgreSQL's fast shutdown: clients disconnected, a checkpoint,
//! exit) and waits for it. The same idea as agentry-tools'
//! `proc/warden.rs`.
//!
//! The shell leads a process group of its own, so a Ctrl-C at the terminal
//! reaches only the test process; the shell then sees the pipe end and stops
//! the server itself, with its data directory.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::account::Account;
use crate::datadir::DataDir;

/// `sh -c SCRIPT NAME LOG DIR POSTGRES ARGS...`: prints the server's pid,
/// then waits for a line (keep the data) or the pipe's end (remove it).
const SCRIPT: &str = r#"log=$1 dir=$2
shift 2
exec 2>>"$log"
"$@" </dev/null >&2 &
pid=$!
echo "$pid"
exec >/dev/null
if read -r _; then keep=1; else keep=; fi
kill -INT "$pid" 2>/dev/null
wait "$pid"
[ -n "$keep" ] || rm -rf -- "$dir"
"#;

/// The watchdog's name (its `$0`), to be found in a process list.
const NAME: &str = "agentry-pg-watchdog";

/// How long a fast shutdown may take before the server is killed.
const STOP_WITHIN: Duration = Duration::from_secs(60);

/// A running server under its watchdog shell.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shell: Child,
    /// The pipe the shell waits on; `None` once closed.
    pipe: Option<ChildStdin>,
    server_pid: u32,
}

impl Watchdog {
    /// Starts `postgres ARGS` under a watchdog, as `account`.
    pub(crate) fn spawn(
        postgres: &std::path::Path,
        args: &[String],
        data: &DataDir,
        account: Option<Account>,
    ) -> Watchdog {
        let mut shell = Command::new("sh");
        shell
            .arg("-c")
            .arg(SCRIPT)
            .arg(NAME)
            .arg(data.log())
            .arg(data.path())
            .arg(postgres)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .current_dir("/");
        if let Some(account) = account {
            account.apply(&mut shell);
        }
        let mut shell = match shell.spawn() {
            Ok(shell) => shell,
            Err(error) => panic!("cannot start the PostgreSQL watchdog (sh): {error}"),
        };
        let pipe = shell.stdin.take();
        let mut line = String::new();
        if let Some(out) = shell.stdout.take() {
            // The shell prints the pid right after it starts the server.
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let Ok(server_pid) = line.trim().parse() else {
            panic!(
                "the PostgreSQL watchdog printed no server pid ({line:?}); see {}",
                data.log().display()
            );
        };
        Watchdog {
            shell,
            pipe,
            server_pid,
        }
    }

    /// Whether the shell (and so the server) has ended.
    fn exited(&mut self) -> bool {
        !matches!(self.shell.try_wait(), Ok(None))
    }

    /// Whether the server has ended, on its own (a port it could not bind, a
    /// crash) or stopped. The shell waits on the pipe before it reaps the
    /// server, so while the shell lives a dead server is a zombie under its
    /// pid, never another process. Without `/proc` only the shell's end is
    /// seen.
    pub(crate) fn server_exited(&mut self) -> bool {
        if self.exited() {
            return true;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.server_pid)) {
            // The state follows the command's closing parenthesis.
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
                .is_some_and(|state| state == 'Z' || state == 'X'),
            Err(_) => std::path::Path::new("/proc/self").exists(),
        }
    }

    /// Stops the server and waits for it; `keep_data` leaves the data
    /// directory for a later start. False if it had to be killed.
    pub(crate) fn stop(&mut self, keep_data: bool) -> bool {
        if let Some(mut pipe) = self.pipe.take() {
            if keep_data {
                let _ = pipe.write_all(b"stop\n");
            } else {
                // Dropping: the server hears it directly too, in case the
                // shell is gone. While the shell lives it has not reaped the
                // server (it is still in `read`), so the pid is the server's.
                self.signal("INT");
            }
        }
        let deadline = Instant::now() + STOP_WITHIN;
        while Instant::now() < deadline {
            if self.exited() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Past a fast shutdown's time: end it (the shell is still in `wait`,
        // so the pid is still the server's).
        self.signal("KILL");
        let _ = self.shell.wait();
        false
    }

    /// Sends the server `signal` if its shell still runs.
    fn signal(&mut self, signal: &str) {
        if self.exited() {
            return;
        }
        let _ = Command::new("sh")
            .args(["-c", "kill -s \"$1\" \"$2\" 2>/dev/null", "kill"])
            .arg(signal)
            .arg(self.server_pid.to_string())
            .stdin(Stdio::null())
            .status();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if self.pipe.is_some() || !self.exited() {
            self.stop(false);
        }
    }
}
