//! Logging and span export: the log (fmt) layer on stderr, filtered by
//! `RUST_LOG` (default `warn`; `agentry serve` adds its own INFO lines) and
//! written through a redactor as a backstop, as text or (`agentry serve
//! --log-format json`) one JSON object a line; and with `--otlp` (or an
//! `OTEL_EXPORTER_OTLP_*ENDPOINT` variable, or serve.toml's `[telemetry]
//! otlp`) the OpenTelemetry layer, with its own filter so agentry's INFO
//! spans are exported whatever `RUST_LOG` says.

use std::io::IsTerminal;
use std::sync::Arc;

use agentry_redact::{RedactingMakeWriter, Redactor};
use agentry_telemetry::otlp::{self, OtlpOptions, TelemetryError, TelemetryGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::args::{Command, LogFormat};

/// The log of a command: its format and the filter when `RUST_LOG` is unset.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogSetup {
    pub(crate) format: LogFormat,
    pub(crate) default_filter: &'static str,
}

/// Warnings only: a command's output is its report, not its log.
const QUIET: &str = "warn";

/// A service's log also says which runs start, resume and stop.
const SERVICE: &str = "warn,agentry_serve=info";

/// The metrics `agentry serve` serves at `GET /metrics`, when serve.toml's
/// `[telemetry] metrics` asks for them: counted by a layer of the process's
/// subscriber, so made before it.
pub(crate) fn metrics_of(command: &Command) -> Option<agentry::metrics::Metrics> {
    let Command::Serve(args) = command else {
        return None;
    };
    let file = agentry_serve::ServeFile::load(args.config.as_ref()?).ok()?;
    file.telemetry.metrics.then(agentry::metrics::Metrics::new)
}

/// How `command` logs.
pub(crate) fn log_of(command: &Command) -> LogSetup {
    match command {
        Command::Serve(args) => LogSetup {
            format: args.log_format,
            default_filter: SERVICE,
        },
        Command::Run(_)
        | Command::Resume(_)
        | Command::Runs(_)
        | Command::Tools(_)
        | Command::Mcp(_)
        | Command::Stats(_)
        | Command::Replay(_)
        | Command::View(_)
        | Command::SandboxCheck(_) => LogSetup {
            format: LogFormat::Text,
            default_filter: QUIET,
        },
    }
}

/// Whether the command exports spans, and where to: `Some(None)` for the
/// endpoint the variables name.
pub(crate) fn otlp_of(command: &Command) -> Option<Option<String>> {
    let from_config;
    let flag = match command {
        Command::Run(args) => args.otlp.as_ref(),
        Command::Resume(args) => args.otlp.as_ref(),
        Command::Serve(args) => {
            // A serve.toml that cannot be read is reported by `serve` itself.
            from_config = args
                .config
                .as_ref()
                .and_then(|path| agentry_serve::ServeFile::load(path).ok())
                .and_then(|file| file.telemetry.otlp);
            from_config.as_ref()
        }
        Command::Runs(_)
        | Command::Tools(_)
        | Command::Mcp(_)
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
    log: LogSetup,
    metrics: Option<&agentry::metrics::Metrics>,
) -> Result<Option<TelemetryGuard>, TelemetryError> {
    // Logs go to stderr so that `--json` output on stdout stays one JSON object.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(log.default_filter));
    // Built-in detectors and the environment's secret values: a model server's
    // error that echoes a key is not printed with it.
    let redactor = Arc::new(Redactor::builder().build()?);
    let writer = RedactingMakeWriter::new(std::io::stderr, Arc::clone(&redactor));
    let fmt = match log.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(std::io::stderr().is_terminal())
            .with_filter(filter)
            .boxed(),
        // The redactor's markers hold no quote or backslash: a line stays JSON.
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
    };
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
