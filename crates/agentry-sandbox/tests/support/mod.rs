//! A planted world for sandbox tests: a fake home with secrets, a runs root
//! with this run's and another run's working directories, a store — all in a
//! temporary directory (the real home is never touched). Commands are real
//! `sh -c` processes, bounded by a timeout.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use agentry_sandbox::{CallSandbox, Mode, Sandbox, SandboxPlaces, SandboxSpec, default_read_deny};

/// What the planted key holds.
pub const KEY: &str = "PLANTED-SSH-KEY";
/// What the planted store holds.
pub const STORE: &str = "PLANTED-STORE-ROW";
/// What the other run's file holds.
pub const OTHER_RUN: &str = "OTHER-RUN-NOTES";
/// What the fake `.bashrc` holds before an attack.
pub const BASHRC: &str = "original bashrc\n";

/// No call may run longer: a hung sandbox fails the test instead of the suite.
const TIMEOUT: Duration = Duration::from_secs(60);

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub workdir: PathBuf,
    pub store: PathBuf,
}

#[derive(Debug)]
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.status.success()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        fs::create_dir_all(home.join(".ssh")).unwrap();
        fs::write(home.join(".ssh/id_ed25519"), KEY).unwrap();
        fs::write(home.join(".bashrc"), BASHRC).unwrap();
        let workdir = root.join("runs/run-a/work");
        fs::create_dir_all(workdir.join(".git/hooks")).unwrap();
        fs::write(workdir.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::create_dir_all(workdir.join(".agentry")).unwrap();
        fs::write(workdir.join("own.txt"), "own notes\n").unwrap();
        let other = root.join("runs/run-b/work");
        fs::create_dir_all(&other).unwrap();
        fs::write(other.join("notes.txt"), OTHER_RUN).unwrap();
        let store = root.join("state/store.db");
        fs::create_dir_all(root.join("state")).unwrap();
        fs::write(&store, STORE).unwrap();
        Fixture {
            _dir: dir,
            root,
            home,
            workdir,
            store,
        }
    }

    /// A fixture whose workdir has no `.git` (for `git init`).
    pub fn without_git() -> Fixture {
        let fixture = Fixture::new();
        fs::remove_dir_all(fixture.workdir.join(".git")).unwrap();
        fixture
    }

    /// The host's places: the TMPDIR parent and the workdir inside the runs
    /// root, which is denied as a whole (other runs), as are the store's
    /// directory and the fake home's secrets.
    pub fn places(&self) -> SandboxPlaces {
        let mut deny = default_read_deny(&self.home);
        deny.push(self.root.join("state"));
        deny.push(self.root.join("runs"));
        SandboxPlaces {
            workdir: self.workdir.clone(),
            temp_parent: self.root.join("runs/run-a/tmp"),
            deny,
        }
    }

    pub fn sandbox(&self, spec: &SandboxSpec) -> Sandbox {
        Sandbox::prepare(spec, &self.places()).unwrap()
    }

    pub fn bashrc(&self) -> String {
        fs::read_to_string(self.home.join(".bashrc")).unwrap()
    }

    /// Runs `sh -c script` in the workdir under `spec`.
    pub fn run(&self, spec: &SandboxSpec, script: &str) -> Outcome {
        let sandbox = self.sandbox(spec);
        let call = sandbox.call().unwrap();
        self.run_call(&call, script)
    }

    /// Runs `sh -c script` under an existing call.
    pub fn run_call(&self, call: &CallSandbox, script: &str) -> Outcome {
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .current_dir(&self.workdir)
            // As agentry's tools do: only what is set here reaches the process.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("ROOT", &self.root)
            .env("PY", python())
            .env("TESTPID", std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        call.apply(&mut command);
        output_within(command, TIMEOUT)
    }
}

/// The spec with the mode off, everything else the same.
pub fn off(spec: &SandboxSpec) -> SandboxSpec {
    SandboxSpec {
        mode: Mode::Off,
        ..spec.clone()
    }
}

/// Runs `attack` on a fresh world with the mode off (it must succeed), then
/// on another fresh world under `spec` (it must fail). `attack` returns
/// whether it got through, and the outcome to show when it did not behave.
pub fn attack(spec: &SandboxSpec, attack: impl Fn(&Fixture, &SandboxSpec) -> (bool, Outcome)) {
    let (got_through, outcome) = attack(&Fixture::new(), &off(spec));
    assert!(
        got_through,
        "the attack must succeed with mode = \"off\": {outcome:#?}"
    );
    let (got_through, outcome) = attack(&Fixture::new(), spec);
    assert!(
        !got_through,
        "the attack must fail under the sandbox: {outcome:#?}"
    );
}

/// The real Python interpreter (not a shim that reads the real home).
pub fn python() -> PathBuf {
    let output = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is needed by these tests");
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

fn output_within(mut command: Command, timeout: Duration) -> Outcome {
    let mut child = command.spawn().unwrap();
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let mut err = String::new();
        let _ = stdout.read_to_string(&mut out);
        let _ = stderr.read_to_string(&mut err);
        let status = child.wait().unwrap();
        let _ = sender.send(Outcome {
            status,
            stdout: out,
            stderr: err,
        });
    });
    match receiver.recv_timeout(timeout) {
        Ok(outcome) => outcome,
        Err(_) => {
            // SAFETY: signalling the child this test spawned.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("the command did not finish within {timeout:?}");
        }
    }
}

/// Pids of live processes whose command line holds `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if String::from_utf8_lossy(&cmdline).contains(marker) && is_alive(pid) {
            found.push(pid);
        }
    }
    found
}

fn is_alive(pid: i32) -> bool {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    !status
        .lines()
        .any(|line| line.starts_with("State:") && line.contains('Z'))
}

pub fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}
