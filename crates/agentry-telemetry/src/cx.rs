//! W3C `traceparent` in and out of `tracing` spans.

use opentelemetry::Context;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C `traceparent` of `span` (`00-<trace id>-<span id>-<flags>`), when
/// it has a valid OpenTelemetry context (the OpenTelemetry layer is installed
/// and wants it); `None` otherwise. Builds nothing for a disabled span.
pub fn traceparent(span: &Span) -> Option<String> {
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    sc.is_valid().then(|| format_traceparent(sc))
}

/// `00-<trace id>-<span id>-<flags>` in one pass: a tool call asks for its
/// span's traceparent on every call, and `format!` over the ids' `LowerHex`
/// cost more than the rest of the span.
fn format_traceparent(sc: &SpanContext) -> String {
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    out[35] = b'-';
    out[52] = b'-';
    // The lengths are exact (16, 8 and 1 bytes into 32, 16 and 2 digits).
    let ok = hex::encode_to_slice(sc.trace_id().to_bytes(), &mut out[3..35]).is_ok()
        && hex::encode_to_slice(sc.span_id().to_bytes(), &mut out[36..52]).is_ok()
        && hex::encode_to_slice([sc.trace_flags().to_u8()], &mut out[53..55]).is_ok();
    debug_assert!(ok);
    std::str::from_utf8(&out).map_or_else(|_| String::new(), str::to_owned)
}

/// The parts of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), if it
/// is one: version `00`, lower-case hex, neither id all zeros.
pub struct TraceParent<'a> {
    /// The trace id (32 hex digits).
    pub trace_id: &'a str,
    /// The parent span id (16 hex digits).
    pub span_id: &'a str,
    /// The trace flags (2 hex digits).
    pub flags: &'a str,
}

impl<'a> TraceParent<'a> {
    /// Parses `traceparent`; `None` when it is not a valid version-00 value.
    pub fn parse(traceparent: &'a str) -> Option<TraceParent<'a>> {
        let mut parts = traceparent.split('-');
        let (version, trace_id, span_id, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let nonzero = |s: &str| s.bytes().any(|b| b != b'0');
        let valid = version == "00"
            && parts.next().is_none()
            && hex(trace_id, 32)
            && hex(span_id, 16)
            && hex(flags, 2)
            && nonzero(trace_id)
            && nonzero(span_id);
        valid.then_some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }
}

/// The remote parent context a W3C `traceparent` names, if it is one
/// (see [`TraceParent::parse`]).
pub fn remote_context(traceparent: &str) -> Option<Context> {
    let parts = TraceParent::parse(traceparent)?;
    let trace_id = TraceId::from_hex(parts.trace_id).ok()?;
    let span_id = SpanId::from_hex(parts.span_id).ok()?;
    let flags = TraceFlags::new(u8::from_str_radix(parts.flags, 16).ok()?);
    let sc = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    sc.is_valid()
        .then(|| Context::new().with_remote_span_context(sc))
}

/// Makes the span a child of the remote span a W3C `traceparent` names. A
/// no-op for a disabled span, an invalid `traceparent`, or a span already
/// started; returns whether the parent was set.
pub fn set_parent(span: &Span, traceparent: &str) -> bool {
    if span.is_disabled() {
        return false;
    }
    match remote_context(traceparent) {
        Some(cx) => span.set_parent(cx).is_ok(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    use tracing_subscriber::layer::SubscriberExt;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trips_through_a_span() {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("t"));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(target: "agentry::gen_ai", "invoke_agent");
            assert!(set_parent(&span, PARENT));
            let tp = traceparent(&span).expect("a valid context");
            assert!(
                tp.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{tp}"
            );
            assert!(!tp.contains("00f067aa0ba902b7"), "the span's own id: {tp}");
            assert!(tp.ends_with("-01"), "{tp}");
        });
        let spans = exporter.get_finished_spans().expect("spans");
        assert_eq!(spans.len(), 1);
        assert_eq!(spans[0].parent_span_id.to_string(), "00f067aa0ba902b7");
    }

    #[test]
    fn the_traceparent_is_written_as_w3c_says() {
        let sc = SpanContext::new(
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("trace id"),
            SpanId::from_hex("00f067aa0ba902b7").expect("span id"),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let tp = format_traceparent(&sc);
        assert_eq!(
            tp,
            "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
        );
        assert!(TraceParent::parse(&tp).is_some());
        let unsampled = SpanContext::new(
            sc.trace_id(),
            sc.span_id(),
            TraceFlags::default(),
            true,
            TraceState::default(),
        );
        assert!(format_traceparent(&unsampled).ends_with("-00"));
    }

    #[test]
    fn without_a_subscriber_nothing_is_built() {
        let span = tracing::info_span!(target: "agentry::gen_ai", "invoke_agent");
        assert!(span.is_disabled());
        assert_eq!(traceparent(&span), None);
        assert!(!set_parent(&span, PARENT));
    }

    #[test]
    fn invalid_traceparents_are_refused() {
        assert!(remote_context(PARENT).is_some());
        for bad in [
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "garbage",
        ] {
            assert!(remote_context(bad).is_none(), "{bad}");
        }
    }
}
