//! Agent trees as a model drives them: `agent.spawn` with only the budget it
//! cares about (or none) must leave the parent room to wait and finish.

use std::time::{Duration, Instant};

use agentry_test_support::procs::{alive_with_cmdline, unique_secs};

use crate::*;

fn run_tree(toml: &str, script: &str) -> (i32, Value) {
    let task = task_dir(toml, script);
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    agentry_json(&[
        "run",
        path_str(task.path()),
        "--no-store",
        "--workdir",
        path_str(&workdir),
    ])
}

/// A child asking only for steps used to reserve every tool call the parent had
/// left, so the parent's `agent.wait` failed `EBUDGET` and it stopped
/// `max_tool_calls`. Now the unset dimension gets half of what the parent can
/// give after keeping 2 calls: 19 left − 2 kept = 17, so 8.
#[test]
fn a_child_asking_only_for_steps_leaves_the_parent_its_calls() {
    let toml = r#"
goal = "delegate"
[budget]
max_steps = 6
max_tool_calls = 20
[tools]
grant = ["agent"]
"#;
    let script = r#"{"turns": [
        {"tool_calls": [{"id": "s", "name": "agent.spawn", "arguments": {"name": "c", "goal": "sub", "budget": {"max_steps": 3}, "script": {"turns": [{"final": "sub done"}]}}}]},
        {"tool_calls": [{"id": "w", "name": "agent.wait", "arguments": {"child_id": "c"}}]},
        {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "delegated"}}]}
    ]}"#;
    let (code, out) = run_tree(toml, script);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["stop_reason"], "done", "{out}");
    assert_eq!(out["answer"], "delegated");
}

/// Two children with no budget at all used to take every step the parent had
/// left, so its second step was refused and it stopped `max_steps` after one.
/// Now each gets half of what is left after the parent's reserve of 2 steps
/// (9 − 2 = 7: 3; then 6 − 2 = 4: 2), and the parent waits on both and finishes.
#[test]
fn children_without_a_budget_leave_the_parent_its_steps() {
    let toml = r#"
goal = "delegate twice"
[budget]
max_steps = 10
deadline = "30s"
[tools]
grant = ["agent"]
"#;
    let script = r#"{"turns": [
        {"tool_calls": [
            {"id": "s1", "name": "agent.spawn", "arguments": {"name": "a", "goal": "one", "script": {"turns": [{"final": "a done"}]}}},
            {"id": "s2", "name": "agent.spawn", "arguments": {"name": "b", "goal": "two", "script": {"turns": [{"final": "b done"}]}}}
        ]},
        {"tool_calls": [
            {"id": "wa", "name": "agent.wait", "arguments": {"child_id": "a"}},
            {"id": "wb", "name": "agent.wait", "arguments": {"child_id": "b"}}
        ]},
        {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "both"}}]}
    ]}"#;
    let (code, out) = run_tree(toml, script);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["stop_reason"], "done", "{out}");
    assert_eq!(out["steps"], 3, "{out}");
    assert_eq!(
        out["budget"]["spent"]["steps"], 5,
        "1 step per child: {out}"
    );
}

/// The same tree with children that never finish: the parent waits on them
/// until its 2 s deadline (it is not starved of steps first), the run stops
/// `deadline`, and no child's process outlives it.
#[test]
fn waiting_on_hung_children_ends_at_the_deadline_with_their_processes_gone() {
    let (a, b) = (unique_secs(7311), unique_secs(7312));
    let child = |secs: &str| {
        format!(
            r#"{{"turns": [{{"tool_calls": [{{"id": "p", "name": "proc.run", "arguments": {{"argv": ["sleep", "{secs}"]}}}}]}}]}}"#
        )
    };
    let toml = r#"
goal = "delegate and wait"
[budget]
max_steps = 10
deadline = "2s"
[tools]
grant = ["agent", "proc.run"]
"#;
    let script = format!(
        r#"{{"turns": [
        {{"tool_calls": [
            {{"id": "s1", "name": "agent.spawn", "arguments": {{"name": "a", "goal": "one", "script": {}}}}},
            {{"id": "s2", "name": "agent.spawn", "arguments": {{"name": "b", "goal": "two", "script": {}}}}}
        ]}},
        {{"tool_calls": [
            {{"id": "wa", "name": "agent.wait", "arguments": {{"child_id": "a"}}}},
            {{"id": "wb", "name": "agent.wait", "arguments": {{"child_id": "b"}}}}
        ]}},
        {{"tool_calls": [{{"id": "f", "name": "task.finish", "arguments": {{"answer": "both"}}}}]}}
    ]}}"#,
        child(&a),
        child(&b)
    );
    let started = Instant::now();
    let (code, out) = run_tree(toml, &script);
    assert_eq!(out["stop_reason"], "deadline", "{out}");
    assert_ne!(code, 0, "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    for secs in [&a, &b] {
        while !alive_with_cmdline(&["sleep", secs]).is_empty() {
            assert!(Instant::now() < deadline, "sleep {secs} outlived the run");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
