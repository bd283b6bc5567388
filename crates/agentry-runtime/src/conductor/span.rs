//! The run's `invoke_agent {name}` span (OpenTelemetry GenAI conventions; see
//! `agentry_telemetry::fields`): opened as the run is launched, closed as it
//! finishes. With no subscriber that wants it the span is disabled, and
//! nothing here formats or allocates.

use std::sync::Arc;

use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::stop::StopReason;
use agentry_telemetry::int;
use tracing::Span;
use tracing::field::Empty;

use super::lineage::Lineage;
use crate::config::RunConfig;
use crate::policy::Policy;
use crate::redaction::RunRedaction;

/// The span fields of a run, declared once for both kinds of parent.
macro_rules! invoke_agent_span {
    ($($parent:tt)*) => {
        tracing::info_span!(
            target: "agentry::gen_ai",
            $($parent)*
            "invoke_agent",
            otel.name = Empty,
            otel.kind = "internal",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.id = Empty,
            gen_ai.agent.name = Empty,
            gen_ai.conversation.id = Empty,
            gen_ai.provider.name = Empty,
            gen_ai.request.model = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.usage.cache_read.input_tokens = Empty,
            "error.type" = Empty,
            agentry.stop_reason = Empty,
            agentry.steps = Empty,
            agentry.tool_calls = Empty,
            agentry.budget.spent.steps = Empty,
            agentry.budget.spent.tool_calls = Empty,
            agentry.budget.spent.tokens = Empty,
            agentry.budget.spent.cost_micros = Empty,
            agentry.budget.remaining.steps = Empty,
            agentry.budget.remaining.tool_calls = Empty,
            agentry.budget.remaining.tokens = Empty,
            agentry.budget.remaining.cost_micros = Empty,
        )
    };
}

/// Opens run `run_id`'s span. A child's nests under the span that started it
/// (its parent's `execute_tool agent.spawn`); a root's joins the configured
/// `traceparent` (else the caller's current span), as does a child regrown
/// after a restart, whose spawning span is gone. When the span is exported,
/// the run's trace id becomes the span's, so the trace file and the exported
/// spans name the same trace. The run's name (a task's id, a child's name as
/// its parent's model chose it) passes the run's redactor, as every other
/// write does: the exporter's own backstop knows neither the task's patterns
/// nor secret fields' values, and never sees span names.
pub(crate) fn run_span(
    config: &RunConfig,
    lineage: &mut Lineage,
    run_id: &str,
    policy: &dyn Policy,
    redaction: &RunRedaction,
) -> Span {
    let span = match lineage.parent.as_ref() {
        Some(parent) if !parent.span.is_disabled() => invoke_agent_span!(parent: &parent.span,),
        _ => invoke_agent_span!(),
    };
    if span.is_disabled() {
        return span;
    }
    if let Some(parent) = config.traceparent.as_deref()
        && lineage.parent.as_ref().is_none_or(|p| p.span.is_disabled())
    {
        agentry_telemetry::set_parent(&span, parent);
    }
    // "openai:gpt-4.1" names its provider; a scripted or in-process policy is agentry's.
    let policy_name = policy.name();
    let (provider, model) = match policy_name.split_once(':') {
        Some((provider, model)) => (provider, model),
        None => ("agentry", policy_name.as_str()),
    };
    let name = redaction.redactor.redact_str(&config.task_id);
    span.record("otel.name", format!("invoke_agent {name}"));
    span.record("gen_ai.agent.id", run_id);
    span.record("gen_ai.agent.name", &*name);
    let conversation = lineage.parent.as_ref().map_or(run_id, |p| &*p.root_id);
    span.record("gen_ai.conversation.id", conversation);
    span.record("gen_ai.provider.name", provider);
    span.record("gen_ai.request.model", model);
    if let Some(tp) = agentry_telemetry::traceparent(&span)
        && let Some(trace_id) = super::lineage::trace_id_of(&tp)
    {
        lineage.trace_id = trace_id.to_string();
    }
    span
}

/// The run's W3C traceparent: its span's when that is exported, else the
/// lineage's (derived from the run id).
pub(super) fn run_traceparent(span: &Span, lineage: &Lineage, run_id: &str) -> Arc<str> {
    match agentry_telemetry::traceparent(span) {
        Some(tp) => tp.into(),
        None => lineage.traceparent(run_id).into(),
    }
}

/// What the run's span says of its end: why it stopped (an `error.type`
/// unless it stopped `done`), its counts, and its budget.
pub(super) fn record_end(
    span: &Span,
    reason: StopReason,
    steps: u64,
    tool_calls: u64,
    budget: &BudgetSnapshot,
) {
    if span.is_disabled() {
        return;
    }
    let spent = &budget.spent;
    span.record("agentry.stop_reason", reason.as_str());
    if reason != StopReason::Done {
        span.record("error.type", reason.as_str());
    }
    span.record("agentry.steps", int(steps));
    span.record("agentry.tool_calls", int(tool_calls));
    span.record("gen_ai.usage.input_tokens", int(spent.tokens_in));
    span.record("gen_ai.usage.output_tokens", int(spent.tokens_out));
    span.record(
        "gen_ai.usage.cache_read.input_tokens",
        int(spent.cache_read_tokens),
    );
    span.record("agentry.budget.spent.steps", int(spent.steps));
    span.record("agentry.budget.spent.tool_calls", int(spent.tool_calls));
    span.record(
        "agentry.budget.spent.tokens",
        int(spent.tokens_in.saturating_add(spent.tokens_out)),
    );
    span.record("agentry.budget.spent.cost_micros", int(spent.cost_micros));
    let left = &budget.remaining;
    let fields = [
        ("agentry.budget.remaining.steps", left.steps_left),
        ("agentry.budget.remaining.tool_calls", left.tool_calls_left),
        ("agentry.budget.remaining.tokens", left.tokens_left),
        (
            "agentry.budget.remaining.cost_micros",
            left.cost_micros_left,
        ),
    ];
    for (field, value) in fields {
        if let Some(value) = value {
            span.record(field, int(value));
        }
    }
}

/// With `observe.content` and an enabled span: the redactor tool arguments
/// and results pass before they are recorded: the run's own (built-in
/// detectors, the environment's secrets, the task's patterns, secret fields'
/// values), as for every other write.
pub(super) fn content_redactor(
    config: &RunConfig,
    span: &Span,
    run: &Arc<agentry_redact::Redactor>,
) -> Option<Arc<agentry_redact::Redactor>> {
    (config.observe.content && !span.is_disabled()).then(|| Arc::clone(run))
}
