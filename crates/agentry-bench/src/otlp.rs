//! `w1 --otlp`: W1 again with its spans exported over OTLP/HTTP (the real
//! exporter, batch processor on its own thread) to a local receiver that
//! takes every request, so the figure is agentry's cost of making and
//! handing off spans, not a collector's.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentry_telemetry::otlp::{self, OtelLayer, OtlpOptions, TelemetryGuard};
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;

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

/// The exporting subscriber, installed once for the process, with its layer
/// switchable: off, the layer is out of the subscriber (its level hint is
/// OFF, so every span is disabled at its callsite, as with no subscriber);
/// on, every run's spans are made and exported. Switching lets the bench
/// alternate runs without and with spans, so a busy machine slows both alike.
pub struct Exporting {
    guard: TelemetryGuard,
    handle: reload::Handle<Option<OtelLayer<Registry>>, Registry>,
    /// The layer while it is switched off.
    parked: Option<OtelLayer<Registry>>,
}

impl Exporting {
    /// Installs the OpenTelemetry layer exporting to `url` as the process's
    /// subscriber, switched on.
    pub fn install(url: &str) -> BenchResult<Exporting> {
        let (layer, guard) = otlp::init(OtlpOptions {
            endpoint: Some(url.to_string()),
            ..OtlpOptions::default()
        })?;
        // Registered while present, so its per-layer filter has its id when
        // it comes back.
        let (reloadable, handle) = reload::Layer::new(Some(layer));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(reloadable))?;
        Ok(Exporting {
            guard,
            handle,
            parked: None,
        })
    }

    /// Switches the spans on or off (a no-op when already so).
    pub fn set(&mut self, on: bool) -> BenchResult<()> {
        if on == self.parked.is_none() {
            return Ok(());
        }
        let parked = &mut self.parked;
        self.handle
            .modify(|layer| std::mem::swap(layer, parked))
            .map_err(|e| format!("switching spans: {e}").into())
    }

    /// Exports what is queued and stops; the spans lost in all.
    pub fn shutdown(self) -> u64 {
        self.guard.shutdown()
    }
}
