//! OpenTelemetry GenAI spans for agentry.
//!
//! agentry's spans come from [`tracing`] (an embedder's own subscriber sees
//! them) with the names and attributes of the OpenTelemetry GenAI semantic
//! conventions ([`fields`]); `tracing-opentelemetry` bridges them to
//! OpenTelemetry. This crate's default part is light (the `tracing` bridge and
//! the OpenTelemetry API, no SDK): the attribute names and the W3C
//! `traceparent` of a span, in ([`set_parent`]) and out ([`traceparent`]).
//! The `otlp` feature adds the SDK and the OTLP/HTTP exporter for binaries
//! (`otlp::init`).
//!
//! Every span is created at [`TARGET`], level INFO, so with no subscriber (or
//! one that does not want them) a span is disabled and costs a callsite check:
//! callers build names and values only when `!span.is_disabled()`.
//!
//! # Layout
//! - [`fields`]: the attribute names (the GenAI conventions, and agentry's own).
//! - [`cx`]: the W3C `traceparent` in and out of `tracing` spans.
//! - [`future`]: [`InSpan`], a future polled inside a borrowed span.
//! - `otlp` (feature `otlp`): the tracer provider, its batch exporter on a
//!   thread of its own, and the layer that feeds it, redacting string
//!   attributes on the way out.

pub mod cx;
pub mod fields;
pub mod future;
#[cfg(feature = "otlp")]
pub mod otlp;

pub use cx::{TraceParent, remote_context, set_parent, traceparent};
pub use future::{InSpan, in_span};

/// The `tracing` target of every agentry span.
pub const TARGET: &str = "agentry::gen_ai";

/// A count as a span attribute: OpenTelemetry integers are `i64`, and the
/// `tracing` bridge would record a `u64` as text. Saturates.
pub fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
