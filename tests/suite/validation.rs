//! Policy failures are observations: bad arguments, unknown tools and ungranted
//! tools become error envelopes keyed by the call id, and nothing runs.

use std::sync::Arc;

use agentry::protocol::state::SessionEntry;
use agentry::{Decision, ErrorCode, ResultEnvelope, StopReason};
use agentry_test_support::{
    CountingTool, Recording, ScriptBuilder, Seen, TestError, TestTask, raw_call, run_with_events,
    runtime_with, tool_results,
};
use serde_json::json;

/// The one envelope for `id` among a run's results.
fn result_for<'a>(
    results: &'a [(u64, ResultEnvelope)],
    id: &str,
) -> Result<&'a ResultEnvelope, TestError> {
    let mut found = results.iter().filter(|(_, r)| r.tool_call_id == id);
    let (_, first) = found
        .next()
        .ok_or_else(|| format!("no result for call {id}"))?;
    if found.next().is_some() {
        return Err(format!("more than one result for call {id}").into());
    }
    Ok(first)
}

fn code_of(env: &ResultEnvelope) -> Option<ErrorCode> {
    env.error_code()
}

#[tokio::test]
async fn extra_fields_are_einval_fed_back_with_the_call_id_and_the_tool_never_runs()
-> Result<(), TestError> {
    let tool = CountingTool::new("count");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("count", &[])?.grant(&["count"]);
    let policy = ScriptBuilder::new()
        .call("bad", "count", json!({"value": 1, "sneaky": true}))
        .finish("gave up")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let bad = result_for(&results, "bad")?;
    assert_eq!(code_of(bad), Some(ErrorCode::Einval));
    assert!(!bad.ok);
    let message = bad.error.as_ref().map(|e| e.message.as_str()).unwrap_or("");
    assert!(
        message.contains("sneaky"),
        "the message names the field: {message}"
    );
    assert_eq!(executions.get(), 0);
    Ok(())
}

