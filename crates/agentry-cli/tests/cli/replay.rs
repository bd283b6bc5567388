//! `agentry replay`: a run recorded with `agentry run --trace` is run again
//! with its recorded decisions and the real tools, and its drift reported.

use crate::*;

/// A copy of a task directory (task.toml, script.json, workspace/), to edit
/// between recording and replay.
fn copy_task(from: &Path) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(from, dir.path());
    dir
}

/// Records a run of `task` into `trace` (kept in memory only): it stops done.
pub(super) fn record(task: &Path, trace: &Path) -> Value {
    let (code, run) = agentry_json(&[
        "run",
        path_str(task),
        "--trace",
        path_str(trace),
        "--no-store",
    ]);
    assert_eq!(code, 0, "{run}");
    run
}

/// `agentry replay ARGS --yes --json`: the calls it lists may run.
pub(super) fn replay(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["replay"];
    all.extend(args);
    all.push("--yes");
    agentry_json(&all)
}

pub(super) fn statuses(report: &Value) -> Vec<(u64, String)> {
    report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_u64().unwrap(),
                s["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub(super) fn same(n: u64) -> Vec<(u64, String)> {
    (1..=n).map(|i| (i, "same".to_string())).collect()
}

/// The acceptance path: `agentry run examples/sum --trace t.jsonl`, then
/// `agentry replay t.jsonl`: exit 0, "no drift", every step the same, a new
/// run id, and the recorded trace untouched.
#[test]
fn a_recorded_run_replays_without_drift() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    let run = record(&root().join("examples/sum"), &trace);
    let before = std::fs::read(&trace).unwrap();

    let out = agentry(&["replay", path_str(&trace), "--yes"]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    assert!(text.contains("no drift (3 steps compared)"), "{text}");
    assert!(
        text.contains("stop  same     recorded done, replayed done"),
        "{text}"
    );

    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["drifted"], false);
    assert_eq!(statuses(&report), same(3));
    assert_eq!(report["recorded_run_id"], run["run_id"]);
    assert_ne!(report["run_id"], run["run_id"]);
    assert_ne!(report["workdir"], run["workdir"]);
    assert_eq!(report["outcome"]["stop_reason"], "done");
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        before,
        "the recording was modified"
    );
}

/// A tool's output changed between recording and replay (the workspace
/// file the run reads): exit 1, the step and the JSON path named, with both
/// values.
#[test]
fn a_changed_tool_output_names_the_step_and_the_path() {
    let task = copy_task(&root().join("examples/sum"));
    let trace = task.path().join("t.jsonl");
    record(task.path(), &trace);
    std::fs::write(task.path().join("workspace/numbers.txt"), "9\n9\n").unwrap();

    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["drifted"], true);
    assert_eq!(
        statuses(&report),
        [
            (1, "drifted".into()),
            (2, "same".into()),
            (3, "same".into())
        ]
    );
    let diffs = report["steps"][0]["diffs"].as_array().unwrap();
    let content = diffs
        .iter()
        .find(|d| d["path"] == "data.content")
        .unwrap_or_else(|| panic!("{diffs:?}"));
    assert_eq!(content["call_id"], "read");
    assert_eq!(content["tool"], "fs.read");
    assert_eq!(content["recorded"], "3\n5\n7\n8\n");
    assert_eq!(content["replayed"], "9\n9\n");

    let out = agentry(&["replay", path_str(&trace), "--yes"]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("1     drifted"), "{text}");
    assert!(
        text.contains(r#"call read (fs.read) data.content: "3\n5\n7\n8\n" -> "9\n9\n""#),
        "{text}"
    );
    assert!(text.ends_with("drift: step 1\n"), "{text}");
}

