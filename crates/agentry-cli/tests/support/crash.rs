//! What the crash tests share: a command SIGKILLed after a while, and the
//! one JSON object a `--json` command prints.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// Starts `cmd` and SIGKILLs it after `delay` if it is still running:
/// nothing of the process runs after that, as in a crash. Whether it was
/// still running (a process that had already exited was not crashed).
pub fn killed_after(mut cmd: Command, delay: Duration) -> bool {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(delay);
    let running = matches!(child.try_wait(), Ok(None));
    let _ = child.kill();
    let _ = child.wait();
    running
}

/// The one JSON object `out` printed; a panic naming both streams otherwise.
pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON object ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}
