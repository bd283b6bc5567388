//! Bad input exits 2 naming what is wrong: task files, scripts, policies,
//! an unwritable trace.

use crate::*;

#[test]
fn invalid_task_toml_exits_2_naming_file_and_field() {
    let dir = task_dir(
        "goal = \"x\"\n[budget]\nmax_steps = \"ten\"\n",
        r#"{"turns":[{"final":"x"}]}"#,
    );
    let out = agentry(&["run", path_str(dir.path()), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    // With --json the error is also the one JSON object on stdout.
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exit_code"], 2);
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("budget.max_steps")
    );
    let err = stderr(&out);
    assert!(
        err.contains(path_str(&dir.path().join("task.toml"))),
        "{err}"
    );
    assert!(
        err.contains("budget.max_steps: expected a positive integer, found \"ten\""),
        "{err}"
    );
}

#[test]
fn missing_task_dir_exits_2() {
    let out = agentry(&["run", "examples/no-such-task"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("examples/no-such-task"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_script_exits_2_naming_file_and_field() {
    let dir = task_dir(
        "goal = \"x\"\n",
        r#"{"turns":[{"tool_calls":[{"id":"a","arguments":{}}]}]}"#,
    );
    let out = agentry(&["run", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(path_str(&dir.path().join("script.json"))),
        "{err}"
    );
    assert!(err.contains("turns[0].tool_calls[0].name"), "{err}");
}

#[test]
fn missing_script_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.toml"), "goal = \"x\"\n").unwrap();
    let out = agentry(&["run", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(path_str(&dir.path().join("script.json"))),
        "{err}"
    );

    let out = agentry(&["run", "examples/sum", "--policy", "script:no/such.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no/such.json"), "{}", stderr(&out));
}

#[test]
fn policy_flag_takes_a_script_relative_to_the_current_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--policy",
        "script:examples/stuck/script.json",
        "--workdir",
        path_str(&tmp.path().join("run")),
    ]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["stop_reason"], "no_progress");
}

#[test]
fn other_policy_schemes_exit_2() {
    let out = agentry(&["run", "examples/sum", "--policy", "gemini:x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("openai:MODEL or anthropic:MODEL"), "{err}");
}

#[test]
fn an_unwritable_trace_path_exits_2_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let trace = blocker.join("t.jsonl");
    let workdir = tmp.path().join("run");
    let out = agentry(&[
        "run",
        "examples/sum",
        "--trace",
        path_str(&trace),
        "--workdir",
        path_str(&workdir),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(path_str(&trace)), "{}", stderr(&out));
    // Refused before the working directory was made.
    assert!(!workdir.exists());
}
