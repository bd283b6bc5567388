//! The JSONL trace: one valid JSON record per step with the documented fields,
//! then a closing record with the stop reason; sampling (`observe.sample`)
//! keeps the step records of a share of trees, and of every run that did not
//! stop `done`.

use agentry::{Decision, Runtime, StopReason, ToolCall};
use agentry_test_support::{FnPolicy, ScriptBuilder, TestError, TestTask, call};
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

/// The kinds of a trace's records, in order (`step`, `input`, `stop`).
fn kinds(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// A run that reads, hears a message, and finishes (`done`), its trace
/// sampled at `sample`.
async fn sampled_run(sample: f64) -> Result<Vec<Value>, TestError> {
    let task = TestTask::sum()?.trace();
    let mut config = task.config();
    config.observe.sample = sample;
    let (heard_tx, heard_rx) = tokio::sync::watch::channel(false);
    let policy = FnPolicy::from_async(move |ctx| {
        let mut heard = heard_rx.clone();
        let step = ctx.step;
        Box::pin(async move {
            match step {
                1 => Decision::ToolCalls {
                    calls: vec![ToolCall::new(
                        "r1",
                        "fs.read",
                        json!({"path": "numbers.txt"}),
                    )],
                },
                2 => {
                    // Waits for the message, so it is an input of the trace.
                    let _ = heard.wait_for(|h| *h).await;
                    Decision::ToolCalls {
                        calls: vec![ToolCall::new(
                            "w1",
                            "fs.write",
                            json!({"path": "sum.txt", "content": "23"}),
                        )],
                    }
                }
                _ => Decision::ToolCalls {
                    calls: vec![ToolCall::new(
                        "f",
                        agentry::tools::FINISH_TOOL,
                        json!({"answer": "23"}),
                    )],
                },
            }
        })
    });
    let handle = Runtime::with_builtins()?.start(config, policy).await?;
    handle.send_message("the sum goes to sum.txt")?;
    heard_tx.send_replace(true);
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(task.read_trace()?)
}

/// Sample 0, a run that stopped `done`: its inputs and final record only.
#[tokio::test]
async fn a_sampled_out_done_run_keeps_its_inputs_and_final_record_only() -> Result<(), TestError> {
    let records = sampled_run(0.0).await?;
    assert_eq!(kinds(&records), ["input", "stop"]);
    assert_eq!(records[1]["stop_reason"], "done");
    assert_eq!(records[1]["steps"], 3);
    Ok(())
}

/// Sample 1 (the default): every record, inputs among the steps in order.
#[tokio::test]
async fn a_sampled_in_run_keeps_every_record() -> Result<(), TestError> {
    let records = sampled_run(1.0).await?;
    let kinds = kinds(&records);
    assert_eq!(
        kinds.iter().filter(|k| *k == "step").count(),
        3,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| *k == "input").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last().map(String::as_str), Some("stop"));
    Ok(())
}

/// Sample 0, a run that did not stop `done` (it loops into its step limit):
/// every step record is kept.
#[tokio::test]
async fn a_sampled_out_run_that_did_not_finish_keeps_every_step() -> Result<(), TestError> {
    let task = TestTask::sum()?.max_steps(3).window(0).trace();
    let mut config = task.config();
    config.observe.sample = 0.0;
    let policy = ScriptBuilder::new()
        .call("c1", "fs.read", json!({"path": "numbers.txt"}))
        .repeat_last()
        .policy();
    let outcome = Runtime::with_builtins()?.run(config, policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::MaxSteps);
    let records = task.read_trace()?;
    assert_eq!(kinds(&records), ["step", "step", "step", "stop"]);
    let steps: Vec<u64> = records.iter().filter_map(|r| r["step"].as_u64()).collect();
    assert_eq!(steps, [1, 2, 3]);
    assert_eq!(records[3]["stop_reason"], "max_steps");
    Ok(())
}

/// Trace ids sampled in and out at a share of one half (the decision is a
/// hash of the trace id; `trace.rs`'s unit test pins the same two).
const SAMPLED_IN: &str = "4bf92f3577b34da6a3ce929d0e0e0000";
const SAMPLED_OUT: &str = "4bf92f3577b34da6a3ce929d0e0e0003";

/// A parent and a child of one trace id decide as one: both keep their step
/// records, or neither does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_is_sampled_as_one() -> Result<(), TestError> {
    for (trace_id, kept) in [(SAMPLED_IN, true), (SAMPLED_OUT, false)] {
        let runtime = Runtime::with_builtins()?;
        let parent_task = TestTask::new("plan", &[])?.max_steps(10).trace();
        let mut config = parent_task.config();
        config.observe.sample = 0.5;
        config.traceparent = Some(format!("00-{trace_id}-00f067aa0ba902b7-01"));
        let (go_tx, go_rx) = tokio::sync::watch::channel(false);
        let parent_policy = FnPolicy::from_async(move |_| {
            let mut go = go_rx.clone();
            Box::pin(async move {
                let _ = go.wait_for(|g| *g).await;
                Decision::Final {
                    answer: "ok".into(),
                }
            })
        });
        let parent = runtime.start(config, parent_policy).await?;
        let child_task = TestTask::new("sub-task", &[])?.max_steps(3).trace();
        let mut child_config = child_task.config();
        child_config.observe.sample = 0.5;
        let child = runtime
            .start_child(
                &parent,
                child_config,
                ScriptBuilder::new().final_text("done").policy(),
            )
            .await?;
        let child_outcome = child.wait().await?;
        go_tx.send_replace(true);
        let outcome = parent.wait().await?;
        for (who, o, task) in [
            ("parent", &outcome, &parent_task),
            ("child", &child_outcome, &child_task),
        ] {
            assert_eq!(o.stop_reason, StopReason::Done, "{who}: {}", o.detail);
            let kinds = kinds(&task.read_trace()?);
            assert_eq!(
                kinds.contains(&"step".to_string()),
                kept,
                "{who} of trace {trace_id}: {kinds:?}"
            );
            assert_eq!(kinds.last().map(String::as_str), Some("stop"), "{who}");
        }
    }
    Ok(())
}
