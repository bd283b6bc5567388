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

/// One `proc.run` call whose tree leaves its group (`setsid`) and stays in it,
/// both sleeping `secs`, then finish.
fn escaping_nap_task(secs: &str) -> tempfile::TempDir {
    let turns = serde_json::json!([
        {"tool_calls": [{"id": "nap", "name": "proc.run",
            "arguments": {"argv": ["sh", "-c", format!("setsid sleep {secs} & sleep {secs}")]}}]},
        {"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "ok"}}]},
    ]);
    task_dir(
        "goal = \"nap\"\n[budget]\nmax_steps = 10\ndeadline = \"120s\"\n[tools]\ngrant = [\"proc.run\"]\n",
        &serde_json::json!({ "turns": turns }).to_string(),
    )
}

/// Waits until exactly `n` processes run `sleep secs`.
fn wait_for_count(secs: &str, n: usize) {
    let deadline = Instant::now() + WAIT;
    while alive_with_cmdline(&["sleep", secs]).len() != n {
        assert!(
            Instant::now() < deadline,
            "sleep {secs}: {} alive, not {n}, after {WAIT:?}",
            alive_with_cmdline(&["sleep", secs]).len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The `AGENTRY_RUN_MARK` in process `pid`'s environment.
fn run_mark_of(pid: i32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|entry| {
        let entry = std::str::from_utf8(entry).ok()?;
        entry.strip_prefix("AGENTRY_RUN_MARK=").map(str::to_string)
    })
}

/// The fence mark the store keeps for run `fenced`.
fn stored_mark(store: &Path) -> String {
    use agentry::Store as _;
    let run = agentry::SqliteStore::open(store)
        .unwrap()
        .load("fenced")
        .unwrap()
        .unwrap();
    run.record.config["run_mark"].as_str().unwrap().to_string()
}

/// Run ids are unique within a store only. Two stores each hold a run
/// `fenced`: store A's runs live, store B's crashed with its warden gone
/// (one sleeper left its group). Resuming B kills B's survivors and never
/// A's: the fence finds a run's processes by a mark unique to the run
/// across stores, not by its id.
#[test]
fn a_resume_spares_the_tools_of_a_same_named_run_of_another_store() {
    let (secs_a, secs_b) = (unique_secs(53), unique_secs(59));
    let (task_a, task_b) = (nap_task(&secs_a), escaping_nap_task(&secs_b));
    let tmp = tempfile::tempdir().unwrap();
    let (store_a, store_b) = (tmp.path().join("a.db"), tmp.path().join("b.db"));
    let mut run_a = spawn_run(task_a.path(), &store_a, &tmp.path().join("wa"));
    let mut run_b = spawn_run(task_b.path(), &store_b, &tmp.path().join("wb"));
    wait_for_count(&secs_a, 2);
    wait_for_count(&secs_b, 2);
    let deadline = Instant::now() + WAIT;
    while recorded_groups(&store_b).is_empty() {
        assert!(Instant::now() < deadline, "no group recorded in B");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Every tool process carries its run's mark, the one its store keeps;
    // the two runs' marks differ though their ids are the same.
    let (mark_a, mark_b) = (stored_mark(&store_a), stored_mark(&store_b));
    assert_ne!(mark_a, mark_b);
    for (secs, mark) in [(&secs_a, &mark_a), (&secs_b, &mark_b)] {
        for pid in alive_with_cmdline(&["sleep", secs]) {
            assert_eq!(run_mark_of(pid).as_ref(), Some(mark), "sleeper {pid}");
        }
    }
    kill9(warden_of(run_b.id()).expect("run B's warden"));
    run_b.kill().unwrap();
    run_b.wait().unwrap();
    assert_eq!(alive_with_cmdline(&["sleep", &secs_b]).len(), 2);

    let out = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["resume", "fenced", "--json", "--store", path_str(&store_b)])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");

    assert!(
        alive_with_cmdline(&["sleep", &secs_b]).is_empty(),
        "B's resume fenced B's survivors, the one that left its group too"
    );
    assert_eq!(
        alive_with_cmdline(&["sleep", &secs_a]).len(),
        2,
        "B's resume killed the tools of store A's run of the same id: {err}"
    );
    assert!(run_a.try_wait().unwrap().is_none(), "run A still runs");
    run_a.kill().unwrap();
    run_a.wait().unwrap();
    wait_for_sleepers(&secs_a, false);
}
