//! Prometheus metrics through the embedding API (`agentry::metrics`): real
//! runs under a subscriber with the metrics layer, scraped with
//! `Metrics::encode` and read back by a strict OpenMetrics parser.
//!
//! Each test sets its own subscriber as the thread's default and runs on a
//! current-thread runtime, so every span of its runs (created on that thread)
//! reaches its own metrics and no other test's.

pub mod exposition;

use std::sync::Arc;
use std::time::Duration;

use agentry::metrics::Metrics;
use agentry::{Effect, ErrorCode, Idempotency, RunStatus, StopReason, ToolError};
use agentry_test_support::{
    CountingTool, FlakyTool, ScriptBuilder, TestError, TestTask, runtime_with,
};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

use self::exposition::Exposition;

/// Bound on any wait for a run to reach a state.
const WAIT: Duration = Duration::from_secs(20);

/// Fresh metrics, their layer the default subscriber of this thread until the
/// guard drops.
fn metrics() -> (Metrics, tracing::subscriber::DefaultGuard) {
    let metrics = Metrics::new();
    let subscriber = tracing_subscriber::registry().with(metrics.layer());
    let guard = tracing::subscriber::set_default(subscriber);
    (metrics, guard)
}

fn scrape(metrics: &Metrics) -> Result<Exposition, TestError> {
    Exposition::parse(&metrics.encode())
}

