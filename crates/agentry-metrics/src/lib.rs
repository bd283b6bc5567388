//! Prometheus metrics for agentry.
//!
//! The runtime already describes every run, model request and tool call as a
//! `tracing` span (target `agentry::gen_ai`, the OpenTelemetry GenAI
//! conventions; see [`agentry_telemetry::fields`]) and every status change of
//! a run as an `agentry::metrics` event. [`Metrics::layer`] is a
//! `tracing_subscriber` layer that turns them into counters, histograms and
//! gauges (the [families](#metrics)); [`Metrics::encode`] writes them in the
//! OpenMetrics text format ([`CONTENT_TYPE`]), and [`Metrics::register`] adds
//! them to a `prometheus_client` registry of the embedder's own.
//!
//! # Layout
//! - `lib.rs`: [`Metrics`], the handle: its layer, `encode`, `register`.
//! - `layer.rs`: [`MetricsLayer`], the `tracing` layer: span fields kept as
//!   they are recorded, counted when the span closes; status events
//!   ([`STATUS_TARGET`]) move runs between the gauges.
//! - `record.rs`: what the layer keeps of a span until it closes, and the
//!   statuses of live runs.
//! - `families.rs`: the metric families (the table below), their labels and
//!   buckets.
//!
//! ```
//! use tracing_subscriber::layer::SubscriberExt;
//!
//! let metrics = agentry_metrics::Metrics::new();
//! let subscriber = tracing_subscriber::registry().with(metrics.layer());
//! // tracing::subscriber::set_global_default(subscriber)?; then run agents.
//! # drop(subscriber);
//! let text = metrics.encode();
//! assert!(text.contains("agentry_runs_live 0\n"));
//! assert!(text.ends_with("# EOF\n"));
//! ```
//!
//! The layer carries its own filter (agentry's targets only), so an
//! embedder's log filter does not starve it; a *global* filter (one given to
//! the subscriber as a whole rather than to a layer) must let
//! `agentry::gen_ai=info` and `agentry::metrics=debug` through.
//!
//! # Metrics
//! Labels are bounded: a stop reason, a tool's registered name, an error code,
//! a configured model; never a run or task id (a service's clients choose
//! those).
//!
//! | name | type | labels | from |
//! |---|---|---|---|
//! | `agentry_runs_total` | counter | `stop_reason` | a run's span closing |
//! | `agentry_run_steps` | histogram | `stop_reason` | its steps |
//! | `agentry_run_duration_seconds` | histogram | `stop_reason` | its span's life in this process |
//! | `agentry_run_tokens_total` | counter | `stop_reason`, `type` (`input`, `output`, `cache_read`) | its spend |
//! | `agentry_run_cost_micros_total` | counter | `stop_reason` | its spend, in micro-units |
//! | `agentry_runs_live` | gauge | | runs started and not stopped |
//! | `agentry_runs_parked` | gauge | `awaiting` (`approval`, `decision`) | runs waiting for a human |
//! | `agentry_runs_sleeping` | gauge | | event- and time-driven runs waiting for their next event or tick |
//! | `agentry_runs_paused` | gauge | | runs paused by the user |
//! | `agentry_tool_calls_total` | counter | `tool`, `outcome` (`ok` or the error code) | a call's span closing |
//! | `agentry_tool_retries_total` | counter | `tool`, `code` | a retried attempt |
//! | `agentry_tool_duration_seconds` | histogram | `tool` | the call, less its wait for approval |
//! | `agentry_tool_approval_wait_seconds` | histogram | `tool` | the wait for a human |
//! | `agentry_model_requests_total` | counter | `provider`, `model`, `status` (`ok`, `unavailable`, `refused`, `invalid_response`) | a `chat` span closing |
//! | `agentry_model_request_duration_seconds` | histogram | `provider`, `model` | the request with its retries |
//! | `agentry_model_time_to_first_token_seconds` | histogram | `provider`, `model` | a streamed reply's first chunk |
//! | `agentry_model_tokens_total` | counter | `provider`, `model`, `type` | the reply's usage |
//!
//! A run's figures count when it stops, in the process it stops in; a run
//! left unfinished (a service shut down with a store, to resume later) leaves
//! the gauges but counts in no stop reason.

mod families;
mod layer;
mod record;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use prometheus_client::registry::Registry;
use tracing::Subscriber;
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::layer::Layer;
use tracing_subscriber::registry::LookupSpan;

pub use self::layer::MetricsLayer;

use self::families::Families;

/// The `Content-Type` of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

pub use self::record::STATUS_TARGET;

/// agentry's metrics: cheap to clone (every clone counts into the same
/// families).
#[derive(Clone)]
pub struct Metrics {
    families: Arc<Families>,
    registry: Arc<Registry>,
}

impl Metrics {
    /// Empty metrics, in a registry of their own.
    pub fn new() -> Metrics {
        let families = Arc::new(Families::default());
        let mut registry = Registry::default();
        families.register(&mut registry);
        Metrics {
            families,
            registry: Arc::new(registry),
        }
    }

    /// The layer that counts into these metrics, with its own filter:
    /// agentry's spans (`agentry::gen_ai`, INFO) and run-status events
    /// (`agentry::metrics`, DEBUG), nothing else.
    pub fn layer<S>(&self) -> Filtered<MetricsLayer, Targets, S>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
    {
        MetricsLayer::new(Arc::clone(&self.families)).with_filter(filter())
    }

    /// Adds these metrics to `registry` (an embedder's own, with its other
    /// metrics); they still count into [`Metrics::encode`]'s text too.
    pub fn register(&self, registry: &mut Registry) {
        self.families.register(registry);
    }

    /// The metrics in the OpenMetrics text format (ends `# EOF`); serve it
    /// with [`CONTENT_TYPE`].
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; an encoder error (none known) would
        // leave what was written so far, never panic.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// What the layer listens to.
fn filter() -> Targets {
    Targets::new()
        .with_target(agentry_telemetry::TARGET, tracing::Level::INFO)
        .with_target(STATUS_TARGET, tracing::Level::DEBUG)
}
