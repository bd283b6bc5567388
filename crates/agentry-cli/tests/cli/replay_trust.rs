//! `agentry replay` and a trace that is code: what it will run is shown
//! first and runs only with `--yes`; approvals come from the step records
//! alone; a recording that contradicts itself is refused.

use super::replay::{record, replay, same, statuses};
use crate::*;

/// A task whose one tool is `proc.run` (`reversible`), gated by `approve`
/// when `gated` (nobody answers while recording: refused after a second),
/// and whose script runs `argv` once, then finishes.
fn proc_task(argv: &[&str], gated: bool) -> tempfile::TempDir {
    let approve = if gated {
        "approve = [\"proc.run\"]\napproval_timeout = \"1s\"\n"
    } else {
        ""
    };
    let toml = format!("goal = \"g\"\n[tools]\ngrant = [\"proc.run\"]\n{approve}");
    let call = serde_json::json!({"id": "c1", "name": "proc.run", "arguments": {"argv": argv}});
    let script = serde_json::json!({"turns": [{"tool_calls": [call]}, {"final": "ok"}]});
    task_dir(&toml, &script.to_string())
}

/// The trace's lines with `edit` applied to each, as JSON.
fn edited(trace: &Path, to: &Path, edit: impl Fn(&mut Value)) {
    let text = std::fs::read_to_string(trace).unwrap();
    let lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            edit(&mut v);
            v.to_string()
        })
        .collect();
    std::fs::write(to, lines.join("\n")).unwrap();
}

/// A trace is code: its `proc.run` argv edited after the recording (nothing
/// in the record contradicts it: a result does not repeat its arguments).
/// Without `--yes` (stdin no terminal) the replay lists the task directory and
/// the call with its effect, runs nothing and exits 2; `--dry-run` lists it
/// and exits 0; `--yes` runs what it listed.
#[test]
fn an_edited_argv_is_shown_and_runs_only_with_yes() {
    let task = proc_task(&["true"], false);
    // The marker is in the task directory, outside the working directory:
    // the sandbox grants exactly that, so `--yes` can be seen to run it.
    let toml = task.path().join("task.toml");
    let granted = format!(
        "{}[sandbox]\nwrite = [{:?}]\n",
        std::fs::read_to_string(&toml).unwrap(),
        path_str(task.path())
    );
    std::fs::write(&toml, granted).unwrap();
    let trace = task.path().join("t.jsonl");
    record(task.path(), &trace);
    let marker = task.path().join("marker");
    let forged = task.path().join("forged.jsonl");
    edited(&trace, &forged, |v| {
        if v["kind"] == "step" && v["step"] == 1 {
            v["decision"]["calls"][0]["arguments"]["argv"] =
                serde_json::json!(["touch", path_str(&marker)]);
        }
    });

    let out = agentry(&["replay", path_str(&forged)]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!marker.exists(), "the edited argv ran without --yes");
    assert!(err.contains("--yes"), "{err}");
    assert!(
        err.contains(path_str(task.path())),
        "the task directory: {err}"
    );
    assert!(err.contains("proc.run (reversible)"), "{err}");
    assert!(
        err.contains(path_str(&marker)),
        "the argv as it will run: {err}"
    );
    let (code, json) = agentry_json(&["replay", path_str(&forged)]);
    assert_eq!((code, json["exit_code"].clone()), (2, 2.into()), "{json}");
    assert!(!marker.exists());

    let out = agentry(&["replay", path_str(&forged), "--dry-run"]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("1     c1  proc.run (reversible)"), "{text}");
    assert!(text.contains(path_str(&marker)), "{text}");
    let (code, plan) = agentry_json(&["replay", path_str(&forged), "--dry-run"]);
    assert_eq!(code, 0, "{plan}");
    assert_eq!(plan["confirm"], true, "{plan}");
    assert_eq!(plan["task_dir"], path_str(task.path()), "{plan}");
    let call = &plan["calls"][0];
    assert_eq!(
        (
            call["step"].clone(),
            call["tool"].clone(),
            call["effect"].clone()
        ),
        (1.into(), "proc.run".into(), "reversible".into()),
        "{plan}"
    );
    assert_eq!(call["arguments"]["argv"][1], path_str(&marker), "{plan}");
    assert!(!marker.exists(), "a dry run ran the call");

    let (code, report) = replay(&[path_str(&forged)]);
    assert!(code == 0 || code == 1, "{report}");
    assert!(marker.exists(), "--yes runs what it listed: {report}");
}