/// A command tool printing a timestamp: with the field marked volatile
/// the replay does not drift; without the mark it does, there; and a change
/// to the tool's script drifts at the field it changed.
#[test]
fn a_volatile_field_does_not_drift_and_a_changed_command_does() {
    let toml = |volatile: &str| {
        format!(
            "goal = \"g\"\n[tools]\ngrant = [\"clock.now\"]\n\
             [[tools.command]]\nname = \"clock.now\"\ndescription = \"d\"\n\
             argv = [\"sh\", \"clock.sh\"]\n{volatile}\n"
        )
    };
    let task = task_dir(
        &toml("volatile = [\"at\"]"),
        r#"{"turns":[{"tool_calls":[{"id":"c1","name":"clock.now","arguments":{}}]},{"final":"ok"}]}"#,
    );
    let script = |n: u32| format!("printf '{{\"at\": \"%s\", \"n\": {n}}}' \"$(date +%s%N)\"\n");
    std::fs::create_dir(task.path().join("workspace")).unwrap();
    std::fs::write(task.path().join("workspace/clock.sh"), script(1)).unwrap();
    let trace = task.path().join("t.jsonl");
    record(task.path(), &trace);

    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(2));

    // The timestamp differs in every run: unmarked, it is drift.
    std::fs::write(task.path().join("task.toml"), toml("")).unwrap();
    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 1, "{report}");
    let paths: Vec<&str> = report["steps"][0]["diffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["data.stdout.at"], "{report}");

    // Marked again, a change to what the tool prints is drift at that field.
    std::fs::write(task.path().join("task.toml"), toml("volatile = [\"at\"]")).unwrap();
    std::fs::write(task.path().join("workspace/clock.sh"), script(2)).unwrap();
    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 1, "{report}");
    let diffs = report["steps"][0]["diffs"].as_array().unwrap();
    assert_eq!(diffs.len(), 1, "{report}");
    assert_eq!(diffs[0]["path"], "data.stdout.n");
    assert_eq!(
        (diffs[0]["recorded"].clone(), diffs[0]["replayed"].clone()),
        (1.into(), 2.into())
    );
}

/// A grant removed after the recording: the call the recorded run made is
/// refused now, reported as refused (with its code), and the stop differs.
#[test]
fn a_call_now_refused_is_reported_as_refused() {
    let task = copy_task(&root().join("examples/sum"));
    let trace = task.path().join("t.jsonl");
    record(task.path(), &trace);
    let toml = std::fs::read_to_string(task.path().join("task.toml")).unwrap();
    let narrowed = toml.replace(
        r#"grant = ["fs.read", "fs.write"]"#,
        r#"grant = ["fs.read"]"#,
    );
    assert_ne!(toml, narrowed);
    std::fs::write(task.path().join("task.toml"), narrowed).unwrap();

    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["steps"][1]["status"], "drifted");
    let refused = &report["steps"][1]["refused"][0];
    assert_eq!(refused["call_id"], "write");
    assert_eq!(refused["tool"], "fs.write");
    assert_eq!(refused["code"], "EPERM");
    assert_eq!(report["stop"]["recorded"], "done");
    assert_ne!(report["stop"]["replayed"], "done");
    assert_eq!(report["stop"]["same"], false);

    let out = agentry(&["replay", path_str(&trace), "--yes"]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(text.contains("2     refused"), "{text}");
    assert!(
        text.contains("call write (fs.write) refused: EPERM"),
        "{text}"
    );
    assert!(text.ends_with("drift: step 2; the stop reason\n"), "{text}");
}

/// `--until 2`: the replay stops after step 2 and drift is judged up to it;
/// a change that only shows at step 3 (the acceptance check) is not seen,
/// while a full replay sees it.
#[test]
fn until_stops_after_the_step_and_judges_only_up_to_it() {
    let task = copy_task(&root().join("examples/sum"));
    let trace = task.path().join("t.jsonl");
    record(task.path(), &trace);
    let toml = std::fs::read_to_string(task.path().join("task.toml")).unwrap();
    std::fs::write(
        task.path().join("task.toml"),
        toml.replace("equals = \"23\"", "equals = \"24\""),
    )
    .unwrap();

    let (code, report) = replay(&[path_str(&trace), "--until", "2"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(2));
    assert_eq!(report["until"], 2);
    assert_eq!(report["stop"]["judged"], false);
    assert_eq!(
        report["outcome"]["steps"], 3,
        "the step after --until ends the run: {report}"
    );

    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["stop"]["same"], false, "{report}");
}

