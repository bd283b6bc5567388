//! Embedding the HTTP service (`agentry-serve`) in a program of your own: one
//! runtime, many runs, driven over HTTP, with its limits as flags and no
//! tokens (loopback use; `agentry serve` is the product, with serve.toml's
//! agents, models and tenants).
//!
//! `cargo run --release --example service -- --addr 127.0.0.1:8080`
//!
//! Runs use the scripted policy (the script comes inline with each request); see
//! `docs/src/service.md` for the routes. This file only parses arguments (the
//! limits the service's security tests set), sets up logging (with the
//! metrics of `GET /metrics`), and turns ctrl-c (or SIGTERM) into a stop:
//! with a store, the drain of `agentry serve` (`App::drain`); without one,
//! every run aborted. The service itself is the `agentry_serve` crate.

use agentry_serve as app;

use std::net::SocketAddr;
use std::time::Duration;

use agentry::Runtime;
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// How long, after a shutdown signal, open connections (SSE streams of runs that
/// are stopping) get to finish before the process exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// With a store: how long running steps get to finish on a shutdown signal.
const DRAIN: Duration = Duration::from_secs(30);

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
    /// A host name the service answers to besides its bound address (NAME on any
    /// port, or NAME:PORT); repeatable. Other `Host` headers get 421.
    #[arg(long, value_name = "HOST")]
    allow_host: Vec<app::AllowedHost>,
    /// An origin (scheme://host[:port]) whose web pages may call the service;
    /// repeatable. Requests with any other `Origin` get 403. None by default.
    #[arg(long, value_name = "ORIGIN")]
    allow_origin: Vec<app::AllowedOrigin>,
    /// Largest body of a message, event, interrupt or decision, in bytes
    /// [default: 1 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_message_bytes: Option<u64>,
    /// Largest body of `POST /runs` (task, script and files), in bytes
    /// [default: 64 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_create_bytes: Option<u64>,
    /// Message, event and redirect bytes one run takes in over its life
    /// [default: 64 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_run_input_bytes: Option<u64>,
    /// Messages, events and redirects one run holds before its model has seen
    /// them; past it such a POST is 429 with Retry-After [default: 1024].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    inbox_capacity: Option<u64>,
    /// Time for a request's head to arrive, and for a connection to sit idle
    /// between requests [default: 10s].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    header_timeout: Option<Duration>,
    /// Time for a request's body to arrive after its head [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    body_timeout: Option<Duration>,
    /// Open connections at most; at the limit the oldest idle one is closed to
    /// make room [default: a quarter of the open-file limit, 16 to 1,024].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: Option<u32>,
    /// Open event streams (GET /runs/{id}/events) at most; past it the oldest
    /// stream that is caught up with its run (else the oldest) is ended to
    /// make room. Must be below --max-connections: the rest are kept for
    /// short requests [default: half of --max-connections].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_streams: Option<u32>,
    /// Open event streams of one run at most; past it that run's oldest
    /// caught-up stream (else its oldest) is ended [default: 16].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_streams_per_run: Option<u32>,
    /// Event history kept per live run for late clients, in bytes [default: 8 MiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    replay_bytes: Option<u64>,
    /// Event history kept per stopped run, in bytes [default: 256 KiB].
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    stopped_replay_bytes: Option<u64>,
    /// Stopped runs kept; the oldest beyond this are forgotten [default: 1000].
    #[arg(long, value_name = "N")]
    keep_stopped: Option<usize>,
}