/// Two runs, one `done` (a call retried twice, a read of a missing file failing EINVAL), one
/// stopped by its step budget: runs by stop reason, steps, tool calls by tool
/// and outcome, retries by code, and nothing left live.
#[tokio::test]
async fn runs_and_tool_calls_are_counted_by_stop_reason_and_outcome() -> Result<(), TestError> {
    let (metrics, _guard) = metrics();
    let flaky = FlakyTool::new("flaky", 2, ToolError::new(ErrorCode::Eunavail, "down"))
        .idempotency(Idempotency::Idempotent);
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("retry and fail", &[])?.grant(&["flaky", "fs.read"]);
    let policy = ScriptBuilder::new()
        .call("f1", "flaky", json!({}))
        .call("r1", "fs.read", json!({"path": "missing.txt"}))
        .finish("ok")
        .policy();
    let done = runtime.run(task.config(), policy).await?;
    assert_eq!(done.stop_reason, StopReason::Done, "{}", done.detail);
    let task = TestTask::new("loop", &[])?.grant(&["fs.read"]).max_steps(2);
    let policy = ScriptBuilder::new()
        .call("a", "fs.read", json!({"path": "a.txt"}))
        .call("b", "fs.read", json!({"path": "b.txt"}))
        .call("c", "fs.read", json!({"path": "c.txt"}))
        .finish("never")
        .policy();
    let stuck = runtime.run(task.config(), policy).await?;
    assert_eq!(stuck.stop_reason, StopReason::MaxSteps, "{}", stuck.detail);

    let m = scrape(&metrics)?;
    let done_l = [("stop_reason", "done")];
    let steps_l = [("stop_reason", "max_steps")];
    assert_eq!(m.value("agentry_runs_total", &done_l), Some(1.0));
    assert_eq!(m.value("agentry_runs_total", &steps_l), Some(1.0));
    assert_eq!(
        m.value("agentry_run_steps_sum", &done_l),
        Some(done.steps as f64)
    );
    assert_eq!(
        m.value("agentry_run_steps_sum", &steps_l),
        Some(stuck.steps as f64)
    );
    assert_eq!(
        m.value("agentry_run_duration_seconds_count", &done_l),
        Some(1.0)
    );
    let calls = |tool: &str, outcome: &str| {
        m.count(
            "agentry_tool_calls_total",
            &[("tool", tool), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("flaky", "ok"), 1.0);
    assert_eq!(calls("fs.read", "EINVAL"), 1.0 + stuck.tool_calls as f64);
    assert_eq!(calls("task.finish", "ok"), 1.0);
    assert_eq!(
        m.value(
            "agentry_tool_retries_total",
            &[("tool", "flaky"), ("code", "EUNAVAIL")]
        ),
        Some(2.0)
    );
    assert_eq!(
        m.value("agentry_tool_duration_seconds_count", &[("tool", "flaky")]),
        Some(1.0)
    );
    assert_eq!(m.value("agentry_runs_live", &[]), Some(0.0));
    Ok(())
}

/// A run parked on an approval counts in `agentry_runs_parked` while it waits,
/// and leaves it once approved.
#[tokio::test]
async fn a_run_parked_on_approval_is_counted_until_it_is_approved() -> Result<(), TestError> {
    let (metrics, _guard) = metrics();
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let runtime = runtime_with(vec![Arc::new(pay)])?;
    let task = TestTask::new("pay the invoice", &[])?.grant(&["pay"]);
    let policy = ScriptBuilder::new()
        .call("p1", "pay", json!({"value": 42}))
        .finish("paid")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    let approval = [("awaiting", "approval")];

    let deadline = tokio::time::Instant::now() + WAIT;
    let parked = loop {
        let m = scrape(&metrics)?;
        if m.value("agentry_runs_parked", &approval) == Some(1.0) {
            break m;
        }
        assert!(tokio::time::Instant::now() < deadline, "never parked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let snap = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(snap.status, RunStatus::AwaitingApproval);
    assert_eq!(parked.value("agentry_runs_live", &[]), Some(1.0));
    assert_eq!(
        parked.value("agentry_runs_parked", &[("awaiting", "decision")]),
        Some(0.0)
    );
    assert_eq!(
        parked.count("agentry_runs_total", &[("stop_reason", "done")]),
        0.0
    );

    handle.approve("p1").await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let m = scrape(&metrics)?;
    assert_eq!(m.value("agentry_runs_parked", &approval), Some(0.0));
    assert_eq!(m.value("agentry_runs_live", &[]), Some(0.0));
    assert_eq!(
        m.value("agentry_runs_total", &[("stop_reason", "done")]),
        Some(1.0)
    );
    assert_eq!(
        m.value(
            "agentry_tool_approval_wait_seconds_count",
            &[("tool", "pay")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.value(
            "agentry_tool_calls_total",
            &[("tool", "pay"), ("outcome", "ok")]
        ),
        Some(1.0)
    );
    Ok(())
}

/// A time-driven agent sleeps between its ticks: `agentry_runs_sleeping` is 1
/// after its first tick's step, 0 once it finished on the second.
#[tokio::test]
async fn a_time_driven_run_counts_as_sleeping_between_ticks() -> Result<(), TestError> {
    let (metrics, _guard) = metrics();
    let runtime = runtime_with(Vec::new())?;
    let task = TestTask::new("tick twice", &[])?;
    let mut config = task.config();
    // Long enough that the poll below sees the sleep between the two ticks.
    config.tick_every = Some(Duration::from_secs(1));
    let policy = ScriptBuilder::new()
        .final_text("one")
        .finish("two")
        .policy();
    let handle = runtime.start(config, policy).await?;

    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let snap = handle.snapshot().await.ok_or("no snapshot")?;
        let m = scrape(&metrics)?;
        let sleeping = m.value("agentry_runs_sleeping", &[]);
        if snap.control.spent.steps == 1
            && snap.status == RunStatus::Sleeping
            && sleeping == Some(1.0)
        {
            assert_eq!(m.value("agentry_runs_live", &[]), Some(1.0));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline && snap.status != RunStatus::Stopped,
            "never seen sleeping after the first tick: {:?} steps {}, gauge {sleeping:?}",
            snap.status,
            snap.control.spent.steps
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2);
    let m = scrape(&metrics)?;
    assert_eq!(m.value("agentry_runs_sleeping", &[]), Some(0.0));
    assert_eq!(m.value("agentry_runs_live", &[]), Some(0.0));
    assert_eq!(
        m.value("agentry_run_steps_sum", &[("stop_reason", "done")]),
        Some(2.0)
    );
    Ok(())
}

/// Model requests against a real HTTP server (the OpenAI-compatible adapter):
/// a request answered 400 and a streamed one, by model and status, with the time to
/// the first token and the reply's tokens.
#[tokio::test]
async fn model_requests_are_counted_by_model_and_status() -> Result<(), TestError> {
    use super::models::server::{MockServer, Reply};
    use super::models::sse::{config, one_call};

    let (metrics, _guard) = metrics();
    let server = MockServer::start(vec![
        Reply::status(
            400,
            r#"{"error":{"message":"context_length_exceeded","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"ok\"}")),
    ])
    .await?;
    let policy = agentry_models::OpenAiPolicy::new(config(&server.base_url))?;
    let task = TestTask::new("answer", &[])?;
    let outcome = runtime_with(Vec::new())?.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(server.received().len(), 2);

    let m = scrape(&metrics)?;
    let model = [("provider", "openai"), ("model", "test-model")];
    let status = |s: &'static str| {
        let mut labels = model.to_vec();
        labels.push(("status", s));
        m.value("agentry_model_requests_total", &labels)
    };
    assert_eq!(status("ok"), Some(1.0));
    // A 400 is the adapter's `invalid_response` (the model sees it and goes on).
    assert_eq!(status("invalid_response"), Some(1.0));
    assert_eq!(
        m.value("agentry_model_request_duration_seconds_count", &model),
        Some(2.0)
    );
    assert_eq!(
        m.value("agentry_model_time_to_first_token_seconds_count", &model),
        Some(1.0)
    );
    let tokens = |kind: &'static str| {
        let mut labels = model.to_vec();
        labels.push(("type", kind));
        m.value("agentry_model_tokens_total", &labels)
    };
    assert_eq!(tokens("input"), Some(10.0));
    assert_eq!(tokens("output"), Some(5.0));
    assert_eq!(
        m.value(
            "agentry_run_tokens_total",
            &[("stop_reason", "done"), ("type", "input")]
        ),
        Some(outcome.budget.spent.tokens_in as f64)
    );
    Ok(())
}
