//! agentry as an HTTP service: one runtime, many runs, driven over HTTP.
//!
//! `cargo run --release --example service -- --addr 127.0.0.1:8080`
//!
//! Runs use the scripted policy (the script comes inline with each request); see
//! `docs/service.md` for the routes and curl examples. This file only parses
//! arguments, sets up logging, and turns ctrl-c (or SIGTERM) into a graceful
//! shutdown; the service itself is in `app.rs`.

mod app;

use std::net::SocketAddr;
use std::time::Duration;

use agentry::Runtime;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// How long, after a shutdown signal, open connections (SSE streams of runs that
/// are stopping) get to finish before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, Parser)]
#[command(name = "service", about = "An HTTP service running agentry tasks.")]
struct Args {
    /// The address to listen on, exactly as given.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Commit every run to this SQLite store; on start, resume the runs a
    /// previous process left unfinished, and on shutdown leave runs to be resumed
    /// rather than aborting them.
    #[arg(long, value_name = "FILE")]
    store: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    // Process tools kill whole process groups; grandchildren orphaned by a kill
    // are re-parented to us (not init) so they are reaped, never left as zombies.
    if let Err(e) = agentry::tools::proc::reap_orphans_here() {
        tracing::warn!(error = %e, "cannot become a child subreaper; orphaned tool processes may linger as zombies");
    }

    let mut runtime = Runtime::with_builtins()?;
    if let Some(path) = &args.store {
        let store = std::sync::Arc::new(agentry::SqliteStore::open(path)?);
        runtime = runtime.with_store(store, agentry::Durability::Strict)?;
    }
    let app = app::App::new(runtime.clone());
    if args.store.is_some() {
        let resumed = app.resume_unfinished().await?;
        tracing::info!(count = resumed.len(), "resumed unfinished runs");
    }
    let router = app.router();
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "listening");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = stop_rx.await;
            })
            .await
    });

    shutdown_signal().await?;
    if args.store.is_some() {
        // Durable runs are left as they are: the next start resumes them.
        tracing::info!("shutting down: runs stay in the store to be resumed");
        let _ = stop_tx.send(());
        server.abort();
        return Ok(());
    }
    tracing::info!("shutting down: aborting every run");
    // Every run stops `user_abort`; each SSE stream then ends after its
    // `run_stopped`, which lets the graceful shutdown below complete.
    runtime.shutdown();
    let _ = stop_tx.send(());
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(served) => served??,
        Err(_) => tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; exiting anyway"),
    }
    tracing::info!("stopped");
    Ok(())
}

/// Ctrl-c, or SIGTERM (what service managers and containers send).
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        got = tokio::signal::ctrl_c() => got,
        _ = term.recv() => Ok(()),
    }
}