/// `--fork-at 2 --policy script:FILE`: step 1 is replayed (and judged), then
/// the script decides (its first turn at step 2): a different ending, under
/// a new run id, the recording untouched byte for byte.
#[test]
fn fork_at_continues_with_another_policy_and_leaves_the_recording_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    let run = record(&root().join("examples/sum"), &trace);
    let before = std::fs::read(&trace).unwrap();
    let script = dir.path().join("fork.json");
    std::fs::write(&script, r#"{"turns":[{"final":"forked: gave up"}]}"#).unwrap();
    let policy = format!("script:{}", script.display());

    let (code, report) = replay(&[path_str(&trace), "--fork-at", "2", "--policy", &policy]);
    assert_eq!(code, 0, "the replayed prefix did not drift: {report}");
    assert_eq!(statuses(&report), same(1));
    assert_eq!(report["fork"]["at"], 2);
    assert_eq!(report["fork"]["policy"], policy);
    assert_eq!(report["outcome"]["steps"], 2);
    assert_eq!(report["outcome"]["answer"], "forked: gave up");
    assert_eq!(
        report["outcome"]["stop_reason"], "verification_missing",
        "{report}"
    );
    assert_ne!(report["run_id"], run["run_id"]);
    assert_eq!(
        std::fs::read(&trace).unwrap(),
        before,
        "the recording was modified"
    );

    let out = agentry(&[
        "replay",
        path_str(&trace),
        "--yes",
        "--fork-at",
        "2",
        "--policy",
        &policy,
    ]);
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(
        text.contains(&format!(
            "fork  at step 2 with {policy}: stopped verification_missing after 2 steps"
        )),
        "{text}"
    );
}

/// The recorded run from a store (`--store FILE --run-id ID`, no trace):
/// its decisions and results come from its session; the store is only read.
#[test]
fn a_stored_run_replays_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("runs.db");
    let (code, run) = agentry_json(&["run", "examples/sum", "--store", path_str(&store)]);
    assert_eq!(code, 0, "{run}");
    let id = run["run_id"].as_str().unwrap();

    let (code, report) = replay(&["--store", path_str(&store), "--run-id", id]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(3));
    assert_eq!(report["stop"]["same"], true);

    let (code, runs) = agentry_json(&["runs", "--store", path_str(&store), "--all"]);
    assert_eq!(code, 0);
    assert_eq!(
        runs.as_array().unwrap().len(),
        1,
        "the replay is not stored: {runs}"
    );
}

