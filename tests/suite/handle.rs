//! The embedding handle: outcome, snapshots, subscriptions, many runs at once.

use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::RunEvent;
use agentry::{Effect, RunStatus, Runtime, RuntimeError, StopReason};
use agentry_test_support::{
    CountingTool, GateTool, HangingTool, ScriptBuilder, TestError, TestTask, runtime_with,
    wait_for_event,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

/// While a tool holds step 1 open: no outcome yet, a late subscriber only sees
/// what happens from then on, and every clone of the handle gets the same outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcome_and_subscriptions_follow_the_run() -> Result<(), TestError> {
    let (gate, mut held) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    let task = TestTask::new("wait at the gate", &[])?.grant(&["gate"]);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({}))
        .finish("through")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let mut first = handle.subscribe();
    let call = held.next_call(WAIT).await?;
    assert_eq!(handle.outcome(), None, "no outcome while the step is held");
    let mut late = handle.subscribe();
    let clone = handle.clone();

    assert!(call.release(json!("open")));
    let (a, b) = (handle.wait().await?, clone.wait().await?);
    assert_eq!(a, b);
    assert_eq!(a.stop_reason, StopReason::Done, "{}", a.detail);
    assert_eq!(handle.outcome(), Some(a));

    let first_seen = wait_for_event(&mut first, |_| true, WAIT).await?;
    assert_eq!(
        first_seen.seq, 1,
        "the first subscriber sees the run from its start"
    );
    let late_seen = wait_for_event(&mut late, |_| true, WAIT).await?;
    assert!(
        matches!(late_seen.event, RunEvent::ToolCallFinished { step: 1, .. }),
        "the late subscriber starts at the release: {late_seen:?}"
    );
    // Aborting a finished run changes nothing.
    handle.abort();
    assert_eq!(handle.wait().await?.stop_reason, StopReason::Done);
    Ok(())
}

/// A snapshot can be taken while a step is in progress, without waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_does_not_wait_for_a_running_tool() -> Result<(), TestError> {
    let (gate, mut held) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    let task = TestTask::new("wait at the gate", &[])?.grant(&["gate"]);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({}))
        .finish("through")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let call = held.next_call(WAIT).await?;
    let snapshot = tokio::time::timeout(Duration::from_secs(1), handle.snapshot()).await;
    // Release before asserting, so a failure does not leave the run hanging.
    call.release(json!("open"));
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    let snapshot = snapshot
        .map_err(|_| "snapshot() blocked behind the running step")?
        .ok_or("no snapshot of a live run")?;
    assert_eq!(
        snapshot.version, 0,
        "nothing applied before step 1 completes"
    );
    assert_eq!(snapshot.session_len, 1);
    Ok(())
}

/// An embedding service runs many tasks on one runtime at once; each run is
/// confined to its own working directory and counted on its own budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_share_one_runtime_without_interfering() -> Result<(), TestError> {
    const RUNS: usize = 8;
    let count = CountingTool::new("count");
    let executions = count.counter();
    let runtime = runtime_with(vec![Arc::new(count)])?;
    let mut tasks = Vec::new();
    let mut handles = Vec::new();
    for i in 0..RUNS {
        let task = TestTask::sum()?
            .grant(&["fs.read", "fs.write", "count"])
            .max_tool_calls(4);
        let policy = ScriptBuilder::new()
            .call("c0", "count", json!({"value": i}))
            .call("c1", "fs.read", json!({"path": "numbers.txt"}))
            .call(
                "c2",
                "fs.write",
                json!({"path": "sum.txt", "content": "23"}),
            )
            .finish(&format!("run {i}"))
            .policy();
        handles.push(runtime.start(task.config(), policy).await?);
        tasks.push(task);
    }
    for (i, (handle, task)) in handles.iter().zip(&tasks).enumerate() {
        let outcome = handle.wait().await?;
        assert_eq!(
            outcome.stop_reason,
            StopReason::Done,
            "run {i}: {}",
            outcome.detail
        );
        assert_eq!(outcome.answer, Some(format!("run {i}")));
        assert_eq!(outcome.tool_calls, 4);
        assert_eq!(task.read_file("sum.txt")?, "23");
    }
    assert_eq!(executions.get(), RUNS);
    let ids: std::collections::BTreeSet<&str> = handles.iter().map(|h| h.run_id()).collect();
    assert_eq!(ids.len(), RUNS, "run ids are unique");
    Ok(())
}

