//! The real service binary (`examples/service`) as a child process, shared by
//! the service tests that need a process to kill or to limit: found next to the
//! test binary, refused when older than its sources, started on an ephemeral
//! 127.0.0.1 port whose address it reports.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agentry_test_support::TestError;

/// The service binary as `cargo test` builds it: target/<profile>/examples/service.
pub(super) fn binary() -> Result<PathBuf, TestError> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the test binary is not in target/<profile>/deps")?;
    let binary = profile_dir.join("examples").join("service");
    let built = std::fs::metadata(&binary)
        .and_then(|m| m.modified())
        .map_err(|e| {
            format!(
                "{}: {e}; build it with `cargo build --example service` (`cargo test --workspace` does)",
                binary.display()
            )
        })?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sources = [
        root.join("examples/service"),
        root.join("crates/agentry-serve/src"),
    ];
    for entry in sources
        .iter()
        .map(std::fs::read_dir)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
    {
        let entry = entry?;
        if entry.metadata()?.modified()? > built {
            return Err(format!(
                "{} is older than {}; rebuild it with `cargo build --example service`",
                binary.display(),
                entry.path().display()
            )
            .into());
        }
    }
    Ok(binary)
}

/// A started service process and the address it listens on.
pub(super) struct Spawned {
    pub child: Child,
    pub addr: SocketAddr,
    /// The service's own temp dir (`TMPDIR`, unless the command set one),
    /// where its runs' working directories go; removed when its holder drops
    /// it, after the process, so a killed service leaves nothing in the
    /// system's temp dir.
    pub tmp: Option<tempfile::TempDir>,
}

/// Starts `command` (the binary, or a shell that execs it) on 127.0.0.1:0 and
/// waits up to `wait` for the address it reports; the process is killed if it
/// never does.
pub(super) fn spawn(mut command: Command, wait: Duration) -> Result<Spawned, TestError> {
    let tmp = if command.get_envs().any(|(k, _)| k == "TMPDIR") {
        None
    } else {
        let tmp = tempfile::tempdir()?;
        command.env("TMPDIR", tmp.path());
        Some(tmp)
    };
    command
        .args(["--addr", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (found, listening) = std::sync::mpsc::channel();
    // Reads the log to its end (a full pipe would block the service), and
    // reports the address from the "listening" line.
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening")
                && let Some(addr) = line.split("addr=").nth(1)
            {
                let _ = found.send(addr.trim().to_string());
            }
        }
    });
    let addr = match listening.recv_timeout(wait) {
        Ok(addr) => addr.parse()?,
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the service did not report its address".into());
        }
    };
    Ok(Spawned { child, addr, tmp })
}
