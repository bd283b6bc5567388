//! Ctrl-c at a terminal (issue 20): `agentry run` in a real pseudo-terminal,
//! as the session leader with it as its controlling terminal, so that a 0x03
//! typed at the terminal is turned into SIGINT by the line discipline. The
//! first ctrl-c cuts the step in progress and asks what to tell the agent; a
//! second one at the prompt stops the run. Without a terminal, ctrl-c stops
//! the run as it always did.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::BorrowedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_test_support::procs::unique_secs;
use rustix::pty::OpenptFlags;

use crate::*;

/// Bound on each wait for the binary (its steps take milliseconds).
const WAIT: Duration = Duration::from_secs(20);

/// What the binary prints when it asks the user.
const PROMPT: &str = "type a message for the agent and press Enter";

/// `agentry` in a fresh pseudo-terminal: stdin and stderr are the terminal,
/// stdout a pipe (the `--json` report).
struct Terminal {
    master: File,
    /// Everything the terminal showed, read by a thread so the binary never
    /// blocks on a full terminal.
    screen: Arc<Mutex<Vec<u8>>>,
    child: Child,
}

impl Terminal {
    fn spawn(args: &[&str]) -> Terminal {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = rustix::pty::openpt(flags).unwrap();
        rustix::pty::grantpt(&master).unwrap();
        rustix::pty::unlockpt(&master).unwrap();
        let name = rustix::pty::ptsname(&master, Vec::new()).unwrap();
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOCTTY.bits().cast_signed())
            .open(name.to_str().unwrap())
            .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
        command
            .args(args)
            .current_dir(root())
            .env("RUST_LOG", "info")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .stdout(Stdio::piped());
        // SAFETY: between fork and exec only two system calls run (no
        // allocation, no lock): a new session, and the terminal on stdin made
        // its controlling terminal, so the line discipline signals this process.
        unsafe {
            command.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(BorrowedFd::borrow_raw(0))?;
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        // The command holds the parent's copies of the terminal: once they are
        // closed, the reader sees the end when the binary exits.
        drop(command);
        let master = File::from(master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the last process holding the terminal is gone.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            master,
            screen,
            child,
        }
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until the terminal has shown `text` at least `times` times.
    fn wait_for(&self, text: &str, times: usize) {
        let deadline = Instant::now() + WAIT;
        while self.screen().matches(text).count() < times {
            assert!(
                Instant::now() < deadline,
                "{text:?} not shown {times} times; the terminal shows:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Types at the terminal, as a user would.
    fn type_in(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    fn ctrl_c(&mut self) {
        self.type_in(b"\x03");
    }

    /// Waits (bounded) for the binary to exit: its exit code and report.
    fn finish(&mut self) -> (i32, Value) {
        let screen = Arc::clone(&self.screen);
        let status = wait_bounded(&mut self.child, || {
            String::from_utf8_lossy(&screen.lock().unwrap()).into_owned()
        });
        let mut stdout = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON object ({e}): {stdout:?}; terminal:\n{}",
                self.screen()
            )
        });
        (status.code().unwrap(), report)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Only a failed test leaves it running; the result does not matter.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for `child` to exit, failing (with `context()`) after [`WAIT`].
fn wait_bounded(child: &mut Child, context: impl Fn() -> String) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the binary did not exit within {WAIT:?}:\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A task whose calls each hold a process tree for 30 s (`secs`, unique to
/// this test), one step each, then finish.
fn nap_task(secs: &[&str]) -> tempfile::TempDir {
    nap_task_running(secs, |s| format!("sleep {s} & sleep {s}"))
}

/// [`nap_task`], each call's tree running `script(secs)` in `sh -c`.
fn nap_task_running(secs: &[&str], script: impl Fn(&str) -> String) -> tempfile::TempDir {
    let mut turns: Vec<Value> = secs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            serde_json::json!({"tool_calls": [{
                "id": format!("nap{}", i + 1),
                "name": "proc.run",
                "arguments": {"argv": ["sh", "-c", script(s)]},
            }]})
        })
        .collect();
    turns.push(serde_json::json!({"tool_calls": [{
        "id": "finish", "name": "task.finish", "arguments": {"answer": "went on"},
    }]}));
    task_dir(
        "goal = \"nap, unless told otherwise\"\n[budget]\nmax_steps = 10\ndeadline = \"120s\"\n[tools]\ngrant = [\"proc.run\"]\n",
        &serde_json::json!({ "turns": turns }).to_string(),
    )
}

/// `run TASK --json --no-store --trace TRACE --workdir TMP/run`.
fn run_args<'a>(task: &'a Path, trace: &'a Path, workdir: &'a Path) -> Vec<&'a str> {
    vec![
        "run",
        path_str(task),
        "--json",
        "--no-store",
        "--trace",
        path_str(trace),
        "--workdir",
        path_str(workdir),
    ]
}

/// The trace's lines of `kind`.
fn trace_lines(trace: &Path, kind: &str) -> Vec<Value> {
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["kind"] == kind)
        .collect()
}

