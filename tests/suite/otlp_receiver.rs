//! An OTLP/HTTP receiver on 127.0.0.1 that decodes what the real exporter
//! sends (`ExportTraceServiceRequest`, protobuf) and keeps every span: shared
//! by `tests/otel.rs` and the all-sinks redaction test
//! (`suite::security::redaction`).

use std::sync::{Arc, Mutex, PoisonError};

use agentry_test_support::TestError;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// The receiver, on a runtime of its own (the exporter's flush blocks the
/// test's thread).
pub struct Receiver {
    pub url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    _thread: std::thread::JoinHandle<()>,
}

impl Receiver {
    pub fn start() -> Result<Receiver, TestError> {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}/v1/traces", listener.local_addr()?);
        let kept = Arc::clone(&spans);
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = axum::Router::new().route(
                    "/v1/traces",
                    axum::routing::post(move |body: axum::body::Bytes| {
                        let kept = Arc::clone(&kept);
                        async move {
                            match ExportTraceServiceRequest::decode(body) {
                                Ok(request) => {
                                    let mut kept =
                                        kept.lock().unwrap_or_else(PoisonError::into_inner);
                                    for rs in request.resource_spans {
                                        for ss in rs.scope_spans {
                                            kept.extend(ss.spans);
                                        }
                                    }
                                    axum::http::StatusCode::OK
                                }
                                Err(_) => axum::http::StatusCode::BAD_REQUEST,
                            }
                        }
                    }),
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        Ok(Receiver {
            url,
            spans,
            _thread: thread,
        })
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Every piece of text a span carries to the collector, each named by where
/// it is: its name, each attribute (key and string values, arrays and
/// key-value lists included), each event's name and attributes, its status
/// message.
pub fn texts(span: &Span) -> Vec<(String, String)> {
    let mut out = vec![("name".to_string(), span.name.clone())];
    for kv in &span.attributes {
        out.push((format!("attribute key {}", kv.key), kv.key.clone()));
        strings_of(
            kv.value.as_ref(),
            &format!("attribute {}", kv.key),
            &mut out,
        );
    }
    for event in &span.events {
        out.push((format!("event {:?}", event.name), event.name.clone()));
        for kv in &event.attributes {
            let at = format!("event {:?} attribute {}", event.name, kv.key);
            strings_of(kv.value.as_ref(), &at, &mut out);
        }
    }
    if let Some(status) = &span.status {
        out.push(("status message".to_string(), status.message.clone()));
    }
    out
}

fn strings_of(value: Option<&AnyValue>, at: &str, out: &mut Vec<(String, String)>) {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => out.push((at.to_string(), s.clone())),
        Some(Value::ArrayValue(a)) => {
            for v in &a.values {
                strings_of(Some(v), at, out);
            }
        }
        Some(Value::KvlistValue(l)) => {
            for kv in &l.values {
                strings_of(kv.value.as_ref(), &format!("{at}.{}", kv.key), out);
            }
        }
        Some(Value::BytesValue(b)) => {
            out.push((at.to_string(), String::from_utf8_lossy(b).into_owned()));
        }
        Some(Value::BoolValue(_) | Value::IntValue(_) | Value::DoubleValue(_))
        | Some(Value::StringValueStrindex(_))
        | None => {}
    }
}
