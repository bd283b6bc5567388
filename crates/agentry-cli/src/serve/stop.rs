//! How `agentry serve` stops: the first SIGTERM (or ctrl-c) drains the
//! service (`agentry_serve::App::drain`: 503 to new requests, running steps
//! finish within `[serve] drain_timeout`, the store flushed); a second one
//! stops what is left at once, as a crash would (resumable). Either way the
//! process exits 0: every run is in the store for the next start.

use std::time::Duration;

use agentry_serve::App;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// How long the HTTP side may take to close its connections once the runs
/// are let go (an event stream ends with its run).
const CLOSE_CONNECTIONS: Duration = Duration::from_secs(5);

/// SIGTERM and ctrl-c, each time one comes.
pub(super) struct StopSignals {
    term: Option<Signal>,
}

impl StopSignals {
    /// Listens from now on (a SIGTERM before this kills the process, as it
    /// would before the service is up).
    pub(super) fn new() -> StopSignals {
        StopSignals {
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// The next SIGTERM or ctrl-c.
    pub(super) async fn next(&mut self) {
        match &mut self.term {
            Some(term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
}

/// Serves on `listener` until the first signal, then drains (see the module
/// docs) and returns once the connections are closed.
pub(super) async fn serve_until_stopped(
    app: App,
    listener: tokio::net::TcpListener,
    mut signals: StopSignals,
    drain_timeout: Duration,
) {
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(app.clone().serve(listener, async {
        let _ = closed_rx.await;
    }));
    signals.next().await;
    eprintln!(
        "agentry: serve: draining: new requests are answered 503; running steps have {} to finish (a second SIGTERM stops them now)",
        humantime::format_duration(drain_timeout)
    );
    let drained = app.drain(drain_timeout, signals.next()).await;
    eprintln!(
        "agentry: serve: drained: {} runs parked between steps, {} stopped mid-step; the next start resumes them",
        drained.parked, drained.cut
    );
    let _ = closed_tx.send(());
    match tokio::time::timeout(CLOSE_CONNECTIONS, http).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => eprintln!("agentry: serve: {e}"),
        Ok(Err(e)) => eprintln!("agentry: serve: the HTTP side failed: {e}"),
        Err(_) => eprintln!("agentry: serve: connections still open after the drain were cut"),
    }
}
