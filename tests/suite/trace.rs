//! The JSONL trace: one valid JSON record per step with the documented fields,
//! then a closing record with the stop reason.

use agentry::{Runtime, StopReason};
use agentry_test_support::{ScriptBuilder, TestError, TestTask, call};
use serde_json::{Value, json};

const STEP_FIELDS: [&str; 9] = [
    "run_id",
    "step",
    "decision",
    "results",
    "budget_before",
    "budget_after",
    "state_version",
    "fingerprint",
    "state",
];

/// Every step line has the documented fields, its step number, a strictly
/// increasing state version, a fingerprint and the budget around exactly this
/// step; returns the last state version.
fn check_steps(steps: &[Value]) -> Result<u64, TestError> {
    let mut last_version = 0;
    for (i, rec) in steps.iter().enumerate() {
        let n = i as u64 + 1;
        for field in STEP_FIELDS {
            assert!(rec.get(field).is_some(), "step {n} lacks {field}: {rec}");
        }
        assert_eq!(rec["run_id"], "run-trace-1");
        assert_eq!(rec["step"], n);
        let version = rec["state_version"]
            .as_u64()
            .ok_or("state_version is not a number")?;
        assert!(
            version > last_version,
            "state_version must strictly increase"
        );
        last_version = version;
        assert!(rec["fingerprint"].as_str().is_some_and(|f| !f.is_empty()));
        // Budget before/after bracket exactly this step.
        assert_eq!(rec["budget_before"]["spent"]["steps"], n - 1);
        assert_eq!(rec["budget_after"]["spent"]["steps"], n);
    }
    Ok(last_version)
}

/// The three steps' results and decisions, as the script made them.
fn check_results(steps: &[Value]) {
    // Results: one envelope per call, in request order, each with its call id.
    let ids = |rec: &Value| -> Vec<String> {
        rec["results"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["tool_call_id"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(ids(&steps[0]), ["r1", "r2", "r3"]);
    assert_eq!(ids(&steps[1]), ["w1"]);
    assert_eq!(ids(&steps[2]), ["finish-1"]);
    assert_eq!(steps[0]["results"][2]["ok"], false);
    assert_eq!(steps[0]["results"][2]["error"]["code"], "EINVAL");
    assert_eq!(steps[0]["decision"]["type"], "tool_calls");
    assert_eq!(steps[0]["decision"]["calls"][0]["name"], "fs.read");
    assert_eq!(steps[0]["budget_after"]["spent"]["tool_calls"], 3);
    // A read carries a content reference (path + sha256) in the envelope and the world.
    assert_eq!(steps[0]["results"][0]["refs"][0]["path"], "numbers.txt");
    assert!(steps[0]["state"]["world"]["refs_changed"]["numbers.txt"]["sha256"].is_string());
}

/// The closing record: stop reason, steps, answer, a later state version.
fn check_stop(last: &Value, last_version: u64) -> Result<(), TestError> {
    assert_eq!(last["kind"], "stop");
    assert_eq!(last["run_id"], "run-trace-1");
    assert_eq!(last["stop_reason"], "done");
    assert_eq!(last["steps"], 3);
    assert_eq!(last["answer"], "sum=23");
    let final_version = last["state_version"]
        .as_u64()
        .ok_or("no final state_version")?;
    assert!(final_version > last_version);
    Ok(())
}

#[tokio::test]
async fn trace_lines_are_json_with_the_documented_fields() -> Result<(), TestError> {
    let task = TestTask::sum()?.run_id("run-trace-1").trace();
    let policy = ScriptBuilder::new()
        .calls(vec![
            call("r1", "fs.read", json!({"path": "numbers.txt"})),
            call("r2", "fs.list", json!({})),
            call("r3", "fs.read", json!({"path": "missing.txt"})),
        ])
        .call(
            "w1",
            "fs.write",
            json!({"path": "sum.txt", "content": "23"}),
        )
        .finish("sum=23")
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.trace.as_deref(), Some(task.trace_path().as_path()));

    // Every line parses (read_trace fails on the first that does not).
    let records = task.read_trace()?;
    assert_eq!(records.len(), 4, "three steps and a closing record");
    let (steps, last) = records.split_at(3);

    let last_version = check_steps(steps)?;
    check_results(steps);
    check_stop(&last[0], last_version)?;
    Ok(())
}

#[tokio::test]
async fn a_stopped_loop_still_ends_its_trace_with_the_stop_reason() -> Result<(), TestError> {
    let task = TestTask::sum()?.max_steps(3).window(0).trace();
    let policy = ScriptBuilder::new()
        .call("c1", "fs.read", json!({"path": "numbers.txt"}))
        .repeat_last()
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::MaxSteps);

    let records = task.read_trace()?;
    let steps: Vec<u64> = records.iter().filter_map(|r| r["step"].as_u64()).collect();
    assert_eq!(steps, [1, 2, 3], "step 4 was refused, so it has no record");
    let last = records.last().ok_or("empty trace")?;
    assert_eq!(last["stop_reason"], "max_steps");
    // The loop is visible in the trace: identical fingerprints once the first
    // read has brought the file into the world.
    let fps: Vec<&str> = records
        .iter()
        .filter_map(|r| r["fingerprint"].as_str())
        .collect();
    assert_eq!(fps.len(), 3);
    assert_ne!(
        fps[0], fps[1],
        "the first read changed the world it acted on"
    );
    assert_eq!(fps[1], fps[2], "{fps:?}");
    Ok(())
}
