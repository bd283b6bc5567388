//! Spans in (shaped as the runtime's), metrics out.

use tracing::field::Empty;
use tracing_subscriber::layer::SubscriberExt;

use crate::Metrics;

/// The value of the sample `series` (name with its labels, as encoded).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.parse().ok()
    })
}

/// Every sample line of the metric `name`, whatever its labels.
fn series<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .collect()
}

fn with_metrics(f: impl FnOnce()) -> String {
    let metrics = Metrics::new();
    let subscriber = tracing_subscriber::registry().with(metrics.layer());
    tracing::subscriber::with_default(subscriber, f);
    metrics.encode()
}

fn run_span(run_id: &str) -> tracing::Span {
    let span = tracing::info_span!(
        target: "agentry::gen_ai",
        "invoke_agent",
        gen_ai.agent.id = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        agentry.stop_reason = Empty,
        agentry.steps = Empty,
        agentry.budget.spent.cost_micros = Empty,
    );
    span.record("gen_ai.agent.id", run_id);
    span
}

fn status(run_id: &str, status: &str) {
    tracing::event!(
        target: "agentry::metrics",
        tracing::Level::DEBUG,
        gen_ai.agent.id = run_id,
        agentry.status = status,
        "run status"
    );
}

#[test]
fn a_stopped_run_counts_by_its_stop_reason() {
    let text = with_metrics(|| {
        for (id, reason, steps) in [("a", "done", 3_i64), ("b", "budget_steps", 8)] {
            let span = run_span(id);
            span.record("agentry.stop_reason", reason);
            span.record("agentry.steps", steps);
            span.record("gen_ai.usage.input_tokens", 100_i64);
            span.record("gen_ai.usage.output_tokens", 7_i64);
            span.record("agentry.budget.spent.cost_micros", 250_i64);
        }
    });
    assert_eq!(
        sample(&text, r#"agentry_runs_total{stop_reason="done"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"agentry_runs_total{stop_reason="budget_steps"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_run_steps_sum{stop_reason="budget_steps"}"#
        ),
        Some(8.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_run_steps_bucket{le="5.0",stop_reason="done"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_run_tokens_total{stop_reason="done",type="input"}"#
        ),
        Some(100.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_run_cost_micros_total{stop_reason="done"}"#
        ),
        Some(250.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_run_duration_seconds_count{stop_reason="done"}"#
        ),
        Some(1.0)
    );
    assert_eq!(sample(&text, "agentry_runs_live"), Some(0.0));
}

#[test]
fn gauges_follow_a_runs_status_until_its_span_closes() {
    let metrics = Metrics::new();
    let subscriber = tracing_subscriber::registry().with(metrics.layer());
    tracing::subscriber::with_default(subscriber, || {
        let parked = run_span("p");
        let sleeping = run_span("s");
        status("p", "awaiting_approval");
        status("s", "sleeping");
        // Not a live run: not counted.
        status("elsewhere", "paused");
        let text = metrics.encode();
        assert_eq!(sample(&text, "agentry_runs_live"), Some(2.0));
        assert_eq!(
            sample(&text, r#"agentry_runs_parked{awaiting="approval"}"#),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, r#"agentry_runs_parked{awaiting="decision"}"#),
            Some(0.0)
        );
        assert_eq!(sample(&text, "agentry_runs_sleeping"), Some(1.0));
        assert_eq!(sample(&text, "agentry_runs_paused"), Some(0.0));
        status("p", "running");
        status("s", "paused");
        let text = metrics.encode();
        assert_eq!(
            sample(&text, r#"agentry_runs_parked{awaiting="approval"}"#),
            Some(0.0)
        );
        assert_eq!(sample(&text, "agentry_runs_sleeping"), Some(0.0));
        assert_eq!(sample(&text, "agentry_runs_paused"), Some(1.0));
        // Closed while paused (no stopped status seen): the gauge lets it go.
        drop(sleeping);
        drop(parked);
    });
    let text = metrics.encode();
    assert_eq!(sample(&text, "agentry_runs_live"), Some(0.0));
    assert_eq!(sample(&text, "agentry_runs_paused"), Some(0.0));
    assert_eq!(series(&text, "agentry_runs_total"), Vec::<&str>::new());
}

#[test]
fn tool_calls_count_by_outcome_and_retries_by_code() {
    let text = with_metrics(|| {
        let run = run_span("r");
        for (tool, code) in [("fs.read", None), ("http.get", Some("ETIMEDOUT"))] {
            let span = tracing::info_span!(
                target: "agentry::gen_ai",
                parent: &run,
                "execute_tool",
                gen_ai.tool.name = tool,
                agentry.approval_wait_ms = Empty,
                agentry.outcome = Empty,
                "error.type" = Empty,
            );
            if let Some(code) = code {
                span.in_scope(|| {
                    tracing::event!(
                        target: "agentry::gen_ai",
                        tracing::Level::INFO,
                        agentry.attempt = 1_i64,
                        agentry.backoff_ms = 10_i64,
                        "error.type" = code,
                        "retry"
                    );
                });
                span.record("agentry.outcome", "error");
                span.record("error.type", code);
            } else {
                span.record("agentry.approval_wait_ms", 1500_i64);
                span.record("agentry.outcome", "ok");
            }
        }
    });
    assert_eq!(
        sample(
            &text,
            r#"agentry_tool_calls_total{tool="fs.read",outcome="ok"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_tool_calls_total{tool="http.get",outcome="ETIMEDOUT"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_tool_retries_total{tool="http.get",code="ETIMEDOUT"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_tool_approval_wait_seconds_sum{tool="fs.read"}"#
        ),
        Some(1.5)
    );
    assert_eq!(
        sample(
            &text,
            r#"agentry_tool_duration_seconds_count{tool="http.get"}"#
        ),
        Some(1.0)
    );
}

#[test]
fn model_requests_count_by_status_with_ttft_and_tokens() {
    let text = with_metrics(|| {
        for error in [None, Some("unavailable")] {
            let span = tracing::info_span!(
                target: "agentry::gen_ai",
                "chat",
                gen_ai.provider.name = "openai",
                gen_ai.request.model = Empty,
                gen_ai.usage.input_tokens = Empty,
                gen_ai.usage.output_tokens = Empty,
                gen_ai.usage.cache_read.input_tokens = Empty,
                agentry.time_to_first_chunk_ms = Empty,
                "error.type" = Empty,
            );
            span.record("gen_ai.request.model", "gpt-test");
            match error {
                Some(error) => {
                    span.record("error.type", error);
                }
                None => {
                    span.record("agentry.time_to_first_chunk_ms", 250_i64);
                    span.record("gen_ai.usage.input_tokens", 12_i64);
                    span.record("gen_ai.usage.cache_read.input_tokens", 4_i64);
                }
            }
        }
    });
    let labels = r#"provider="openai",model="gpt-test""#;
    let series = |name: &str, extra: &str| format!("{name}{{{labels}{extra}}}");
    assert_eq!(
        sample(
            &text,
            &series("agentry_model_requests_total", r#",status="ok""#)
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &series("agentry_model_requests_total", r#",status="unavailable""#)
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            &series("agentry_model_time_to_first_token_seconds_sum", "")
        ),
        Some(0.25)
    );
    assert_eq!(
        sample(
            &text,
            &series("agentry_model_tokens_total", r#",type="cache_read""#)
        ),
        Some(4.0)
    );
    assert_eq!(
        sample(
            &text,
            &series("agentry_model_request_duration_seconds_count", "")
        ),
        Some(2.0)
    );
}

#[test]
fn other_spans_and_targets_are_not_counted() {
    let metrics = Metrics::new();
    let subscriber = tracing_subscriber::registry().with(metrics.layer());
    tracing::subscriber::with_default(subscriber, || {
        // Shaped as a run's span in every way but its target.
        let other = tracing::info_span!(
            target: "elsewhere",
            "invoke_agent",
            gen_ai.agent.id = "foreign",
            agentry.stop_reason = "done",
            agentry.steps = 3_i64,
        );
        let log =
            tracing::info_span!(target: "agentry::gen_ai", "something", gen_ai.agent.id = "x");
        let (_other, _log) = (other.enter(), log.enter());
        status("foreign", "paused");
        // Read while they are open: a counted span would be live now (and
        // gone again once it closed).
        let text = metrics.encode();
        assert_eq!(sample(&text, "agentry_runs_live"), Some(0.0), "{text}");
        assert_eq!(sample(&text, "agentry_runs_paused"), Some(0.0), "{text}");
    });
    // Closed with a stop reason: a counted span would have a series now.
    let text = metrics.encode();
    assert_eq!(series(&text, "agentry_runs_total"), Vec::<&str>::new());
    assert_eq!(sample(&text, "agentry_runs_live"), Some(0.0));
}

#[test]
fn register_adds_the_families_to_an_embedders_registry() {
    let metrics = Metrics::new();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let subscriber = tracing_subscriber::registry().with(metrics.layer());
    tracing::subscriber::with_default(subscriber, || {
        let span = run_span("x");
        span.record("agentry.stop_reason", "done");
    });
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert_eq!(
        sample(&text, r#"agentry_runs_total{stop_reason="done"}"#),
        Some(1.0)
    );
    assert_eq!(text, metrics.encode());
}
