//! Agent trees as a model drives them: `agent.spawn` with only the budget it
//! cares about (or none) must leave the parent room to wait and finish.

use std::time::{Duration, Instant};

use agentry_test_support::procs::{alive_with_cmdline, unique_secs};

use serde_json::json;

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

/// A run that started children reports its tree (in `--json` and at the end of
/// the summary), and `agentry runs --tree` prints the same tree from the store:
/// each node's goal, model, stop reason, limits and spend.
#[test]
fn the_tree_is_reported_and_stored() {
    let toml =
        "goal = \"delegate twice\"\n[budget]\nmax_steps = 10\n[tools]\ngrant = [\"agent\"]\n";
    let script = r#"{"turns": [
        {"tool_calls": [
            {"id": "s1", "name": "agent.spawn", "arguments": {"name": "a", "goal": "one", "script": {"turns": [{"final": "A"}]}}},
            {"id": "s2", "name": "agent.spawn", "arguments": {"name": "b", "goal": "two", "budget": {"max_steps": 1}, "script": {"turns": [{"tool_calls": [{"id": "x", "name": "fs.read", "arguments": {"path": "nope"}}]}, {"final": "B"}]}}}
        ]},
        {"tool_calls": [{"id": "w", "name": "agent.wait", "arguments": {"child_ids": ["a", "b"]}}]},
        {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "both"}}]}
    ]}"#;
    let task = task_dir(toml, script);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("runs.db");
    let run = |id: &str, json: bool| {
        let workdir = tmp.path().join(id);
        let mut args = vec![
            "run",
            path_str(task.path()),
            "--store",
            path_str(&store),
            "--run-id",
            id,
            "--workdir",
            path_str(&workdir),
        ];
        if json {
            args.push("--json");
        }
        agentry(&args)
    };
    let out = run("root-json", true);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tree = &report["tree"];
    assert_eq!(tree["run_id"], "root-json");
    assert_eq!(tree["model"], "script");
    let kids = tree["children"].as_array().unwrap();
    let summary: Vec<(&Value, &Value, &Value)> = kids
        .iter()
        .map(|k| (&k["name"], &k["stop_reason"], &k["limits"]["max_steps"]))
        .collect();
    // a: half of 9 − 2 = 3 steps; b asked for 1 and needed 2.
    assert_eq!(
        summary,
        [
            (&json!("a"), &json!("done"), &json!(3)),
            (&json!("b"), &json!("max_steps"), &json!(1))
        ]
    );
    assert_eq!(kids[0]["goal"], "one");

    assert_stored_tree(&store, tree);

    let human = run("root-text", false);
    let text = String::from_utf8_lossy(&human.stdout);
    let at = text
        .find("\ntree\n")
        .unwrap_or_else(|| panic!("no tree: {text}"));
    assert!(
        text[at..].contains("├─ a  [script]  done  steps 1/3"),
        "{text}"
    );
    assert!(text[at..].contains("└─ b  [script]  max_steps"), "{text}");

    let listed = agentry(&["runs", "--store", path_str(&store), "--tree", "root-text"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("└─ b  [script]  max_steps  steps 1/1"),
        "{listed}"
    );

    let missing = agentry(&["runs", "--store", path_str(&store), "--tree", "nope"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("holds no run \"nope\""),
        "{}",
        stderr(&missing)
    );
}

/// `agentry runs --tree --json` prints the tree `run --json` reported.
fn assert_stored_tree(store: &std::path::Path, tree: &Value) {
    let run_id = tree["run_id"].as_str().unwrap();
    let (code, stored) = agentry_json(&["runs", "--store", path_str(store), "--tree", run_id]);
    assert_eq!(code, 0, "{stored}");
    assert_eq!(stored["children"], tree["children"], "{stored}");
    assert_eq!(stored["spent"], tree["spent"]);
    assert!(
        stored["model"].as_str().unwrap().starts_with("script:"),
        "{stored}"
    );
}
