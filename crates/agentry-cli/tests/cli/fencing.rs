//! No tool process outlives its runtime unnoticed: when `agentry` is
//! SIGKILLed its warden kills the tools' process groups, and a resume kills
//! whatever an earlier attempt left (even with the warden gone too) before it
//! settles a call.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agentry_test_support::procs::{alive_with_cmdline, child_named, unique_secs};
use serde_json::Value;

use super::super::{path_str, task_dir, wait_for_sleepers};

const WAIT: Duration = Duration::from_secs(10);

/// One `proc.run` call that sleeps `secs` in a tree of two, then finish.
fn nap_task(secs: &str) -> tempfile::TempDir {
    let turns = serde_json::json!([
        {"tool_calls": [{"id": "nap", "name": "proc.run",
            "arguments": {"argv": ["sh", "-c", format!("sleep {secs} & sleep {secs}")]}}]},
        {"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "ok"}}]},
    ]);
    task_dir(
        "goal = \"nap\"\n[budget]\nmax_steps = 10\ndeadline = \"120s\"\n[tools]\ngrant = [\"proc.run\"]\n",
        &serde_json::json!({ "turns": turns }).to_string(),
    )
}

fn spawn_run(task: &Path, store: &Path, workdir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["run", path_str(task), "--json", "--run-id", "fenced"])
        .args(["--store", path_str(store), "--workdir", path_str(workdir)])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The warden `agentry` process `pid` started (its `$0` is `agentry-warden`).
fn warden_of(pid: u32) -> Option<i32> {
    let deadline = Instant::now() + WAIT;
    loop {
        let found = child_named(pid, agentry::tools::proc::WARDEN_NAME);
        if found.is_some() || Instant::now() >= deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn kill9(pid: i32) {
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -KILL {pid}");
}

/// SIGKILL `agentry run` while its tool sleeps in a tree: the warden kills
/// the whole group at once, nothing is left to a resume.
#[test]
fn a_killed_runtime_leaves_no_tool_process() {
    let secs = unique_secs(47);
    let task = nap_task(&secs);
    let tmp = tempfile::tempdir().unwrap();
    let mut run = spawn_run(task.path(), &tmp.path().join("s.db"), &tmp.path().join("w"));
    wait_for_sleepers(&secs, true);
    run.kill().unwrap();
    run.wait().unwrap();
    wait_for_sleepers(&secs, false);
}

/// With the warden taken down first, the tools survive their runtime; the
/// resume kills them (the group recorded in the ledger, found by its leader's
/// start time) before it settles the call, which then parks for a human.
#[test]
fn a_resume_kills_what_the_crashed_attempt_left_before_it_settles() {
    let secs = unique_secs(47);
    let task = nap_task(&secs);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s.db");
    let mut run = spawn_run(task.path(), &store, &tmp.path().join("w"));
    wait_for_sleepers(&secs, true);
    let warden = warden_of(run.id()).expect("the run's warden");
    kill9(warden);
    run.kill().unwrap();
    run.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        alive_with_cmdline(&["sleep", &secs]).len(),
        2,
        "without the warden the tools outlive the runtime"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["resume", "fenced", "--json", "--store", path_str(&store)])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    // `proc.run` may have side effects and is not idempotent: its interrupted
    // call waits for a human, now that nothing of it runs any more.
    assert_eq!(out.status.code(), Some(3), "{report}");
    assert_eq!(report["status"], "awaiting_decision", "{report}");
    assert!(
        alive_with_cmdline(&["sleep", &secs]).is_empty(),
        "the resume fenced the survivors before it parked"
    );
}