/// A trace line that is not a record: exit 2, the file and line named; a
/// trace that does not say its task: exit 2 asking for --task, which works.
#[test]
fn bad_traces_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    record(&root().join("examples/sum"), &trace);
    let text = std::fs::read_to_string(&trace).unwrap();

    let broken = dir.path().join("broken.jsonl");
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(1, r#"{"kind": "step", "run_id": 3}"#);
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let out = agentry(&["replay", path_str(&broken)]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}:2: not a trace record", broken.display())),
        "{err}"
    );
    let (code, json) = replay(&[path_str(&broken)]);
    assert_eq!((code, json["exit_code"].clone()), (2, 2.into()), "{json}");

    // A trace from before the origin was written: the task must be named.
    let old = dir.path().join("old.jsonl");
    let stripped: Vec<String> = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("origin");
            v.to_string()
        })
        .collect();
    std::fs::write(&old, stripped.join("\n")).unwrap();
    let out = agentry(&["replay", path_str(&old)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("pass --task DIR"), "{}", stderr(&out));
    let (code, report) = replay(&[path_str(&old), "--task", "examples/sum"]);
    assert_eq!(code, 0, "{report}");

    // A trace without its step records (a sampled-out run keeps none).
    let sampled = dir.path().join("sampled.jsonl");
    let stop_only: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains(r#""kind":"step""#))
        .collect();
    std::fs::write(&sampled, stop_only.join("\n")).unwrap();
    let out = agentry(&["replay", path_str(&sampled)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("holds 0 of run"), "{}", stderr(&out));

    let out = agentry(&["replay", path_str(&dir.path().join("none.jsonl"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read the trace"),
        "{}",
        stderr(&out)
    );
}

/// A trace recorded with `--approve fs.write` rewritten as if no operator
/// had approved up front: with `answer`, a human's approval line for call
/// `write` before step 2 (as an embedder's run writes it); with `refused`,
/// step 2's result for it as a human's denial leaves it.
fn as_if_answered(text: &str, run_id: &Value, answer: Option<bool>, refused: bool) -> String {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut v: Value = serde_json::from_str(line).unwrap();
        if v["kind"] == "stop" {
            v["origin"].as_object_mut().unwrap().remove("approved");
        }
        if v["kind"] == "step" && v["step"] == 2 {
            if let Some(approved) = answer {
                let input = serde_json::json!({"kind": "input", "run_id": run_id, "seq": 1,
                    "state_version": 2, "at": 0, "input": {"type": "approval",
                    "tool_call_id": "write", "approved": approved, "reason": "not on fridays"}});
                lines.push(input.to_string());
            }
            if refused {
                let result = &mut v["results"][0];
                assert_eq!(result["tool_call_id"], "write");
                result["ok"] = false.into();
                result.as_object_mut().unwrap().remove("data");
                result.as_object_mut().unwrap().remove("refs");
                result["error"] = serde_json::json!({"code": "EPERM",
                    "message": "a human denied this call: not on fridays", "retryable": false,
                    "suggested_action": "do not repeat it; choose another way or finish"});
            }
        }
        lines.push(v.to_string());
    }
    lines.join("\n")
}

/// Calls that wait for approval (`[tools] approve`) are answered as their
/// step records show, never from the stop line's `origin.approved`: a run
/// recorded with `--approve fs.write` replays approved because its step shows
/// the call ran, also with `origin.approved` removed and no approval line;
/// a call a human approved (an `approval` input line, as an embedder's run
/// writes it) is approved again; one a human denied (its result says so) is
/// denied again, with the recorded reason; an approval line that its step's
/// result contradicts is refused unless `--force`, and then the denial holds.
#[test]
fn recorded_approvals_are_answered_again() {
    let task = copy_task(&root().join("examples/sum"));
    let toml = std::fs::read_to_string(task.path().join("task.toml")).unwrap();
    let gated = toml.replace(
        r#"grant = ["fs.read", "fs.write"]"#,
        "grant = [\"fs.read\", \"fs.write\"]\napprove = [\"fs.write\"]",
    );
    assert_ne!(toml, gated);
    std::fs::write(task.path().join("task.toml"), gated).unwrap();
    let trace = task.path().join("t.jsonl");
    let (code, run) = agentry_json(&[
        "run",
        path_str(task.path()),
        "--trace",
        path_str(&trace),
        "--no-store",
        "--approve",
        "fs.write",
    ]);
    assert_eq!(code, 0, "{run}");
    let (code, report) = replay(&[path_str(&trace)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(3));

    let text = std::fs::read_to_string(&trace).unwrap();
    let variant = |name: &str, answer: Option<bool>, refused: bool| {
        let path = task.path().join(name);
        let edited = as_if_answered(&text, &run["run_id"], answer, refused);
        std::fs::write(&path, edited).unwrap();
        path
    };
    // No `--approve` in its origin and nobody's answer: the step shows the
    // call ran, so it was approved.
    let unanswered = variant("unanswered.jsonl", None, false);
    let (code, report) = replay(&[path_str(&unanswered)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(3));

    let approved = variant("approved.jsonl", Some(true), false);
    let (code, report) = replay(&[path_str(&approved)]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(3));

    // A human denied it and the step shows the denial: denied again, with
    // the recorded reason (then the acceptance check fails, as it would).
    let denied = variant("denied.jsonl", Some(false), true);
    let (code, report) = replay(&[path_str(&denied)]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["steps"][1]["status"], "same", "{report}");
    assert_ne!(report["stop"]["replayed"], "done", "{report}");

    // A denial line for a call its step shows ran: a contradiction.
    let contradicted = variant("contradicted.jsonl", Some(false), false);
    let out = agentry(&["replay", path_str(&contradicted), "--yes"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(r#"step 2, call "write""#), "{err}");
    let (code, report) = replay(&[path_str(&contradicted), "--force"]);
    assert_eq!(code, 1, "{report}");
    let refused = &report["steps"][1]["refused"][0];
    assert_eq!(
        (refused["call_id"].clone(), refused["code"].clone()),
        ("write".into(), "EPERM".into())
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("not on fridays"),
        "{report}"
    );
}

/// `--until` at or past the recording's last step is a whole replay: the
/// stop is judged too.
#[test]
fn until_past_the_end_judges_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    record(&root().join("examples/sum"), &trace);
    let (code, report) = replay(&[path_str(&trace), "--until", "3"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(statuses(&report), same(3));
    assert_eq!(report["stop"]["judged"], true);
    assert_eq!(report["stop"]["same"], true);
    assert!(report.get("until").is_none(), "{report}");
}
