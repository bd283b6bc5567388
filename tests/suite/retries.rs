//! Retries, the parallel bound, contract overrides, and executor restarts.

use std::sync::Arc;

use agentry::{Effect, ErrorCode, Idempotency, StopReason, ToolError};
use agentry_test_support::{
    CountingTool, FlakyTool, GateTool, ScriptBuilder, SleepTool, TestError, TestTask, call,
    run_with_events, runtime_with, tool_results,
};
use serde_json::json;

fn unavailable() -> ToolError {
    ToolError::new(ErrorCode::Eunavail, "upstream is down")
}

/// A transient failure is retried with backoff; every attempt is in the trace.
/// (Real time: the trace is written by a thread, which a paused clock would race.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_is_retried_until_it_succeeds() -> Result<(), TestError> {
    let flaky = FlakyTool::new("flaky", 2, unavailable()).idempotency(Idempotency::Idempotent);
    let attempts = flaky.attempts();
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("retry", &[])?.grant(&["flaky"]).trace();
    let policy = ScriptBuilder::new()
        .call("f1", "flaky", json!({}))
        .finish("ok")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(attempts.get(), 3);
    let result = &tool_results(&events)[0].1;
    assert!(result.ok);
    assert_eq!(result.attempt, 3);
    assert_eq!(
        outcome.budget.spent.retries, 2,
        "retries are charged to the budget"
    );
    let trace = task.read_trace()?;
    let tries = trace[0]["attempts"].as_array().cloned().unwrap_or_default();
    let numbers: Vec<u64> = tries.iter().filter_map(|a| a["attempt"].as_u64()).collect();
    assert_eq!(numbers, [1, 2, 3]);
    assert_eq!(tries[0]["error"], "EUNAVAIL");
    assert!(tries[0]["backoff_ms"].as_u64().is_some_and(|b| b >= 25));
    assert!(tries[2].get("backoff_ms").is_none());
    Ok(())
}

/// A side-effecting call that is not idempotent is not retried: it may already
/// have taken effect.
#[tokio::test(start_paused = true)]
async fn non_idempotent_side_effects_are_not_retried() -> Result<(), TestError> {
    let flaky = FlakyTool::new("append", 5, unavailable()).effect(Effect::Reversible);
    let attempts = flaky.attempts();
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("append", &[])?.grant(&["append"]);
    let policy = ScriptBuilder::new()
        .call("a1", "append", json!({}))
        .finish("ok")
        .policy();

    run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(attempts.get(), 1);
    Ok(())
}

/// Irreversible tools are never retried automatically: the failure is surfaced.
#[tokio::test(start_paused = true)]
async fn irreversible_tools_are_never_retried() -> Result<(), TestError> {
    let flaky = FlakyTool::new("pay", 5, unavailable()).effect(Effect::IrreversibleExternal);
    let attempts = flaky.attempts();
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("pay", &[])?.grant(&["pay"]);
    let mut config = task.config();
    // Approval is not what this test is about.
    config.approval.irreversible = false;
    let policy = ScriptBuilder::new()
        .call("p1", "pay", json!({}))
        .finish("ok")
        .policy();

    let (_, events) = run_with_events(&runtime, config, policy).await?;

    assert_eq!(attempts.get(), 1);
    let result = &tool_results(&events)[0].1;
    assert_eq!(result.error_code(), Some(ErrorCode::Eunavail));
    assert_eq!(result.attempt, 1);
    Ok(())
}

/// Permission errors are never retried, even if a tool marks them retryable.
#[tokio::test(start_paused = true)]
async fn permission_errors_are_never_retried() -> Result<(), TestError> {
    let denied = ToolError::new(ErrorCode::Eperm, "no").retryable(true);
    let flaky = FlakyTool::new("guarded", 5, denied).effect(Effect::ReadOnly);
    let attempts = flaky.attempts();
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("guarded", &[])?.grant(&["guarded"]);
    let policy = ScriptBuilder::new()
        .call("g1", "guarded", json!({}))
        .finish("ok")
        .policy();

    run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(attempts.get(), 1);
    Ok(())
}

