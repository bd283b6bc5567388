//! The idempotency table: a replayed call id is not executed again; the same id
//! with a different call is rejected and nothing runs; inside one step a
//! repeated id is refused, never replayed.

use std::sync::Arc;

use agentry::{ErrorCode, StopReason};
use agentry_test_support::{
    CountingTool, ScriptBuilder, TestError, TestTask, call, run_with_events, runtime_with,
    tool_results,
};
use serde_json::json;

#[tokio::test]
async fn a_replayed_call_id_is_not_executed_twice() -> Result<(), TestError> {
    let tool = CountingTool::new("count.write");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("write once", &[])?.grant(&["count.write"]);
    let policy = ScriptBuilder::new()
        .call("w1", "count.write", json!({"value": 1}))
        .call("w1", "count.write", json!({"value": 1}))
        .finish("written")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(executions.get(), 1);
    let results = tool_results(&events);
    let w1: Vec<_> = results
        .iter()
        .filter(|(_, r)| r.tool_call_id == "w1")
        .collect();
    assert_eq!(w1.len(), 2);
    let (first, second) = (&w1[0].1, &w1[1].1);
    assert!(first.ok && !first.replayed);
    assert!(second.ok && second.replayed, "{second:?}");
    assert_eq!(second.data, first.data, "the recorded result is returned");
    Ok(())
}

#[tokio::test]
async fn the_same_id_with_different_arguments_is_rejected_and_nothing_runs() -> Result<(), TestError>
{
    let tool = CountingTool::new("count.write");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("write once", &[])?.grant(&["count.write"]);
    let policy = ScriptBuilder::new()
        .call("w1", "count.write", json!({"value": 1}))
        .call("w1", "count.write", json!({"value": 2}))
        .finish("written")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(executions.get(), 1);
    let results = tool_results(&events);
    let second = results
        .iter()
        .filter(|(_, r)| r.tool_call_id == "w1")
        .nth(1)
        .ok_or("no second result for w1")?;
    assert_eq!(second.1.error_code(), Some(ErrorCode::Einval));
    assert!(!second.1.replayed);
    Ok(())
}

/// Inside one step a repeated id is never replayed (that is for a later
/// step): every call after the first under an id is `EINVAL` naming the id and
/// never runs, whether it repeats the call or not; the first runs normally.
#[tokio::test]
async fn a_repeated_id_within_one_step_is_einval_and_only_the_first_runs() -> Result<(), TestError>
{
    let tool = CountingTool::new("count.write");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("write once", &[])?.grant(&["count.write"]);
    let policy = ScriptBuilder::new()
        .calls(vec![
            call("d", "count.write", json!({"value": 1})),
            call("d", "count.write", json!({"value": 1})),
            call("e", "count.write", json!({"value": 2})),
            call("d", "count.write", json!({"value": 9})),
        ])
        .finish("written")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(executions.get(), 2, "d once and e once");
    let results = tool_results(&events);
    let step1: Vec<(&str, bool, bool, Option<ErrorCode>)> = results
        .iter()
        .filter(|(step, _)| *step == 1)
        .map(|(_, r)| (r.tool_call_id.as_str(), r.ok, r.replayed, r.error_code()))
        .collect();
    assert_eq!(
        step1,
        vec![
            ("d", true, false, None),
            ("d", false, false, Some(ErrorCode::Einval)),
            ("e", true, false, None),
            ("d", false, false, Some(ErrorCode::Einval)),
        ]
    );
    for (_, r) in results.iter().filter(|(_, r)| !r.ok) {
        let message = r.error.as_ref().map(|e| e.message.as_str());
        assert!(
            message.is_some_and(|m| m.contains("\"d\"") && m.contains("not run")),
            "{message:?}"
        );
    }
    Ok(())
}

/// A call that reaches the executor without an id (the adapters give one to
/// every call; a policy of one's own may not) is `EINVAL` and never runs.
#[tokio::test]
async fn a_call_without_an_id_is_einval_and_never_runs() -> Result<(), TestError> {
    let tool = CountingTool::new("count.write");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("write", &[])?.grant(&["count.write"]);
    let policy = ScriptBuilder::new()
        .calls(vec![
            call("", "count.write", json!({"value": 1})),
            call("  ", "count.write", json!({"value": 2})),
            call("ok", "count.write", json!({"value": 3})),
        ])
        .finish("written")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(executions.get(), 1, "only the call with an id ran");
    let codes: Vec<Option<ErrorCode>> = tool_results(&events)
        .iter()
        .filter(|(step, _)| *step == 1)
        .map(|(_, r)| r.error_code())
        .collect();
    assert_eq!(
        codes,
        [Some(ErrorCode::Einval), Some(ErrorCode::Einval), None]
    );
    Ok(())
}

/// A call refused by validation never ran, so repeating it is judged afresh:
/// `EINVAL` again, nothing runs, and a refusal is never turned into a success.
#[tokio::test]
async fn repeating_a_refused_call_is_refused_again_without_running() -> Result<(), TestError> {
    let tool = CountingTool::new("count.write");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("write", &[])?.grant(&["count.write"]);
    let policy = ScriptBuilder::new()
        .call("x", "count.write", json!({"nope": 1}))
        .call("x", "count.write", json!({"nope": 1}))
        .finish("gave up")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(executions.get(), 0);
    let codes: Vec<Option<ErrorCode>> = tool_results(&events)
        .iter()
        .filter(|(_, r)| r.tool_call_id == "x")
        .map(|(_, r)| r.error_code())
        .collect();
    assert_eq!(
        codes,
        vec![Some(ErrorCode::Einval), Some(ErrorCode::Einval)]
    );
    Ok(())
}