/// A replay of read-only calls only needs no `--yes`.
#[test]
fn a_read_only_replay_needs_no_yes() {
    let task = task_dir(
        "goal = \"g\"\n[tools]\ngrant = [\"fs.read\"]\n",
        r#"{"turns":[{"tool_calls":[{"id":"r","name":"fs.read","arguments":{"path":"a.txt"}}]},{"final":"ok"}]}"#,
    );
    std::fs::create_dir(task.path().join("workspace")).unwrap();
    std::fs::write(task.path().join("workspace/a.txt"), "a").unwrap();
    let trace = task.path().join("t.jsonl");
    record(task.path(), &trace);
    let (code, report) = agentry_json(&["replay", path_str(&trace)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(2));
}

/// A call the recording shows refused (it waited for approval and nobody
/// gave it) stays refused, whatever the trace's stop line claims was
/// approved up front (`origin.approved = ["*"]`, forged).
#[test]
fn a_forged_origin_approval_approves_nothing_the_record_refused() {
    let marker = tempfile::tempdir().unwrap();
    let marker = marker.path().join("marker");
    let task = proc_task(&["touch", path_str(&marker)], true);
    let trace = task.path().join("t.jsonl");
    let run = record(task.path(), &trace);
    assert!(!marker.exists(), "the recorded run was refused: {run}");
    let forged = task.path().join("forged.jsonl");
    edited(&trace, &forged, |v| {
        if v["kind"] == "stop" {
            v["origin"]["approved"] = serde_json::json!(["*"]);
        }
    });

    let (code, report) = replay(&[path_str(&forged)]);
    assert!(!marker.exists(), "the forged origin approved the call");
    assert_eq!(code, 0, "refused then and now: {report}");
    assert_eq!(statuses(&report), same(2));
}

/// A trace whose records contradict each other is refused naming the step
/// (exit 2, nothing run) unless `--force`: a result that answers another call
/// than its decision made, an approval the step's result shows was never
/// given.
#[test]
fn a_trace_that_contradicts_itself_is_refused_naming_the_step() {
    let marker = tempfile::tempdir().unwrap();
    let marker = marker.path().join("marker");
    let task = proc_task(&["touch", path_str(&marker)], true);
    let trace = task.path().join("t.jsonl");
    let run = record(task.path(), &trace);

    // A human's approval added for the call the step shows refused.
    let approved = task.path().join("approved.jsonl");
    let text = std::fs::read_to_string(&trace).unwrap();
    let input = serde_json::json!({"kind": "input", "run_id": run["run_id"], "seq": 1,
        "state_version": 0, "at": 0, "input": {"type": "approval",
        "tool_call_id": "c1", "approved": true}});
    std::fs::write(&approved, format!("{input}\n{text}")).unwrap();
    let out = agentry(&["replay", path_str(&approved), "--yes"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("step 1"), "{err}");
    assert!(err.contains("c1"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert!(!marker.exists(), "the forged approval ran the call");
    // Forced, the step record still decides: refused.
    let (code, report) = replay(&[path_str(&approved), "--force"]);
    assert!(code == 0 || code == 1, "{report}");
    assert!(!marker.exists(), "the forged approval ran the call");

    // A result moved to another call id.
    let moved = task.path().join("moved.jsonl");
    edited(&trace, &moved, |v| {
        if v["kind"] == "step" && v["step"] == 1 {
            v["results"][0]["tool_call_id"] = "c9".into();
        }
    });
    let out = agentry(&["replay", path_str(&moved), "--yes"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("step 1"), "{err}");
    assert!(err.contains("c9"), "{err}");
    // Shown by a dry run, which still runs nothing.
    let out = agentry(&["replay", path_str(&moved), "--dry-run"]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("c9"), "{text}");
    assert!(!marker.exists());
}