impl Args {
    fn config(
        &self,
        metrics: agentry::metrics::Metrics,
    ) -> Result<app::ServiceConfig, app::ServeError> {
        // The same names and conversion as `agentry serve`'s `[serve]` keys.
        let limits = app::LimitSettings {
            max_message_bytes: self.max_message_bytes,
            max_create_bytes: self.max_create_bytes,
            max_run_input_bytes: self.max_run_input_bytes,
            inbox_capacity: self.inbox_capacity,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_connections: self.max_connections,
            max_streams: self.max_streams,
            max_streams_per_run: self.max_streams_per_run,
            replay_bytes: self.replay_bytes,
            stopped_replay_bytes: self.stopped_replay_bytes,
            keep_stopped: self.keep_stopped,
        }
        .limits()?;
        Ok(app::ServiceConfig {
            allow_hosts: self.allow_host.clone(),
            allow_origins: self.allow_origin.clone(),
            limits,
            metrics: Some(metrics),
            // Inline scripted tasks only, for anyone who can reach loopback.
            tokens: None,
            agents: None,
            // No shared limits: every run starts at once. No webhooks or
            // retention: the example keeps runs as the flags say.
            run_limits: app::RunLimits::default(),
            ..app::ServiceConfig::default()
        })
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let metrics = agentry::metrics::Metrics::new();
    let config = match args.config(metrics.clone()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("service: {e}");
            std::process::exit(2);
        }
    };
    init_logging(&metrics)?;
    // Process tools kill whole process groups; grandchildren orphaned by a kill
    // are re-parented to us (not init) so they are reaped, never left as zombies.
    if let Err(e) = agentry::tools::proc::reap_orphans_here() {
        tracing::warn!(error = %e, "cannot become a child subreaper; orphaned tool processes may linger as zombies");
    }

    // A full disk (or `ulimit -f`) fails a store commit, which stops that run
    // with an error naming the store; SIGXFSZ would kill the whole service.
    if let Err(e) = agentry::tools::proc::survive_file_size_limit() {
        tracing::warn!(error = %e, "cannot catch SIGXFSZ; a write past the file-size limit kills the service");
    }

    let mut runtime = Runtime::with_builtins()?;
    if let Some(path) = &args.store {
        let store = std::sync::Arc::new(agentry::SqliteStore::open(path)?);
        runtime = runtime.with_store(store, agentry::Durability::Strict)?;
    }
    let app = app::App::with_config(runtime.clone(), config);
    if args.store.is_some() {
        let resumed = app.resume_unfinished().await?;
        tracing::info!(count = resumed.len(), "resumed unfinished runs");
    }
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    tracing::info!(addr = %listener.local_addr()?, "listening");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.clone().serve(listener, async {
        let _ = stop_rx.await;
    }));

    shutdown_signal().await?;
    if args.store.is_some() {
        // Running steps finish; every run stays in the store to be resumed.
        let drained = app.drain(DRAIN, std::future::pending()).await;
        tracing::info!(parked = drained.parked, cut = drained.cut, "drained");
    } else {
        tracing::info!("shutting down: aborting every run");
        // Every run stops `user_abort`; each SSE stream then ends after its
        // `run_stopped`, which lets the graceful shutdown below complete.
        runtime.shutdown();
    }
    let _ = stop_tx.send(());
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(served) => served??,
        Err(_) => tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; exiting anyway"),
    }
    tracing::info!("stopped");
    Ok(())
}

/// Logs on stderr (`RUST_LOG`, default `info`), written through a redactor
/// (built-in detectors and the environment's secrets); `metrics` counted from
/// agentry's spans (`GET /metrics`), whatever `RUST_LOG` says.
fn init_logging(metrics: &agentry::metrics::Metrics) -> Result<(), Box<dyn std::error::Error>> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let redactor = std::sync::Arc::new(agentry_redact::Redactor::builder().build()?);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(agentry_redact::RedactingMakeWriter::new(
            std::io::stderr,
            redactor,
        ))
        .with_filter(filter);
    tracing_subscriber::registry()
        .with(fmt)
        .with(metrics.layer())
        .init();
    Ok(())
}

/// Why a duration flag was refused.
#[derive(Debug, thiserror::Error)]
enum DurationFlagError {
    /// Zero would refuse every request.
    #[error("must be more than zero")]
    Zero,
    /// Not a duration.
    #[error(transparent)]
    Parse(#[from] humantime::DurationError),
}

/// A duration flag ("10s"), more than zero.
fn positive_duration(text: &str) -> Result<Duration, DurationFlagError> {
    match humantime::parse_duration(text)? {
        d if d.is_zero() => Err(DurationFlagError::Zero),
        d => Ok(d),
    }
}

/// Ctrl-c, or SIGTERM (what service managers and containers send).
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        got = tokio::signal::ctrl_c() => got,
        _ = term.recv() => Ok(()),
    }
}
