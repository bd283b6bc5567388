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

/// The process groups the store has recorded for run `fenced`'s calls so far.
fn recorded_groups(store: &Path) -> Vec<i32> {
    use agentry::Store as _;
    if !store.exists() {
        return Vec::new();
    }
    let run = agentry::SqliteStore::open(store)
        .ok()
        .and_then(|s| s.load("fenced").ok().flatten());
    run.map(|run| {
        run.ledger
            .iter()
            .flat_map(|row| row.processes.iter().map(|g| g.pgid))
            .collect()
    })
    .unwrap_or_default()
}

/// The process group of process `pid` (field 5 of `/proc/PID/stat`).
fn group_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, rest) = stat.rsplit_once(')').unwrap();
    rest.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// With the warden taken down first, the tools survive their runtime; the
/// resume kills them (the group recorded in the ledger, found by its leader's
/// start time) before it settles the call, which then parks for a human. The
/// resume says which group it fenced: the one the store recorded, the
/// sleepers' own — so their end is the fence's doing, not chance's.
#[test]
fn a_resume_kills_what_the_crashed_attempt_left_before_it_settles() {
    let secs = unique_secs(47);
    let task = nap_task(&secs);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s.db");
    let mut run = spawn_run(task.path(), &store, &tmp.path().join("w"));
    wait_for_sleepers(&secs, true);
    // The call's group reaches the store beside it, not before: killed
    // earlier, only the run's environment mark would find the sleepers.
    let deadline = Instant::now() + WAIT;
    while recorded_groups(&store).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no group recorded within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let warden = warden_of(run.id()).expect("the run's warden");
    kill9(warden);
    run.kill().unwrap();
    run.wait().unwrap();
    let sleepers = alive_with_cmdline(&["sleep", &secs]);
    assert_eq!(
        sleepers.len(),
        2,
        "without the warden the tools outlive the runtime"
    );
    let recorded = recorded_groups(&store);
    assert_eq!(recorded.len(), 1, "one call, one group: {recorded:?}");
    let pgid = recorded[0];
    for pid in &sleepers {
        assert_eq!(
            group_of(*pid),
            pgid,
            "sleeper {pid} is in the recorded group"
        );
    }

    let out = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["resume", "fenced", "--json", "--store", path_str(&store)])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {err}");
    });
    // `proc.run` may have side effects and is not idempotent: its interrupted
    // call waits for a human, now that nothing of it runs any more.
    assert_eq!(out.status.code(), Some(3), "{report}");
    assert_eq!(report["status"], "awaiting_decision", "{report}");
    let fenced: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("fenced process group"))
        .collect();
    assert_eq!(
        fenced,
        [format!(
            "agentry: fenced process group {pgid}, left running by an earlier attempt of run fenced"
        )],
        "{err}"
    );
    assert!(
        alive_with_cmdline(&["sleep", &secs]).is_empty(),
        "the resume fenced the survivors before it parked"
    );
}