#[tokio::test]
async fn a_missing_workdir_is_refused_before_anything_runs() -> Result<(), TestError> {
    let task = TestTask::new("nowhere", &[])?;
    let mut config = task.config();
    config.workdir = task.root().join("does-not-exist");

    let err = Runtime::with_builtins()?
        .start(config, ScriptBuilder::new().finish("x").policy())
        .await
        .err()
        .ok_or("a run started without a working directory")?;

    assert!(matches!(err, RuntimeError::Workdir { .. }), "{err}");
    Ok(())
}

#[tokio::test]
async fn an_unwritable_trace_path_is_a_trace_error() -> Result<(), TestError> {
    let task = TestTask::new("trace", &[("file", "x")])?;
    let mut config = task.config();
    // A trace "inside" a regular file cannot be created.
    config.trace = Some(task.workdir().join("file").join("trace.jsonl"));

    let err = Runtime::with_builtins()?
        .start(config, ScriptBuilder::new().finish("x").policy())
        .await
        .err()
        .ok_or("a run started with an unwritable trace")?;

    assert!(matches!(err, RuntimeError::Trace { .. }), "{err:?}");
    Ok(())
}

/// A run's handles reach its actors while it runs; once it has stopped, none
/// of them holds an actor's address (each keeps its mailboxes allocated), and
/// what a handle answers comes from the outcome: every clone at once, as the
/// outcome is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_runs_handles_let_its_actors_go() -> Result<(), TestError> {
    let (gate, mut held) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    let task = TestTask::new("wait at the gate", &[])?.grant(&["gate"]);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({}))
        .finish("through")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let clone = handle.clone();
    let call = held.next_call(WAIT).await?;
    let running = handle.actors().ok_or("no actors while the run runs")?;
    let budget_while_running = handle.budget().await;
    call.release(json!("open"));
    let outcome = clone.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert!(budget_while_running.is_some());

    for h in [&handle, &clone] {
        assert!(
            h.actors().is_none(),
            "a stopped run's handle holds its actors"
        );
        assert_eq!(h.budget().await, None);
        assert_eq!(h.snapshot().await, Some(outcome.state.clone()));
        assert!(matches!(
            h.send_message("too late"),
            Err(RuntimeError::Stopped { .. })
        ));
    }
    // The cells taken while it ran are the embedder's own; the actors behind
    // them have stopped.
    for cell in [
        running.policy,
        running.executor,
        running.state,
        running.budget,
    ] {
        cell.wait(Some(WAIT))
            .await
            .map_err(|_| "an actor of a stopped run did not stop")?;
    }
    // A run that stops before it takes a step lets its actors go too.
    runtime.shutdown();
    let idle = runtime
        .start(task.config(), ScriptBuilder::new().finish("no").policy())
        .await?;
    idle.wait().await?;
    assert!(idle.actors().is_none());
    Ok(())
}

/// After `shutdown`, the runtime starts no more work: a new run stops at once.
#[tokio::test]
async fn a_run_started_after_shutdown_stops_without_running() -> Result<(), TestError> {
    let count = CountingTool::new("count");
    let executions = count.counter();
    let runtime = runtime_with(vec![Arc::new(count)])?;
    runtime.shutdown();
    let task = TestTask::new("count", &[])?.grant(&["count"]);
    let policy = ScriptBuilder::new()
        .call("c1", "count", json!({}))
        .finish("counted")
        .policy();

    let outcome = tokio::time::timeout(WAIT, runtime.run(task.config(), policy))
        .await
        .map_err(|_| "a run on a shut-down runtime hung")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    assert_eq!(executions.get(), 0);
    Ok(())
}

/// `interrupt_and_pause()?.applied()` returns once the run has applied the
/// interrupt (what a prompt waits for): the cut step is counted and the run
/// is paused when it returns, no polling; it goes on after `resume`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_and_pause_is_applied_when_applied_returns() -> Result<(), TestError> {
    let hang = HangingTool::new("hang").effect(Effect::ReadOnly);
    let hanging = hang.clone();
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task = TestTask::new("wait", &[])?.grant(&["hang"]);
    let policy = ScriptBuilder::new()
        .call("h1", "hang", json!({"value": 1}))
        .finish("went on")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    hanging.wait_started(1, WAIT).await?;

    tokio::time::timeout(WAIT, handle.interrupt_and_pause()?.applied()).await??;
    let snapshot = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(snapshot.status, RunStatus::Paused, "{snapshot:?}");
    assert_eq!(snapshot.control.spent.steps, 1, "{snapshot:?}");

    handle.resume()?;
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("went on"));
    Ok(())
}
