//! A durable agent tree survives a crash: `agentry run --store` SIGKILLed while
//! three children nap in flight, then `agentry resume` of the root resumes the
//! children under it (those that finished keep their outcomes: their side
//! effect, a line in a file, happened exactly once), `agent.wait` gets every
//! outcome, and the whole tree spends within the root's limits.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentry::SqliteStore;
use agentry::store::Store;
use agentry_test_support::procs::alive_with_cmdline;
use serde_json::{Value, json};

const MAX_STEPS: u64 = 40;
const MAX_TOOL_CALLS: u64 = 40;

/// The task: child `ck` naps `k` times (so they finish one after another;
/// each nap names its round, or the same call three times over would be no
/// progress), appends its name to `marks` (its side effect) and finishes.
fn write_task(dir: &Path, nap: &str, marks: &Path) {
    let mark = json!([
        "sh",
        "-c",
        format!("printf '%s\\n' \"$1\" >> {}", marks.display()),
        "sh",
        "{child}"
    ]);
    let toml = format!(
        r#"goal = "delegate three naps and report"
[budget]
max_steps = {MAX_STEPS}
max_tool_calls = {MAX_TOOL_CALLS}
deadline = "60s"

[tools]
grant = ["agent", "nap", "mark"]

[[tools.command]]
name = "nap"
description = "Nap a little"
argv = ["sleep", "{nap}"]
input_schema = {{ type = "object", properties = {{ round = {{ type = "integer" }} }} }}
effect = "read_only"
idempotency = "idempotent"

[[tools.command]]
name = "mark"
description = "Say a child got here"
argv = {mark}
input_schema = {{ type = "object", properties = {{ child = {{ type = "string" }} }}, required = ["child"] }}
effect = "reversible"
idempotency = "idempotent"
# The marks are outside the working directory: granted, nothing more.
sandbox = {{ write = [{marks_dir:?}] }}
"#,
        marks_dir = marks
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default()
    );
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    let child = |k: usize| {
        let mut turns: Vec<Value> = (1..=k)
            .map(|i| json!({"tool_calls": [{"id": format!("n{k}{i}"), "name": "nap", "arguments": {"round": i}}]}))
            .collect();
        turns.push(
            json!({"tool_calls": [{"id": format!("m{k}"), "name": "mark",
            "arguments": {"child": format!("c{k}")}}]}),
        );
        turns.push(json!({"tool_calls": [{"id": "f", "name": "task.finish",
            "arguments": {"answer": format!("napped {k}")}}]}));
        json!({"turns": turns})
    };
    let spawns: Vec<Value> = (1..=3)
        .map(|k| {
            json!({"id": format!("s{k}"), "name": "agent.spawn", "arguments": {
                "name": format!("c{k}"), "goal": format!("nap {k}"),
                "budget": {"max_steps": 8, "max_tool_calls": 8},
                "script": child(k)}})
        })
        .collect();
    let turns = json!([
        {"tool_calls": spawns},
        {"tool_calls": [{"id": "w", "name": "agent.wait", "arguments": {"child_ids": ["c1", "c2", "c3"]}}]},
        {"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "all napped"}}]},
    ]);
    std::fs::write(
        dir.join("script.json"),
        json!({ "turns": turns }).to_string(),
    )
    .unwrap();
}

/// The names of `run_id`'s children the store holds as ended `done`.
fn done_children(store: &Path, run_id: &str) -> Vec<String> {
    let store = SqliteStore::open(store).unwrap();
    store
        .runs()
        .unwrap()
        .into_iter()
        .filter(|r| r.parent_id.as_deref() == Some(run_id))
        .filter(|r| r.stop_reason.map(|s| s.to_string()).as_deref() == Some("done"))
        .map(|r| r.task_id)
        .collect()
}

/// How many times each child's side effect happened: a child done at the
/// kill keeps its outcome (exactly once, not run again); one cut short did
/// it once, or twice if the kill fell inside its (re-runnable) mark call.
fn check_marks(marks: &Path, done_at_kill: &[String], i: usize) {
    let text = std::fs::read_to_string(marks).unwrap_or_default();
    for k in 1..=3 {
        let name = format!("c{k}");
        let n = text.lines().filter(|l| *l == name).count();
        if done_at_kill.contains(&name) {
            assert_eq!(n, 1, "cycle {i}: {name} was done at the kill: {text:?}");
        } else {
            assert!((1..=2).contains(&n), "cycle {i}: {name}: {text:?}");
        }
    }
}

fn agentry() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.env_remove("RUST_LOG");
    cmd
}

