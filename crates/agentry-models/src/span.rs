//! A model request's `chat {model}` span (kind CLIENT; OpenTelemetry GenAI
//! conventions, see `agentry_telemetry::fields`): request parameters, the
//! response's id, model, finish reason and usage, the time to its first
//! streamed chunk; a retry is an event on it (the transport's warning). With
//! no subscriber that wants it, the span is disabled and nothing is built.

use std::borrow::Cow;

use agentry_policy::Redact;
use agentry_protocol::decision::{Decision, TokenUsage};
use agentry_telemetry::int;
use opentelemetry::{Array, StringValue, Value};
use tracing::field::Empty;
use tracing::{Instrument, Span};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::ModelConfig;
use crate::transport::{self, AttemptError, TurnFailure};

/// A model request, as its span names it.
pub(crate) struct ChatRequest<'a> {
    pub(crate) provider: &'static str,
    pub(crate) config: &'a ModelConfig,
    pub(crate) stream: bool,
    /// The run's traceparent, sent when the span is not exported.
    pub(crate) run_traceparent: Option<&'a str>,
    /// With span content on: the request's messages and the redactor they
    /// pass before they are recorded.
    pub(crate) content: Option<Content<'a>>,
}

/// Opt-in message contents of a request (`PolicyContext::content`).
#[derive(Clone, Copy)]
pub(crate) struct Content<'a> {
    pub(crate) redact: &'a dyn Redact,
    /// The request's `messages` as sent.
    pub(crate) input: &'a serde_json::Value,
}

/// A turn's outcome and the span it ran in (for its output, recorded once
/// the adapter has made its decision).
pub(crate) struct Chatted<T> {
    pub(crate) result: Result<T, TurnFailure>,
    pub(crate) span: Span,
}

/// A turn's reply, as its span records it.
pub(crate) trait Answered {
    fn response(&self) -> Response<'_>;
}

/// Runs a turn's request (with its retries) in its `chat` span: each
/// attempt gets the `traceparent` to send, and the span records the reply
/// or why there was none.
pub(crate) async fn chat<T, F, Fut>(request: ChatRequest<'_>, mut attempt: F) -> Chatted<T>
where
    T: Answered,
    F: FnMut(Option<std::sync::Arc<str>>) -> Fut,
    Fut: Future<Output = Result<T, AttemptError>>,
{
    let span = chat_span(request.provider, request.config, request.stream);
    if let Some(content) = request.content {
        record_json(
            &span,
            "gen_ai.input.messages",
            content.redact,
            content.input,
        );
    }
    let tp: Option<std::sync::Arc<str>> =
        traceparent(&span, request.run_traceparent).map(|tp| std::sync::Arc::from(&*tp));
    let result = transport::with_retries(&request.config.retry, || attempt(tp.clone()))
        .instrument(span.clone())
        .await;
    match &result {
        Ok(turn) => record_response(&span, turn.response()),
        Err(failure) => record_failure(&span, failure),
    }
    Chatted { result, span }
}

/// With span content on: the decision a turn came to, as
/// `gen_ai.output.messages` (redacted).
pub(crate) fn record_output(span: &Span, content: Option<&dyn Redact>, decision: &Decision) {
    let Some(redact) = content else {
        return;
    };
    if let Ok(value) = serde_json::to_value(decision) {
        record_json(span, "gen_ai.output.messages", redact, &value);
    }
}

/// Records a JSON value as a redacted string attribute, if anyone listens.
fn record_json(span: &Span, field: &'static str, redact: &dyn Redact, value: &serde_json::Value) {
    if span.is_disabled() {
        return;
    }
    let text = value.to_string();
    span.record(field, &*redact.redact(&text));
}

/// Opens the request's span (inside the run's, the caller's current span).
fn chat_span(provider: &'static str, config: &ModelConfig, stream: bool) -> Span {
    let span = tracing::info_span!(
        target: "agentry::gen_ai",
        "chat",
        otel.name = Empty,
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = Empty,
        gen_ai.request.max_tokens = i64::from(config.max_output_tokens),
        gen_ai.request.stream = stream,
        gen_ai.response.id = Empty,
        gen_ai.response.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        agentry.time_to_first_chunk_ms = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        "error.type" = Empty,
    );
    if !span.is_disabled() {
        span.record("otel.name", format!("chat {}", config.model));
        span.record("gen_ai.request.model", config.model.as_str());
    }
    span
}

/// The `traceparent` a request carries: its span's when that is exported,
/// else the run's.
fn traceparent<'a>(span: &Span, run: Option<&'a str>) -> Option<Cow<'a, str>> {
    match agentry_telemetry::traceparent(span) {
        Some(own) => Some(Cow::Owned(own)),
        None => run.map(Cow::Borrowed),
    }
}

/// What the server answered.
pub(crate) struct Response<'a> {
    pub(crate) id: Option<&'a str>,
    pub(crate) model: Option<&'a str>,
    pub(crate) finish_reason: Option<&'a str>,
    pub(crate) usage: TokenUsage,
}

/// Records a turn's response on its span.
fn record_response(span: &Span, response: Response<'_>) {
    if span.is_disabled() {
        return;
    }
    if let Some(id) = response.id {
        span.record("gen_ai.response.id", id);
    }
    if let Some(model) = response.model {
        span.record("gen_ai.response.model", model);
    }
    let usage = response.usage;
    span.record("gen_ai.usage.input_tokens", int(usage.tokens_in));
    span.record("gen_ai.usage.output_tokens", int(usage.tokens_out));
    span.record(
        "gen_ai.usage.cache_read.input_tokens",
        int(usage.cache_read_tokens),
    );
    if let Some(reason) = response.finish_reason {
        // An array attribute: not expressible as a tracing field.
        let reasons = Array::String(vec![StringValue::from(reason.to_string())]);
        span.set_attribute(
            agentry_telemetry::fields::RESPONSE_FINISH_REASONS,
            Value::Array(reasons),
        );
    }
}

/// Records why a turn failed (`error.type`: the failure's class, never its
/// message).
fn record_failure(span: &Span, failure: &TurnFailure) {
    if span.is_disabled() {
        return;
    }
    let kind = match failure {
        TurnFailure::Exhausted(_) => "unavailable",
        TurnFailure::Refused(_) => "refused",
        TurnFailure::Invalid(_) => "invalid_response",
    };
    span.record("error.type", kind);
}
