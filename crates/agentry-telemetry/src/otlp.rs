//! OTLP/HTTP export (feature `otlp`): the tracer provider, its batch exporter
//! (off the hot path, on the SDK's own thread), and the `tracing` layer that
//! feeds it.
//!
//! Configured by the standard variables: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! or `OTEL_EXPORTER_OTLP_ENDPOINT` (unless an endpoint is given),
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG`,
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`. A collector that is down costs
//! the run nothing but the spans: a failed export is counted
//! ([`TelemetryGuard::dropped`]) and logged once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use agentry_redact::Redactor;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;

/// The variables that switch export on without `--otlp`.
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Whether an OTLP endpoint variable is set (non-empty).
pub fn endpoint_from_env() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// How to export.
#[derive(Debug, Clone, Default)]
pub struct OtlpOptions {
    /// The traces endpoint (`http://host:4318/v1/traces`), used as given;
    /// `None`: the `OTEL_EXPORTER_OTLP_*` variables, else the OTLP default.
    pub endpoint: Option<String>,
    /// `service.name` when `OTEL_SERVICE_NAME` is unset (default `agentry`).
    pub service_name: Option<String>,
    /// Applied to every string attribute, event attribute and status message
    /// before export (a backstop: content attributes are redacted as they are
    /// recorded); `None`: the built-in detectors and the environment's secrets.
    pub redactor: Option<Arc<Redactor>>,
}

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter refused its configuration (a bad endpoint URL, say).
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// The backstop redactor could not be built.
    #[error("OTLP redaction: {0}")]
    Redactor(#[from] agentry_redact::RedactError),
}

/// Keeps the export running; flushes what is queued and shuts the provider
/// down when dropped.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
    dropped: Arc<AtomicU64>,
}

impl TelemetryGuard {
    /// Spans lost so far: in batches the collector did not take.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Exports what is queued now (blocking; the SDK's thread does the work).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }

    /// Exports what is queued and stops; the spans lost in all.
    pub fn shutdown(self) -> u64 {
        let _ = self.provider.shutdown();
        self.dropped()
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("dropped", &self.dropped())
            .finish()
    }
}

/// The `tracing` layer type [`init`] returns (filtered to agentry's spans).
pub type OtelLayer<S> = Box<dyn Layer<S> + Send + Sync + 'static>;

/// Builds the exporter, its tracer provider (batch export) and the `tracing`
/// layer. The layer carries its own filter (agentry's targets at INFO), so
/// the spans survive a stricter filter on a log layer beside it.
pub fn init<S>(options: OtlpOptions) -> Result<(OtelLayer<S>, TelemetryGuard), TelemetryError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    // The exporter's reqwest client has rustls without a provider chosen.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(Duration::from_secs(10));
    if let Some(endpoint) = &options.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let otlp = builder
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let redactor = match options.redactor {
        Some(r) => r,
        None => Arc::new(Redactor::builder().build()?),
    };
    let dropped = Arc::new(AtomicU64::new(0));
    let exporter = GuardedExporter {
        inner: otlp,
        redactor,
        dropped: Arc::clone(&dropped),
        warned: AtomicBool::new(false),
    };
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(
            options
                .service_name
                .unwrap_or_else(|| "agentry".to_string()),
        );
    }
    // The sampler comes from OTEL_TRACES_SAMPLER (default parent-based always-on).
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("agentry"))
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_tracked_inactivity(false)
        // Nothing of ours reads OpenTelemetry's current context (a span's
        // traceparent is taken from the span itself), and activating it costs
        // two thread-local stack updates on every poll of an instrumented future.
        .with_context_activation(false)
        .with_filter(filter());
    Ok((Box::new(layer), TelemetryGuard { provider, dropped }))
}

/// agentry's spans and the events inside them, whatever a log filter says.
pub fn filter() -> Targets {
    Targets::new().with_target("agentry", tracing::Level::INFO)
}

/// The OTLP exporter behind a redactor, counting what the collector did not
/// take (the SDK drops a failed batch; we count it and say so once).
#[derive(Debug)]
struct GuardedExporter<E> {
    inner: E,
    redactor: Arc<Redactor>,
    dropped: Arc<AtomicU64>,
    warned: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for GuardedExporter<E> {
    async fn export(&self, mut batch: Vec<SpanData>) -> OTelSdkResult {
        for span in &mut batch {
            redact_span(&self.redactor, span);
        }
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.dropped.fetch_add(n, Ordering::Relaxed);
            if !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(target: "agentry::otel", error = %e, "spans could not be exported (counted as dropped; said once)");
            }
        }
        // The run goes on either way: a dead collector costs only its spans.
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Every text a span carries to the collector: its name (a run's span is
/// named after what the model chose, `invoke_agent <child name>`), its
/// attributes, its events' names and attributes, its status.
fn redact_span(redactor: &Redactor, span: &mut SpanData) {
    if let std::borrow::Cow::Owned(clean) = redactor.redact_str(&span.name) {
        span.name = clean.into();
    }
    redact_attributes(redactor, &mut span.attributes);
    for event in span.events.events.iter_mut() {
        if let std::borrow::Cow::Owned(clean) = redactor.redact_str(&event.name) {
            event.name = clean.into();
        }
        redact_attributes(redactor, &mut event.attributes);
    }
    if let opentelemetry::trace::Status::Error { description } = &mut span.status
        && let std::borrow::Cow::Owned(clean) = redactor.redact_str(description)
    {
        *description = clean.into();
    }
}

fn redact_attributes(redactor: &Redactor, attributes: &mut [KeyValue]) {
    for kv in attributes {
        if let Value::String(s) = &kv.value
            && let std::borrow::Cow::Owned(clean) = redactor.redact_str(s.as_str())
        {
            kv.value = Value::String(clean.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_in_an_attribute_is_redacted_before_export() {
        let redactor = Redactor::builder()
            .env([("MY_TOKEN", "hunter2hunter2")])
            .build()
            .expect("redactor");
        let mut attrs = vec![
            KeyValue::new("a", "key sk-proj-abcdefghijklmnopqrstuvwxyz012345 here"),
            KeyValue::new("b", "the token is hunter2hunter2"),
            KeyValue::new("c", "nothing"),
            KeyValue::new("d", 3i64),
            // JSON text (a call's arguments): the escape before the value
            // is no letter next to it.
            KeyValue::new("e", r#"{"cmd":"line1\nhunter2hunter2"}"#),
        ];
        redact_attributes(&redactor, &mut attrs);
        let text: Vec<String> = attrs
            .iter()
            .map(|kv| kv.value.as_str().into_owned())
            .collect();
        assert!(!text[0].contains("abcdefghijklmnop"), "{}", text[0]);
        assert!(text[0].contains("[redacted:openai_key]"), "{}", text[0]);
        assert!(!text[1].contains("hunter2hunter2"), "{}", text[1]);
        assert_eq!(text[2], "nothing");
        assert_eq!(attrs[3].value, Value::I64(3));
        assert_eq!(text[4], r#"{"cmd":"line1\n[redacted:env:MY_TOKEN]"}"#);
    }
}