/// What one cycle found.
struct Cycled {
    /// The kill came before the run ended (there was something to resume).
    resumed: bool,
    /// Children done at the kill, whose side effect must not happen again.
    kept: usize,
}

/// One cycle: the tree killed `after` its first nap started, then resumed.
fn cycle(root: &Path, i: usize, after: Duration) -> Cycled {
    let nap = format!("0.{}", 150 + i);
    let task = root.join(format!("task{i}"));
    std::fs::create_dir_all(&task).unwrap();
    // A directory of their own: the sandbox grants the mark tool exactly
    // that (the store's directory, `root`, stays hidden).
    let marks = root.join(format!("marks{i}")).join("marks.txt");
    std::fs::create_dir_all(root.join(format!("marks{i}"))).unwrap();
    write_task(&task, &nap, &marks);
    let store = root.join(format!("s{i}.db"));
    let run_id = format!("tree-{i}");
    let mut run = agentry()
        .arg("run")
        .arg(&task)
        .arg("--store")
        .arg(&store)
        .arg("--workdir")
        .arg(root.join(format!("w{i}")))
        .args(["--run-id", &run_id, "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while alive_with_cmdline(&["sleep", &nap]).is_empty() {
        assert!(Instant::now() < deadline, "cycle {i}: no child napped");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(after);
    run.kill().unwrap();
    run.wait().unwrap();
    let done_at_kill = done_children(&store, &run_id);

    let out = agentry()
        .args(["resume", &run_id, "--json", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("cycle {i}: {e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    let ended_first = report["error"]
        .as_str()
        .is_some_and(|e| e.contains("already stopped (done)"));
    if !ended_first {
        assert_eq!(out.status.code(), Some(0), "cycle {i}: {report}");
    }
    if !ended_first {
        assert_eq!(report["stop_reason"], "done", "cycle {i}: {report}");
        assert_eq!(report["answer"], "all napped", "cycle {i}: {report}");
    }
    check_marks(&marks, &done_at_kill, i);
    check_tree(&store, &run_id, i);
    Cycled {
        resumed: !ended_first,
        kept: done_at_kill.len(),
    }
}

/// Every child ended `done`; the tree's spend (the root's own plus each
/// child's) is within the root's limits.
fn check_tree(store: &Path, run_id: &str, i: usize) {
    let store = SqliteStore::open(store).unwrap();
    let runs = store.runs().unwrap();
    let children: Vec<_> = runs
        .iter()
        .filter(|r| r.parent_id.as_deref() == Some(run_id))
        .collect();
    assert_eq!(children.len(), 3, "cycle {i}: {runs:?}");
    let mut steps = 0;
    let mut calls = 0;
    for child in &children {
        let stored = store.load(&child.run_id).unwrap().unwrap();
        let cp = stored.checkpoint.unwrap();
        assert_eq!(
            cp.snapshot
                .control
                .stop_reason
                .map(|r| r.to_string())
                .as_deref(),
            Some("done"),
            "cycle {i}: child {}",
            child.run_id
        );
        steps += cp.snapshot.control.spent.steps;
        calls += cp.snapshot.control.spent.tool_calls;
    }
    let root = store.load(run_id).unwrap().unwrap().checkpoint.unwrap();
    let control = root.snapshot.control;
    let own = control.spent.minus(&control.delegated);
    assert!(
        own.steps + steps <= MAX_STEPS && own.tool_calls + calls <= MAX_TOOL_CALLS,
        "cycle {i}: the tree spent {} steps and {} calls",
        own.steps + steps,
        own.tool_calls + calls
    );
    assert_eq!(
        control.spent.steps,
        own.steps + steps,
        "cycle {i}: the root counts what its children spent"
    );
}

#[test]
fn a_tree_killed_with_three_children_in_flight_resumes_and_completes() {
    let root = tempfile::tempdir().unwrap();
    // Kills spread over the children's naps (~0.15 s each: child k naps k
    // times in a row, so c1 is done from ~0.16 s and c2 from ~0.32 s).
    let (mut resumed, mut kept) = (0, 0);
    for (i, ms) in [0u64, 70, 140, 210, 280, 350].into_iter().enumerate() {
        let cycled = cycle(
            root.path(),
            i,
            Duration::from_millis(ms + fastrand::u64(0..40)),
        );
        resumed += usize::from(cycled.resumed);
        kept += cycled.kept;
    }
    eprintln!(
        "crash tree: {resumed} of 6 kills before the tree ended, {kept} children done at a kill"
    );
    assert!(
        resumed >= 4,
        "only {resumed} kills landed before the tree ended"
    );
    // Children done at a kill are what the exactly-once check is about.
    assert!(kept >= 2, "only {kept} children were done at a kill");
}
