//! The tool executor: panics are contained, parallel results come back in request
//! order.

use std::sync::Arc;

use agentry::{Effect, ErrorCode, StopReason};
use agentry_test_support::{
    PanicTool, ScriptBuilder, SleepTool, TestError, TestTask, call, run_with_events, runtime_with,
    tool_results,
};
use serde_json::json;

#[tokio::test]
async fn a_panicking_tool_becomes_einternal_and_the_run_finishes() -> Result<(), TestError> {
    let runtime = runtime_with(vec![Arc::new(PanicTool::new("boom", "kaboom"))])?;
    let task = TestTask::new("explode", &[("a.txt", "a")])?.grant(&["boom", "fs.read"]);
    let policy = ScriptBuilder::new()
        .call("p1", "boom", json!({}))
        .call("r1", "fs.read", json!({"path": "a.txt"}))
        .finish("survived")
        .policy();

    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 3);
    let results = tool_results(&events);
    let boom = &results[0].1;
    assert_eq!(boom.tool_call_id, "p1");
    assert_eq!(boom.error_code(), Some(ErrorCode::Einternal));
    let message = boom
        .error
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or("");
    assert!(message.contains("kaboom"), "{message}");
    assert!(results[1].1.ok, "the executor still works after the panic");
    Ok(())
}

/// Five read-only calls sleeping 50, 40, 30, 20, 10 ms run together and finish in
/// reverse order; their results still come back in request order.
#[tokio::test(start_paused = true)]
async fn parallel_read_only_results_come_back_in_request_order() -> Result<(), TestError> {
    let sleep = SleepTool::new("sleep").effect(Effect::ReadOnly);
    let (completions, concurrency) = (sleep.completion_log(), sleep.max_in_flight());
    let runtime = runtime_with(vec![Arc::new(sleep)])?;
    let task = TestTask::new("sleep", &[])?.grant(&["sleep"]);
    let ids = ["s1", "s2", "s3", "s4", "s5"];
    let calls = ids
        .iter()
        .zip([50, 40, 30, 20, 10])
        .map(|(id, ms)| call(id, "sleep", json!({"ms": ms, "tag": id})))
        .collect();
    let policy = ScriptBuilder::new().calls(calls).finish("slept").policy();

    let begun = tokio::time::Instant::now();
    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(completions.ids(), ["s5", "s4", "s3", "s2", "s1"]);
    assert_eq!(concurrency.get(), 5, "all five ran at once");
    assert!(begun.elapsed() < tokio::time::Duration::from_millis(150));
    let got: Vec<(String, serde_json::Value)> = tool_results(&events)
        .into_iter()
        .filter(|(step, _)| *step == 1)
        .map(|(_, r)| {
            (
                r.tool_call_id.clone(),
                r.data.unwrap_or_default()["tag"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, serde_json::Value)> =
        ids.iter().map(|id| (id.to_string(), json!(id))).collect();
    assert_eq!(
        got, want,
        "each result is keyed by its own call, in request order"
    );
    Ok(())
}

/// Calls with effects run one at a time, in request order.
#[tokio::test(start_paused = true)]
async fn calls_with_effects_run_one_at_a_time_in_order() -> Result<(), TestError> {
    let sleep = SleepTool::new("sleep"); // reversible by default
    let (completions, concurrency) = (sleep.completion_log(), sleep.max_in_flight());
    let runtime = runtime_with(vec![Arc::new(sleep)])?;
    let task = TestTask::new("sleep", &[])?.grant(&["sleep"]);
    let calls = [("a", 30), ("b", 20), ("c", 10)]
        .iter()
        .map(|(id, ms)| call(id, "sleep", json!({"ms": ms})))
        .collect();
    let policy = ScriptBuilder::new().calls(calls).finish("slept").policy();

    let outcome = runtime.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(completions.ids(), ["a", "b", "c"]);
    assert_eq!(concurrency.get(), 1);
    Ok(())
}

/// Panics whose message says a future was polled after it completed, seen by
/// this test process (counted by a panic hook installed once).
fn repoll_panics() -> usize {
    use std::sync::Once;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static COUNT: AtomicUsize = AtomicUsize::new(0);
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if message.contains("resumed after completion") {
                COUNT.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    COUNT.load(Ordering::SeqCst)
}

/// A tool that returns an error is finished: the executor must not poll its
/// future again. (A re-poll panics inside `catch_unwind`, which hides it in a
/// test, but aborts a service built with `panic = "abort"`.)
#[tokio::test]
async fn a_failed_call_is_never_polled_again() -> Result<(), TestError> {
    let before = repoll_panics();
    let task = TestTask::new("read a missing file", &[])?;
    let policy = ScriptBuilder::new()
        .call("r1", "fs.read", json!({"path": "missing.txt"}))
        .finish("no file")
        .policy();

    let (outcome, events) =
        run_with_events(&agentry::Runtime::with_builtins()?, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(
        tool_results(&events)[0].1.error_code(),
        Some(ErrorCode::Einval)
    );
    assert_eq!(
        repoll_panics(),
        before,
        "a finished tool future was polled again"
    );
    Ok(())
}

/// Calls with effects keep their request order within a step, so a read after a
/// write sees the write.
#[tokio::test]
async fn a_read_after_a_write_in_the_same_step_sees_the_write() -> Result<(), TestError> {
    let task = TestTask::new("rewrite", &[("a.txt", "v1")])?.grant(&["fs.read", "fs.write"]);
    let policy = ScriptBuilder::new()
        .calls(vec![
            call("before", "fs.read", json!({"path": "a.txt"})),
            call(
                "write",
                "fs.write",
                json!({"path": "a.txt", "content": "v2"}),
            ),
            call("after", "fs.read", json!({"path": "a.txt"})),
        ])
        .finish("rewritten")
        .policy();

    let (outcome, events) =
        run_with_events(&agentry::Runtime::with_builtins()?, task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let contents: Vec<(String, serde_json::Value)> = tool_results(&events)
        .into_iter()
        .filter(|(step, _)| *step == 1)
        .map(|(_, r)| {
            (
                r.tool_call_id.clone(),
                r.data.unwrap_or_default()["content"].clone(),
            )
        })
        .collect();
    assert_eq!(
        contents,
        vec![
            ("before".to_string(), json!("v1")),
            ("write".to_string(), serde_json::Value::Null),
            ("after".to_string(), json!("v2")),
        ]
    );
    // The world layer saw a.txt change: read v1, write v2 (the read of v2 repeats it).
    assert_eq!(outcome.state.world.version, 1, "one step changed the world");
    Ok(())
}