/// Ctrl-c, then an empty line: the step is cut (its sleeping processes killed)
/// and the run goes on unchanged. Ctrl-c again in the next step, then a
/// message: cut again, and the message is in the trace after the interrupt,
/// before the run resumes and finishes `done`, long before any sleep ended.
#[test]
fn ctrl_c_at_a_terminal_interrupts_asks_and_goes_on() {
    let (first, second) = (unique_secs(30), unique_secs(30));
    let task = nap_task(&[&first, &second]);
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.jsonl");
    let workdir = tmp.path().join("run");
    let started = Instant::now();
    let mut terminal = Terminal::spawn(&run_args(task.path(), &trace, &workdir));
    // Logged once ctrl-c is attached to the run.
    terminal.wait_for("run started", 1);

    wait_for_sleepers(&first, true);
    terminal.ctrl_c();
    terminal.wait_for(PROMPT, 1);
    wait_for_sleepers(&first, false);
    terminal.type_in(b"\n");
    terminal.wait_for("the run goes on", 1);

    wait_for_sleepers(&second, true);
    terminal.ctrl_c();
    terminal.wait_for(PROMPT, 2);
    wait_for_sleepers(&second, false);
    terminal.type_in(b"stop napping and finish\n");

    let (code, report) = terminal.finish();
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "waited for a nap"
    );
    assert_eq!(code, 0, "{report}\n{}", terminal.screen());
    assert_eq!(report["stop_reason"], "done", "{report}");
    assert_eq!(report["answer"], "went on", "{report}");

    let inputs = trace_lines(&trace, "input");
    let kinds: Vec<&Value> = inputs.iter().map(|l| &l["input"]).collect();
    assert_eq!(
        kinds,
        [
            &serde_json::json!({"type": "interrupt"}),
            &serde_json::json!({"type": "resume"}),
            &serde_json::json!({"type": "interrupt"}),
            &serde_json::json!({"type": "message", "text": "stop napping and finish"}),
            &serde_json::json!({"type": "resume"}),
        ],
        "{inputs:?}"
    );
    let seqs: Vec<u64> = inputs.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    let steps = trace_lines(&trace, "step");
    assert_eq!(steps.len(), 3, "{steps:?}");
    for (step, call) in steps.iter().zip(["nap1", "nap2"]) {
        assert_eq!(
            step["interrupted"]["calls"],
            serde_json::json!([call]),
            "{step}"
        );
        // The error's wording is the runtime's (tested there).
        let error = &step["results"][0]["error"];
        assert_eq!(error["code"], "ECANCELED", "{error}");
    }
    assert!(steps[2].get("interrupted").is_none(), "{}", steps[2]);
}

/// The stored run's status now (`--store STORE`, run id `RUN_ID`).
fn stored_status(store: &Path, run_id: &str) -> Value {
    use agentry::Store as _;
    let run = agentry::SqliteStore::open(store)
        .unwrap()
        .load(run_id)
        .unwrap()
        .expect("the run is stored");
    serde_json::to_value(run.checkpoint.expect("a checkpoint").snapshot.status).unwrap()
}

/// Ctrl-c, then ctrl-c again at the prompt: the run stops `user_abort` (exit
/// 1, as a ctrl-c always stopped it), its trace closed, its processes gone.
/// The prompt comes only once the run has applied the interrupt: when it
/// shows, the stored run is already paused (the tree ignores SIGTERM, so the
/// cut takes its kill grace: a prompt shown as soon as the interrupt was
/// posted finds the run still running), and the second ctrl-c can no longer
/// overtake the interrupt, which the trace then always holds.
#[test]
fn ctrl_c_at_the_prompt_stops_the_run() {
    let secs = unique_secs(30);
    let task = nap_task_running(&[&secs], |s| format!("trap '' TERM; sleep {s} & sleep {s}"));
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.jsonl");
    let workdir = tmp.path().join("run");
    let store = tmp.path().join("s.db");
    let mut args = run_args(task.path(), &trace, &workdir);
    args.retain(|a| *a != "--no-store");
    args.extend(["--store", path_str(&store), "--run-id", "prompted"]);
    let mut terminal = Terminal::spawn(&args);
    terminal.wait_for("run started", 1);
    wait_for_sleepers(&secs, true);

    terminal.ctrl_c();
    terminal.wait_for(PROMPT, 1);
    assert_eq!(stored_status(&store, "prompted"), "paused");
    terminal.ctrl_c();
    terminal.wait_for("stopping the run", 1);
    let (code, report) = terminal.finish();
    assert_eq!(code, 1, "{report}\n{}", terminal.screen());
    assert_eq!(report["stop_reason"], "user_abort", "{report}");
    wait_for_sleepers(&secs, false);
    let stop = trace_lines(&trace, "stop");
    assert_eq!(stop.len(), 1, "{stop:?}");
    assert_eq!(stop[0]["stop_reason"], "user_abort");
    let inputs = trace_lines(&trace, "input");
    assert_eq!(inputs.len(), 1, "{inputs:?}");
    assert_eq!(inputs[0]["input"], serde_json::json!({"type": "interrupt"}));
}

/// Without a terminal (stdin and stderr pipes), SIGINT stops the run at once,
/// as before: `user_abort`, exit 1, no prompt, the tool's processes gone.
#[test]
fn without_a_terminal_ctrl_c_stops_the_run() {
    let secs = unique_secs(30);
    let task = nap_task(&[&secs]);
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.jsonl");
    let workdir = tmp.path().join("run");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(run_args(task.path(), &trace, &workdir))
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_sleepers(&secs, true);
    let pid = rustix::process::Pid::from_raw(child.id().cast_signed()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    wait_bounded(&mut child, || "no terminal".to_string());
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["stop_reason"], "user_abort", "{report}");
    assert!(err.contains("stopping the run"), "{err}");
    assert!(!err.contains(PROMPT), "{err}");
    wait_for_sleepers(&secs, false);
    assert!(trace_lines(&trace, "input").is_empty());
}
