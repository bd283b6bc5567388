//! `w1 --otlp`: W1 again with its spans exported over OTLP/HTTP (the real
//! exporter, batch processor on its own thread) to a local receiver that
//! takes every request, so the figure is agentry's cost of making and
//! handing off spans, not a collector's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentry_telemetry::otlp::{self, OtlpOptions, TelemetryGuard};
use tracing_subscriber::layer::SubscriberExt;

use crate::harness::BenchResult;

/// A local OTLP/HTTP receiver: answers 200 to each `POST /v1/traces` and
/// counts the bytes it got, on a thread and runtime of its own.
pub struct Receiver {
    /// Its traces endpoint.
    pub url: String,
    /// Request bytes received.
    pub bytes: Arc<AtomicU64>,
}

impl Receiver {
    /// Binds 127.0.0.1 on a free port and serves.
    pub fn start() -> BenchResult<Receiver> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}/v1/traces", listener.local_addr()?);
        let bytes = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&bytes);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = axum::Router::new().route(
                    "/v1/traces",
                    axum::routing::post(move |body: axum::body::Bytes| {
                        counted.fetch_add(body.len() as u64, Ordering::Relaxed);
                        async { axum::http::StatusCode::OK }
                    }),
                );
                let _ = axum::serve(listener, app).await;
            });
        });
        Ok(Receiver { url, bytes })
    }
}

/// Installs the OpenTelemetry layer exporting to `url` as the process's
/// subscriber (from here on, every run's spans are made and exported).
pub fn install(url: &str) -> BenchResult<TelemetryGuard> {
    let (layer, guard) = otlp::init(OtlpOptions {
        endpoint: Some(url.to_string()),
        ..OtlpOptions::default()
    })?;
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
    Ok(guard)
}
