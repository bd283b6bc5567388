//! What the binaries that measure `agentry serve` from outside over HTTP
//! share (`agentry-cluster-bench`, `agentry-protocols-bench`): their error
//! type, percentiles, and a service process started on a free port.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What stops a measurement, in words (a binary's own error, shown on exit).
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `Err` with `message` unless `ok`.
pub fn ensure(ok: bool, message: impl FnOnce() -> String) -> Res<()> {
    if ok { Ok(()) } else { Err(message().into()) }
}

/// The `p`th percentile of `sorted` (nearest rank).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// The `agentry` binary to measure: `named`, else the one next to the
/// running binary (both are built into the same target folder).
pub fn agentry_binary(named: Option<&std::path::Path>) -> Res<std::path::PathBuf> {
    match named {
        Some(path) => Ok(path.to_path_buf()),
        None => Ok(std::env::current_exe()?.with_file_name("agentry")),
    }
}

/// Every line an `agentry serve` printed on stderr, with when it came.
pub type ServeLog = Arc<Mutex<Vec<(Instant, String)>>>;

/// An `agentry serve` process listening on 127.0.0.1; killed when dropped.
pub struct Served {
    child: Child,
    /// `http://127.0.0.1:PORT`, as the service printed it.
    pub base: String,
    /// Its stderr, line by line.
    pub log: ServeLog,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Spawns `command` (an `agentry serve` given `--addr 127.0.0.1:0`), with
    /// its output quiet but for stderr, and waits up to `wait` for the address
    /// it prints.
    pub fn spawn(mut command: Command, wait: Duration) -> Res<Served> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .env("RUST_LOG", "error")
            .env_remove("AGENTRY_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!("{program}: {e} (build it: cargo build --release -p agentry-cli)")
            })?;
        let stderr = child
            .stderr
            .take()
            .ok_or("the service's stderr is not piped")?;
        let log: ServeLog = Arc::default();
        let seen = Arc::clone(&log);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("agentry: serve: listening on ") {
                    let _ = tx.send(url.to_string());
                }
                seen.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((Instant::now(), line));
            }
        });
        let Ok(base) = rx.recv_timeout(wait) else {
            let _ = child.kill();
            return Err("the service did not print its address".into());
        };
        Ok(Served { child, base, log })
    }
}