#[tokio::test]
async fn broken_json_arguments_are_einval() -> Result<(), TestError> {
    let task = TestTask::new("read", &[("a.txt", "a")])?;
    let policy = ScriptBuilder::new()
        .raw_call("broken", "fs.read", "{\"path\": \"a.txt\"")
        .raw_call("fixed", "fs.read", "{\"path\": \"a.txt\"}")
        .finish("read it")
        .policy();

    let (outcome, events) =
        run_with_events(&agentry::Runtime::with_builtins()?, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let broken = result_for(&results, "broken")?;
    assert_eq!(code_of(broken), Some(ErrorCode::Einval));
    let message = broken
        .error
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or("");
    assert!(message.contains("JSON"), "{message}");
    let fixed = result_for(&results, "fixed")?;
    assert!(fixed.ok, "{fixed:?}");
    Ok(())
}

#[tokio::test]
async fn an_unknown_tool_is_enotool() -> Result<(), TestError> {
    let task = TestTask::new("delete", &[("a.txt", "a")])?.grant(&["*"]);
    let policy = ScriptBuilder::new()
        .call("c1", "fs.delete", json!({"path": "a.txt"}))
        .finish("could not")
        .policy();

    let (outcome, events) =
        run_with_events(&agentry::Runtime::with_builtins()?, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let env = result_for(&results, "c1")?;
    assert_eq!(code_of(env), Some(ErrorCode::Enotool));
    assert_eq!(env.tool, "fs.delete");
    assert!(task.workdir().join("a.txt").exists());
    Ok(())
}

#[tokio::test]
async fn an_ungranted_tool_is_eperm_nothing_runs_and_the_model_never_sees_it()
-> Result<(), TestError> {
    let tool = CountingTool::new("danger.wipe").scope("danger");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("wipe", &[])?.grant(&["fs.read"]);
    let (policy, log) = Recording::new(
        ScriptBuilder::new()
            .call("c1", "danger.wipe", json!({}))
            .finish("refused")
            .policy(),
    );

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    assert_eq!(code_of(result_for(&results, "c1")?), Some(ErrorCode::Eperm));
    assert_eq!(executions.get(), 0);
    let first = log.step(1).ok_or("step 1 was never decided")?;
    let shown: Vec<&str> = first.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(shown.contains(&"fs.read"), "{shown:?}");
    assert!(shown.contains(&"task.finish"), "{shown:?}");
    assert!(!shown.contains(&"danger.wipe"), "{shown:?}");
    assert!(!shown.contains(&"fs.write"), "{shown:?}");
    Ok(())
}

/// Issue 18, item 5: a model that keeps trying variations of a call it is not
/// granted is stopped `permission_denied` after `max_denied` (default 3)
/// denials in a row, which the detail names; any other result breaks the row.
/// The denial does not tell the model the tool's scope.
#[tokio::test]
async fn denials_in_a_row_stop_the_run_permission_denied() -> Result<(), TestError> {
    let wipe = CountingTool::new("danger.wipe").scope("danger");
    let wiped = wipe.counter();
    let runtime = runtime_with(vec![Arc::new(wipe)])?;
    let task = TestTask::new("wipe", &[("a.txt", "keep me")])?.grant(&["fs.read"]);
    let policy = ScriptBuilder::new()
        .call("w1", "danger.wipe", json!({}))
        .call("w2", "danger.wipe", json!({"all": true}))
        .call("r1", "fs.read", json!({"path": "a.txt"}))
        .call("w3", "danger.wipe", json!({"path": "a.txt"}))
        .call("w4", "danger.wipe", json!({"force": true}))
        .call("w5", "danger.wipe", json!({"force": 1}))
        .finish("wiped")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::PermissionDenied,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 6, "the read broke the first row");
    assert!(
        outcome
            .detail
            .contains("danger.wipe (w3), danger.wipe (w4), danger.wipe (w5)"),
        "{}",
        outcome.detail
    );
    assert!(!outcome.detail.contains("(w1)"), "{}", outcome.detail);
    assert_eq!(wiped.get(), 0);
    let results = tool_results(&events);
    let denial = result_for(&results, "w1")?;
    assert_eq!(code_of(denial), Some(ErrorCode::Eperm));
    let message = denial
        .error
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or_default();
    assert!(message.contains("danger.wipe"), "{message}");
    assert!(!message.contains("scope"), "{message}");
    Ok(())
}

/// An unknown tool's error lists the tools the run may call, not every tool
/// registered: an ungranted tool is not the model's to know of.
#[tokio::test]
async fn an_unknown_tools_error_names_only_granted_tools() -> Result<(), TestError> {
    let runtime = runtime_with(vec![Arc::new(CountingTool::new("danger.wipe"))])?;
    let task = TestTask::new("guess", &[])?.grant(&["fs.read"]);
    let policy = ScriptBuilder::new()
        .call("c1", "fs.delete", json!({}))
        .finish("could not")
        .policy();

    let (_, events) = run_with_events(&runtime, task.config(), policy).await?;

    let results = tool_results(&events);
    let env = result_for(&results, "c1")?;
    assert_eq!(code_of(env), Some(ErrorCode::Enotool));
    let action = env
        .error
        .as_ref()
        .and_then(|e| e.suggested_action.clone())
        .unwrap_or_default();
    assert!(action.contains("fs.read"), "{action}");
    assert!(!action.contains("danger.wipe"), "{action}");
    assert!(!action.contains("fs.write"), "{action}");
    Ok(())
}

/// With `max_denied = 0` denials never stop the run.
#[tokio::test]
async fn max_denied_zero_turns_the_stop_off() -> Result<(), TestError> {
    let runtime = runtime_with(vec![Arc::new(CountingTool::new("danger.wipe"))])?;
    let task = TestTask::new("wipe", &[])?.grant(&["fs.read"]);
    let mut config = task.config();
    config.max_denied = 0;
    let mut script = ScriptBuilder::new();
    for i in 0..5 {
        script = script.call(&format!("w{i}"), "danger.wipe", json!({"try": i}));
    }
    let (outcome, _) = run_with_events(&runtime, config, script.finish("gave up").policy()).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}

/// After an `EINVAL`, the next decision's session ends with the assistant turn and
/// the error envelope for that call id: the model can correct itself.
#[tokio::test]
async fn after_einval_the_model_sees_the_error_envelope_for_its_call() -> Result<(), TestError> {
    let task = TestTask::new("read", &[("a.txt", "a")])?;
    let (policy, log) = Recording::new(
        ScriptBuilder::new()
            .call("bad", "fs.read", json!({"path": "a.txt", "extra": 1}))
            .call("good", "fs.read", json!({"path": "a.txt"}))
            .finish("read it")
            .policy(),
    );

    let outcome = agentry::Runtime::with_builtins()?
        .run(task.config(), policy)
        .await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    let Seen { session, .. } = log.step(2).ok_or("step 2 was never decided")?;
    let tail: Vec<&SessionEntry> = session.iter().rev().take(2).rev().collect();
    match tail.as_slice() {
        [
            SessionEntry::Assistant { step: 1, decision },
            SessionEntry::Tool { result },
        ] => {
            let Decision::ToolCalls { calls } = &**decision else {
                return Err(format!("step 1 decided {decision:?}").into());
            };
            assert_eq!(calls.len(), 1);
            assert_eq!(calls[0].id, "bad");
            assert_eq!(result.tool_call_id, "bad");
            assert_eq!(result.error_code(), Some(ErrorCode::Einval));
            let suggested = result
                .error
                .as_ref()
                .and_then(|e| e.suggested_action.clone());
            assert!(
                suggested.is_some(),
                "an EINVAL tells the model what to do next"
            );
        }
        other => return Err(format!("unexpected session tail: {other:?}").into()),
    }
    // And the session holds exactly: goal, step 1, its envelope.
    assert_eq!(session.len(), 3);
    Ok(())
}

/// Calls of one step are judged one by one: a bad call does not sink its neighbours.
#[tokio::test]
async fn one_bad_call_does_not_sink_the_others_in_its_step() -> Result<(), TestError> {
    let task = TestTask::new("read", &[("a.txt", "a")])?;
    let policy = ScriptBuilder::new()
        .calls(vec![
            agentry_test_support::call("ok1", "fs.read", json!({"path": "a.txt"})),
            raw_call("bad", "fs.read", "not json"),
            agentry_test_support::call("nope", "fs.nope", json!({})),
            agentry_test_support::call("ok2", "fs.read", json!({"path": "a.txt"})),
        ])
        .finish("done")
        .policy();

    let (outcome, events) =
        run_with_events(&agentry::Runtime::with_builtins()?, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let step1: Vec<(String, Option<ErrorCode>)> = results
        .iter()
        .filter(|(step, _)| *step == 1)
        .map(|(_, r)| (r.tool_call_id.clone(), r.error_code()))
        .collect();
    assert_eq!(
        step1,
        vec![
            ("ok1".to_string(), None),
            ("bad".to_string(), Some(ErrorCode::Einval)),
            ("nope".to_string(), Some(ErrorCode::Enotool)),
            ("ok2".to_string(), None),
        ]
    );
    Ok(())
}