/// The run's retry budget caps retries below the contract's allowance, check
/// before spend.
#[tokio::test(start_paused = true)]
async fn the_run_retry_budget_caps_retries() -> Result<(), TestError> {
    let flaky = FlakyTool::new("flaky", 10, unavailable())
        .effect(Effect::ReadOnly)
        .max_retries(5);
    let attempts = flaky.attempts();
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("retry", &[])?.grant(&["flaky"]);
    let mut config = task.config();
    config.limits.max_retries = Some(1);
    let policy = ScriptBuilder::new()
        .call("f1", "flaky", json!({}))
        .finish("ok")
        .policy();

    let (outcome, events) = run_with_events(&runtime, config, policy).await?;

    assert_eq!(
        attempts.get(),
        2,
        "one attempt plus the one retry the budget allows"
    );
    assert_eq!(outcome.budget.spent.retries, 1);
    assert_eq!(tool_results(&events)[0].1.attempt, 2);
    Ok(())
}

/// At most `max_parallel` parallel-safe calls run at once; order still holds.
#[tokio::test(start_paused = true)]
async fn parallel_calls_are_bounded() -> Result<(), TestError> {
    let sleep = SleepTool::new("sleep").effect(Effect::ReadOnly);
    let concurrency = sleep.max_in_flight();
    let runtime = runtime_with(vec![Arc::new(sleep)])?;
    let task = TestTask::new("sleep", &[])?.grant(&["sleep"]);
    let mut config = task.config();
    config.max_parallel = 2;
    let ids = ["a", "b", "c", "d", "e", "f"];
    let calls = ids
        .iter()
        .map(|id| call(id, "sleep", json!({"ms": 20, "tag": id})))
        .collect();
    let policy = ScriptBuilder::new().calls(calls).finish("ok").policy();

    let (_, events) = run_with_events(&runtime, config, policy).await?;

    assert_eq!(concurrency.get(), 2);
    let got: Vec<String> = tool_results(&events)
        .into_iter()
        .filter(|(s, _)| *s == 1)
        .map(|(_, r)| r.tool_call_id)
        .collect();
    assert_eq!(got, ids);
    Ok(())
}

/// A contract can declare a side-effecting tool parallel-safe, or a read-only
/// tool exclusive.
#[tokio::test(start_paused = true)]
async fn contracts_override_the_parallel_default() -> Result<(), TestError> {
    let parallel = SleepTool::new("upload")
        .effect(Effect::Reversible)
        .parallel_safe(true);
    let serial = SleepTool::new("scan")
        .effect(Effect::ReadOnly)
        .parallel_safe(false);
    let (par_max, ser_max) = (parallel.max_in_flight(), serial.max_in_flight());
    let runtime = runtime_with(vec![Arc::new(parallel), Arc::new(serial)])?;
    let task = TestTask::new("both", &[])?.grant(&["upload", "scan"]);
    let policy = ScriptBuilder::new()
        .calls(
            (0..3)
                .map(|i| call(&format!("u{i}"), "upload", json!({"ms": 10, "tag": i})))
                .collect(),
        )
        .calls(
            (0..3)
                .map(|i| call(&format!("s{i}"), "scan", json!({"ms": 10, "tag": i})))
                .collect(),
        )
        .finish("ok")
        .policy();

    run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(par_max.get(), 3);
    assert_eq!(ser_max.get(), 1);
    Ok(())
}

/// If the executor actor dies, the in-flight call is reported (not lost), the
/// executor is restarted, and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_executor_is_restarted_and_its_call_reported() -> Result<(), TestError> {
    let (gate, mut calls) = GateTool::new("gate");
    let count = CountingTool::new("count");
    let counter = count.counter();
    let runtime = runtime_with(vec![Arc::new(gate), Arc::new(count)])?;
    let task = TestTask::new("restart", &[])?.grant(&["gate", "count"]);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({}))
        .call("c1", "count", json!({}))
        .finish("ok")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let events = handle.subscribe();
    let _pending = calls.next_call(std::time::Duration::from_secs(5)).await?;
    handle
        .actors()
        .expect("the run is in a call")
        .executor
        .kill();
    let events = agentry_test_support::collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    assert_eq!(results[0].1.tool_call_id, "g1");
    assert_eq!(results[0].1.error_code(), Some(ErrorCode::Einternal));
    let message = results[0]
        .1
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(message.contains("outcome is unknown"), "{message}");
    assert!(results[1].1.ok, "the restarted executor runs the next call");
    assert_eq!(counter.get(), 1);
    Ok(())
}
