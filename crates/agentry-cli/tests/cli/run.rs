//! Runs that go to their end: exit codes, `--json`, the human summary, the
//! trace, and the flags that override the task.

use crate::*;

#[test]
fn sum_finishes_done_in_three_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let (code, out) = agentry_json(&["run", "examples/sum", "--workdir", path_str(&workdir)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["stop_reason"], "done");
    assert_eq!(out["task_id"], "sum");
    assert_eq!(out["steps"], 3);
    assert_eq!(out["tool_calls"], 3);
    assert_eq!(out["answer"], "sum=23");
    assert_eq!(out["trace"], Value::Null);
    for key in ["run_id", "detail", "checks", "budget"] {
        assert!(out.get(key).is_some(), "missing {key}: {out}");
    }
    let checks = out["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert!(checks.iter().all(|c| c["passed"] == true), "{out}");
    let reported = PathBuf::from(out["workdir"].as_str().unwrap());
    assert_eq!(reported, std::fs::canonicalize(&workdir).unwrap());
    let sum = std::fs::read_to_string(workdir.join("sum.txt")).unwrap();
    assert_eq!(sum.trim(), "23");
}

#[test]
fn human_summary_names_stop_reason_and_workdir() {
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let out = agentry(&["run", "examples/sum", "--workdir", path_str(&workdir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("stop_reason  done"), "{text}");
    assert!(text.contains("steps        3"), "{text}");
    assert!(text.contains("answer       sum=23"), "{text}");
    let canonical = std::fs::canonicalize(&workdir).unwrap();
    assert!(text.contains(path_str(&canonical)), "{text}");
}

#[test]
fn stuck_stops_with_no_progress_long_before_max_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let (code, out) = agentry_json(&["run", "examples/stuck", "--workdir", path_str(&workdir)]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["stop_reason"], "no_progress");
    // Step 1 reads into an empty world; steps 2-4 repeat the same action on the
    // same world with the same observation: the window of 3 is full at step 4.
    assert_eq!(out["steps"], 4);
    assert_eq!(out["budget"]["limits"]["max_steps"], 20);
}

#[test]
fn trace_is_jsonl_with_step_and_stop_records() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("traces/sum.jsonl");
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--workdir",
        path_str(&tmp.path().join("run")),
        "--trace",
        path_str(&trace),
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["trace"], path_str(&trace));
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    let (last, steps) = lines.split_last().unwrap();
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step["kind"], "step");
        assert_eq!(step["run_id"], out["run_id"]);
        assert_eq!(step["step"], i as u64 + 1);
        for key in [
            "decision",
            "budget_before",
            "budget_after",
            "state_version",
            "fingerprint",
        ] {
            assert!(step.get(key).is_some(), "step {i} lacks {key}: {step}");
        }
        let results = step["results"].as_array().unwrap();
        assert_eq!(results.len(), 1);
        assert!(results[0]["tool_call_id"].is_string(), "{step}");
    }
    let ids: Vec<&Value> = steps
        .iter()
        .map(|s| &s["results"][0]["tool_call_id"])
        .collect();
    assert_eq!(ids, ["read", "write", "finish"]);
    assert_eq!(last["kind"], "stop");
    assert_eq!(last["stop_reason"], "done");
    assert_eq!(last["run_id"], out["run_id"]);
}

#[test]
fn max_steps_flag_overrides_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--max-steps",
        "1",
        "--workdir",
        path_str(&tmp.path().join("run")),
    ]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["stop_reason"], "max_steps");
    assert_eq!(out["steps"], 1);
}

#[test]
fn deadline_flag_overrides_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--deadline",
        "5s",
        "--workdir",
        path_str(&tmp.path().join("run")),
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["budget"]["limits"]["deadline_ms"], 5000);
}

/// A call that parks for approval under `agentry run` (nobody can approve
/// it there) is named on stderr with the way to let it run, not waited on
/// silently; the timeout refuses it, and with `--approve` it runs.
#[test]
fn a_call_parked_for_approval_is_named_with_how_to_let_it_run() {
    let toml = "goal = \"g\"\n[tools]\ngrant = [\"fs.write\"]\napprove = [\"fs.write\"]\n\
                approval_timeout = \"1s\"\n";
    let call = serde_json::json!({"id": "w1", "name": "fs.write",
        "arguments": {"path": "a.txt", "content": "a"}});
    let script = serde_json::json!({"turns": [{"tool_calls": [call]}, {"final": "ok"}]});
    let task = task_dir(toml, &script.to_string());
    let workdir = task.path().join("work");
    let out = agentry(&[
        "run",
        path_str(task.path()),
        "--workdir",
        path_str(&workdir),
    ]);
    let err = stderr(&out);
    assert!(
        err.contains("call w1 (fs.write) waits for a human's approval"),
        "{err}"
    );
    assert!(err.contains("--approve fs.write"), "{err}");
    assert!(!workdir.join("a.txt").exists(), "refused at the timeout");

    let out = agentry(&[
        "run",
        path_str(task.path()),
        "--workdir",
        path_str(&workdir),
        "--approve",
        "fs.write",
    ]);
    let err = stderr(&out);
    assert!(!err.contains("waits for a human's approval"), "{err}");
    assert!(workdir.join("a.txt").exists(), "{err}");
}
