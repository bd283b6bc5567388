//! Where a block's commands run: a fresh directory holding copies of the
//! repository's example tasks, with its own temp dir, state dir and home, so
//! the default store and working directories are the block's own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One command longer than this is a hang, not a slow machine.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) struct Sandbox {
    dir: tempfile::TempDir,
    runs: usize,
}

/// How a command ended: its exit code (None: killed by a signal) and stderr.
pub(super) struct Ran {
    pub(super) code: Option<i32>,
    pub(super) stderr: String,
}

impl Sandbox {
    /// A directory `work/` (the current directory of the commands) holding
    /// `examples/<task>` for every example task of the repository.
    pub(super) fn new(root: &Path) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["work/examples", "tmp", "state", "home", "logs"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        for entry in std::fs::read_dir(root.join("examples")).unwrap() {
            let path = entry.unwrap().path();
            if path.join("task.toml").is_file() {
                let name = path.file_name().unwrap();
                copy_dir(&path, &dir.path().join("work/examples").join(name));
            }
        }
        Sandbox { dir, runs: 0 }
    }

    pub(super) fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Runs the real `agentry` with these arguments and variables (on top of
    /// a cleared environment), stdin closed, within [`COMMAND_TIMEOUT`].
    pub(super) fn agentry(&mut self, env: &[(String, String)], args: &[String]) -> Ran {
        self.runs += 1;
        let logs = self.dir.path().join("logs");
        let stderr_path = logs.join(format!("{}.stderr", self.runs));
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
        command
            .args(args)
            .current_dir(self.work())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("LANG", "C")
            .env("HOME", self.dir.path().join("home"))
            .env("TMPDIR", self.dir.path().join("tmp"))
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(logs.join(format!("{}.stdout", self.runs))).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap());
        let mut child = command.spawn().unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if started.elapsed() > COMMAND_TIMEOUT {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        if status.is_none() {
            stderr.insert_str(0, &format!("(killed after {COMMAND_TIMEOUT:?}) "));
        }
        Ran {
            code: status.and_then(|s| s.code()),
            stderr,
        }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
