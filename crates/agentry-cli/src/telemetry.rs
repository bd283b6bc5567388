//! Logging and span export: the log (fmt) layer on stderr, filtered by
//! `RUST_LOG` (default `warn`) and written through a redactor as a backstop,
//! and with `--otlp` (or an `OTEL_EXPORTER_OTLP_*ENDPOINT` variable) the
//! OpenTelemetry layer, with its own filter so agentry's INFO spans are
//! exported whatever `RUST_LOG` says.

use std::io::IsTerminal;
use std::sync::Arc;

use agentry_redact::{RedactingMakeWriter, Redactor};
use agentry_telemetry::otlp::{self, OtlpOptions, TelemetryError, TelemetryGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::args::Command;

/// Whether the command exports spans, and where to: `Some(None)` for the
/// endpoint the variables name.
pub(crate) fn otlp_of(command: &Command) -> Option<Option<String>> {
    let flag = match command {
        Command::Run(args) => args.otlp.as_ref(),
        Command::Resume(args) => args.otlp.as_ref(),
        Command::Runs(_)
        | Command::Tools(_)
        | Command::Mcp(_)
        | Command::Serve(_)
        | Command::Stats(_)
        | Command::Replay(_)
        | Command::View(_)
        | Command::SandboxCheck(_) => return None,
    };
    match flag {
        Some(url) if url.is_empty() => Some(None),
        Some(url) => Some(Some(url.clone())),
        None if otlp::endpoint_from_env() => Some(None),
        None => None,
    }
}

/// Installs the process's subscriber, with `metrics`' layer when given
/// (`agentry serve`'s `GET /metrics`); the export guard when spans are
/// exported (flushed and shut down when dropped).
pub(crate) fn init(
    otlp: Option<Option<String>>,
    metrics: Option<&agentry::metrics::Metrics>,
) -> Result<Option<TelemetryGuard>, TelemetryError> {
    // Logs go to stderr so that `--json` output on stdout stays one JSON object.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    // Built-in detectors and the environment's secret values: a model server's
    // error that echoes a key is not printed with it.
    let redactor = Arc::new(Redactor::builder().build()?);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(RedactingMakeWriter::new(
            std::io::stderr,
            Arc::clone(&redactor),
        ))
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    let registry = tracing_subscriber::registry()
        .with(fmt)
        .with(metrics.map(agentry::metrics::Metrics::layer));
    let Some(endpoint) = otlp else {
        registry.init();
        return Ok(None);
    };
    let options = OtlpOptions {
        endpoint,
        service_name: None,
        redactor: Some(redactor),
    };
    let (layer, guard) = otlp::init(options)?;
    registry.with(layer).init();
    Ok(Some(guard))
}

/// Flushes and stops the export; says how many spans were lost, if any.
pub(crate) fn shut_down(guard: Option<TelemetryGuard>) {
    let Some(guard) = guard else { return };
    let dropped = guard.shutdown();
    if dropped > 0 {
        eprintln!(
            "agentry: {dropped} spans could not be exported (the OTLP collector did not take them)"
        );
    }
}
