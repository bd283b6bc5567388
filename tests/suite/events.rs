//! Run events: what a subscriber sees, in order.

use agentry::protocol::event::RunEvent;
use agentry::{Runtime, StopReason};
use agentry_test_support::{
    ScriptBuilder, TestError, TestTask, call, collect_until_stopped, event_name,
};
use serde_json::json;

#[tokio::test]
async fn a_subscriber_sees_every_event_of_the_run_in_sequence() -> Result<(), TestError> {
    let task = TestTask::sum()?;
    let policy = ScriptBuilder::new()
        .call("c1", "fs.read", json!({"path": "numbers.txt"}))
        .call(
            "c2",
            "fs.write",
            json!({"path": "sum.txt", "content": "23"}),
        )
        .finish("sum=23")
        .policy();

    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    // Sequence numbers: from 1, strictly increasing, no gaps; all of this run.
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(seqs, expected);
    assert!(events.iter().all(|e| *e.run_id == *outcome.run_id));

    // Per step: started, decided, each call started then finished; the stop is last.
    let names: Vec<String> = events.iter().map(|e| event_name(&e.event)).collect();
    let core: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| {
            matches!(
                *n,
                "step_started"
                    | "decision_made"
                    | "tool_call_started"
                    | "tool_call_finished"
                    | "run_stopped"
            )
        })
        .collect();
    let one_step = [
        "step_started",
        "decision_made",
        "tool_call_started",
        "tool_call_finished",
    ];
    let mut want: Vec<&str> = one_step.iter().copied().cycle().take(12).collect();
    want.push("run_stopped");
    assert_eq!(core, want);
    match events.last().map(|e| &e.event) {
        Some(RunEvent::RunStopped { stop_reason }) => assert_eq!(*stop_reason, StopReason::Done),
        other => return Err(format!("last event is not run_stopped: {other:?}").into()),
    }
    let steps: Vec<u64> = events
        .iter()
        .filter_map(|e| {
            if let RunEvent::StepStarted { step } = e.event {
                Some(step)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(steps, [1, 2, 3]);
    // One state update per step, each with a higher version.
    let versions: Vec<u64> = events
        .iter()
        .filter_map(|e| {
            if let RunEvent::StateUpdated { version } = e.event {
                Some(version)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(versions.len(), 3);
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    Ok(())
}

/// `ToolCallStarted` means "started executing": a call refused before execution
/// (unknown tool, bad arguments, not granted) only gets `ToolCallFinished`.
#[tokio::test]
async fn refused_calls_never_report_started() -> Result<(), TestError> {
    let task = TestTask::new("refusals", &[("a.txt", "a")])?;
    let policy = ScriptBuilder::new()
        .calls(vec![
            call("unknown", "fs.nope", json!({})),
            call("invalid", "fs.read", json!({"path": 1})),
            call(
                "ungranted",
                "fs.write",
                json!({"path": "b.txt", "content": "b"}),
            ),
            call("runs", "fs.read", json!({"path": "a.txt"})),
        ])
        .finish("done")
        .policy();

    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    assert_eq!(handle.wait().await?.stop_reason, StopReason::Done);

    let started: Vec<&str> = events
        .iter()
        .filter_map(|e| {
            if let RunEvent::ToolCallStarted {
                step: 1,
                tool_call_id,
                ..
            } = &e.event
            {
                Some(tool_call_id.as_str())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(started, ["runs"]);
    Ok(())
}
