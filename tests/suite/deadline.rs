//! Stopping from outside the loop: the wall-clock deadline, user abort, runtime
//! shutdown. Each must interrupt a tool or a policy that never returns.
//!
//! Real-time tests assert only loosely on timing (the exact figure belongs in a
//! benchmark); paused-clock tests assert exactly, in virtual time.

use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::RunEvent;
use agentry::{ErrorCode, StopReason};
use agentry_test_support::{
    FnPolicy, GateTool, HangingTool, ScriptBuilder, TestError, TestTask, collect_until_stopped,
    runtime_with, tool_results, wait_for_event,
};
use serde_json::json;

const DEADLINE_MS: u64 = 200;
/// Generous slack for a loaded CI machine; the real figure is measured elsewhere.
const LOOSE: Duration = Duration::from_secs(2);
const WAIT: Duration = Duration::from_secs(5);

fn hang_then_finish() -> agentry::ScriptedPolicy {
    ScriptBuilder::new()
        .call("h1", "hang", json!({}))
        .finish("never reached")
        .policy()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_cancels_a_never_returning_tool() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let (probe, dropped) = (hang.clone(), hang.dropped());
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task = TestTask::new("hang", &[])?
        .grant(&["hang"])
        .deadline_ms(DEADLINE_MS)
        .trace();

    let begun = std::time::Instant::now();
    let handle = runtime.start(task.config(), hang_then_finish()).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    let took = begun.elapsed();

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(
        took >= Duration::from_millis(DEADLINE_MS)
            && took < Duration::from_millis(DEADLINE_MS) + LOOSE,
        "stopped after {took:?}"
    );
    assert_eq!(probe.started(), 1);
    assert_eq!(
        dropped.get(),
        1,
        "the tool's future was dropped, not left running"
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    let env = &results[0].1;
    assert_eq!(env.tool_call_id, "h1");
    assert!(
        matches!(
            env.error_code(),
            Some(ErrorCode::Etimedout | ErrorCode::Ecanceled)
        ),
        "{env:?}"
    );
    // The cancelled call is on record in the trace too, and the run's last line says why.
    let trace = task.read_trace()?;
    let last = trace.last().ok_or("empty trace")?;
    assert_eq!(last["stop_reason"], "deadline");
    let step = trace.first().ok_or("no step record")?;
    assert_eq!(step["results"][0]["tool_call_id"], "h1");
    assert_eq!(step["results"][0]["ok"], false);
    Ok(())
}

/// In virtual time the deadline is exact: the run stops at the deadline plus at
/// most the runtime's cancel grace, with no real waiting.
#[tokio::test(start_paused = true)]
async fn the_deadline_fires_on_time_on_a_paused_clock() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let dropped = hang.dropped();
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task = TestTask::new("hang", &[])?
        .grant(&["hang"])
        .deadline_ms(DEADLINE_MS);

    let begun = tokio::time::Instant::now();
    let outcome = runtime.run(task.config(), hang_then_finish()).await?;
    let took = begun.elapsed();

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(
        took >= Duration::from_millis(DEADLINE_MS)
            && took <= Duration::from_millis(DEADLINE_MS + 100),
        "stopped after {took:?} of virtual time"
    );
    assert_eq!(dropped.get(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_fires_while_the_policy_is_stuck() -> Result<(), TestError> {
    let task = TestTask::new("think forever", &[])?.deadline_ms(DEADLINE_MS);
    let runtime = agentry::Runtime::with_builtins()?;

    let begun = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_millis(DEADLINE_MS) + LOOSE,
        runtime.run(task.config(), FnPolicy::pending()),
    )
    .await
    .map_err(|_| "the run outlived its deadline by more than the slack")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(begun.elapsed() >= Duration::from_millis(DEADLINE_MS));
    assert_eq!(outcome.steps, 1);
    assert_eq!(outcome.tool_calls, 0);
    Ok(())
}

/// A per-call timeout is the tool's own budget: the call is `ETIMEDOUT` and the run
/// goes on. The tool has side effects and is not idempotent, so the timed-out call
/// is not retried (it may have taken effect).
#[tokio::test(start_paused = true)]
async fn a_tool_timeout_is_etimedout_and_the_run_continues() -> Result<(), TestError> {
    let hang = HangingTool::new("hang").timeout_ms(50);
    let dropped = hang.dropped();
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task = TestTask::new("hang briefly", &[])?.grant(&["hang"]);

    let handle = runtime.start(task.config(), hang_then_finish()).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    assert_eq!(results[0].1.error_code(), Some(ErrorCode::Etimedout));
    assert!(results[0].1.error.as_ref().is_some_and(|e| e.retryable));
    assert_eq!(results[0].1.attempt, 1);
    assert_eq!(dropped.get(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_a_run_blocked_in_a_tool_with_user_abort() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let (probe, dropped) = (hang.clone(), hang.dropped());
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task = TestTask::new("hang", &[])?.grant(&["hang"]);

    let handle = runtime.start(task.config(), hang_then_finish()).await?;
    let rx = handle.subscribe();
    probe.wait_started(1, WAIT).await?;
    handle.abort();
    let events = collect_until_stopped(rx).await?;
    let outcome = tokio::time::timeout(LOOSE, handle.wait())
        .await
        .map_err(|_| "abort did not stop the run")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    assert_eq!(dropped.get(), 1);
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].1.error_code(), Some(ErrorCode::Ecanceled));
    Ok(())
}

/// The held call of a gate tool is abandoned (its future dropped) on abort: the
/// test sees the call arrive, aborts, and the late release reaches nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_abandons_a_held_call() -> Result<(), TestError> {
    let (gate, mut held) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    let task = TestTask::new("wait at the gate", &[])?.grant(&["gate"]);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({"n": 1}))
        .finish("through")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let call = held.next_call(WAIT).await?;
    assert_eq!(call.call_id, "g1");
    assert_eq!(call.args, json!({"n": 1}));
    handle.abort();
    let outcome = tokio::time::timeout(LOOSE, handle.wait())
        .await
        .map_err(|_| "abort did not stop the run")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    assert!(call.is_abandoned());
    assert!(!call.release(json!("too late")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_stops_a_run_whose_policy_is_stuck() -> Result<(), TestError> {
    let task = TestTask::new("think forever", &[])?;
    let runtime = agentry::Runtime::with_builtins()?;

    let handle = runtime.start(task.config(), FnPolicy::pending()).await?;
    let mut rx = handle.subscribe();
    wait_for_event(
        &mut rx,
        |e| matches!(e.event, RunEvent::StepStarted { step: 1 }),
        WAIT,
    )
    .await?;
    handle.abort();
    let outcome = tokio::time::timeout(LOOSE, handle.wait())
        .await
        .map_err(|_| "abort did not stop the run")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_shutdown_stops_every_run() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let (probe, dropped) = (hang.clone(), hang.dropped());
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task_a = TestTask::new("hang", &[])?.grant(&["hang"]);
    let task_b = TestTask::new("think", &[])?;

    let a = runtime.start(task_a.config(), hang_then_finish()).await?;
    let b = runtime.start(task_b.config(), FnPolicy::pending()).await?;
    let mut rx = b.subscribe();
    probe.wait_started(1, WAIT).await?;
    wait_for_event(
        &mut rx,
        |e| matches!(e.event, RunEvent::StepStarted { step: 1 }),
        WAIT,
    )
    .await?;
    runtime.shutdown();
    let (a, b) = tokio::time::timeout(LOOSE, async { (a.wait().await, b.wait().await) })
        .await
        .map_err(|_| "shutdown did not stop the runs")?;

    assert_eq!(a?.stop_reason, StopReason::UserAbort);
    assert_eq!(b?.stop_reason, StopReason::UserAbort);
    assert_eq!(dropped.get(), 1);
    Ok(())
}

/// The deadline also covers the acceptance checks: a check command that hangs is
/// killed and the run ends `deadline`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_interrupts_a_hanging_acceptance_check() -> Result<(), TestError> {
    let task = TestTask::new("verify forever", &[])?
        .accept_command(&["sleep", "30"])
        .deadline_ms(DEADLINE_MS);
    let runtime = agentry::Runtime::with_builtins()?;

    let outcome = tokio::time::timeout(
        Duration::from_millis(DEADLINE_MS) + LOOSE,
        runtime.run(task.config(), ScriptBuilder::new().finish("done").policy()),
    )
    .await
    .map_err(|_| "the run outlived its deadline by more than the slack")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    Ok(())
}

/// A tool that blocks its thread cannot be cancelled, but it cannot hold the run
/// past its deadline either: the run stops on time and the call is recorded as
/// cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_deadline_stops_a_run_whose_tool_ignores_cancellation() -> Result<(), TestError> {
    // The tool blocks until released below, after the outcome is in (at most a
    // minute, should the run wrongly wait for it): no bet on how long a loaded
    // machine takes to stop the run.
    let block = Duration::from_secs(60);
    let blocking = agentry_test_support::BlockingTool::new("block", block);
    let finished = blocking.finished();
    let release = blocking.release();
    let runtime = runtime_with(vec![Arc::new(blocking)])?;
    let task = TestTask::new("block", &[])?
        .grant(&["block"])
        .deadline_ms(100);
    let policy = ScriptBuilder::new()
        .call("b1", "block", json!({}))
        .finish("never reached")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    let blocked_call_returned = finished.get();
    // Before the runtime's drop, which joins the blocked thread.
    release.release();

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert_eq!(
        blocked_call_returned, 0,
        "the run waited for the blocked tool"
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        matches!(
            results[0].1.error_code(),
            Some(ErrorCode::Etimedout | ErrorCode::Ecanceled)
        ),
        "{results:?}"
    );
    Ok(())
}

/// Calls queued behind a call that the deadline cancelled never start: nothing of
/// the run executes after its deadline.
#[tokio::test(start_paused = true)]
async fn calls_queued_behind_a_cancelled_call_never_start() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let probe = hang.clone();
    let count = agentry_test_support::CountingTool::new("count");
    let executions = count.counter();
    let runtime = runtime_with(vec![Arc::new(hang), Arc::new(count)])?;
    let task = TestTask::new("hang, then count", &[])?
        .grant(&["hang", "count"])
        .deadline_ms(DEADLINE_MS);
    // Neither tool is read-only, so the calls run one after the other.
    let policy = ScriptBuilder::new()
        .calls(vec![
            agentry_test_support::call("h1", "hang", json!({})),
            agentry_test_support::call("c1", "count", json!({})),
            agentry_test_support::call("h2", "hang", json!({})),
        ])
        .finish("never reached")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert_eq!(executions.get(), 0, "count ran after the deadline");
    assert_eq!(
        probe.started(),
        1,
        "the second hang started after the deadline"
    );
    let codes: Vec<(String, Option<ErrorCode>)> = tool_results(&events)
        .into_iter()
        .map(|(_, r)| (r.tool_call_id.clone(), r.error_code()))
        .collect();
    assert_eq!(codes.len(), 3, "{codes:?}");
    assert!(
        codes
            .iter()
            .all(|(_, c)| matches!(c, Some(ErrorCode::Etimedout | ErrorCode::Ecanceled))),
        "{codes:?}"
    );
    Ok(())
}
