//! One call's `execute_tool {tool}` span (OpenTelemetry GenAI conventions;
//! see `agentry_telemetry::fields`), from before the approval gate to the
//! recorded outcome; its attempts run inside it and its retries are events on
//! it. Disabled (nothing formatted or allocated) when nobody wants spans.

use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::tool::{ToolCall, ToolContract};
use tracing::Span;
use tracing::field::Empty;

/// Opens the call's span under the run's. What is known now is given at
/// creation: each later `record` is a trip through the subscriber (a span
/// lookup and a lock per layer), so the span is recorded into once more, at
/// its outcome.
pub(super) fn tool_span(run: &Span, call: &ToolCall, contract: &ToolContract) -> Span {
    tracing::info_span!(
        target: "agentry::gen_ai",
        parent: run,
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = call.name.as_str(),
        gen_ai.tool.call.id = call.id.as_str(),
        "gen_ai.tool.type" = "function",
        agentry.effect = contract.effect.as_str(),
        agentry.idempotency = contract.idempotency.as_str(),
        agentry.operation_id = Empty,
        agentry.sandbox.mode = Empty,
        agentry.sandbox.network = Empty,
        agentry.sandbox.limits = Empty,
        agentry.attempt = Empty,
        agentry.approval_wait_ms = Empty,
        agentry.ledger_state = Empty,
        agentry.outcome = Empty,
        "error.type" = Empty,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
    )
}

/// The sandbox a process tool's call runs under (mode, network, limits), on
/// its span; nothing for a tool that starts no process, nor on a disabled span.
pub(super) fn record_sandbox(
    span: &Span,
    tool: &dyn agentry_tools::Tool,
    sandboxes: &agentry_tools::proc::RunSandboxes,
) {
    if span.is_disabled() {
        return;
    }
    let Some(over) = tool.sandbox() else {
        return;
    };
    let summary = sandboxes.summary(&over);
    let network = serde_json::to_string(&summary.network).unwrap_or_default();
    let limits = summary
        .limits
        .as_ref()
        .map(|l| serde_json::to_string(l).unwrap_or_default());
    tracing::record_all!(
        span,
        agentry.sandbox.mode = summary.mode.as_str(),
        agentry.sandbox.network = network.as_str(),
        agentry.sandbox.limits = limits.as_deref().unwrap_or("none (mode off)"),
    );
}

/// A failed attempt that will be tried again, as an event on the call's span.
pub(super) fn retry_event(span: &Span, env: &ResultEnvelope, backoff_ms: u64) {
    if span.is_disabled() {
        return;
    }
    let code = env.error_code().map_or("", |c| c.as_str());
    span.in_scope(|| {
        tracing::event!(
            target: "agentry::gen_ai",
            tracing::Level::INFO,
            agentry.attempt = i64::from(env.attempt),
            agentry.backoff_ms = agentry_telemetry::int(backoff_ms),
            "error.type" = code,
            "retry"
        );
    });
}

/// The call's end: its last attempt, its outcome (`error.type` is the error
/// code, never a message), and what its ledger row says, in one record.
pub(super) fn record_outcome(span: &Span, env: &ResultEnvelope, ledger_state: Option<&str>) {
    if span.is_disabled() {
        return;
    }
    // An absent value (`None`) is left unrecorded.
    tracing::record_all!(
        span,
        agentry.attempt = i64::from(env.attempt),
        agentry.outcome = if env.ok { "ok" } else { "error" },
        "error.type" = env.error_code().map(|c| c.as_str()),
        agentry.ledger_state = ledger_state,
    );
}

/// Opt-in content: a call's arguments or its result's data as JSON text,
/// redacted before it is recorded.
pub(super) fn record_content(
    span: &Span,
    redactor: Option<&agentry_redact::Redactor>,
    field: &'static str,
    value: Option<&serde_json::Value>,
) {
    let (Some(redactor), Some(value)) = (redactor, value) else {
        return;
    };
    if span.is_disabled() {
        return;
    }
    let text = value.to_string();
    span.record(field, &*redactor.redact_str(&text));
}
