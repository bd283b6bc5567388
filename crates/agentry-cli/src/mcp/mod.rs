//! `agentry mcp`: agentry as an MCP server, so any MCP client can delegate
//! work to it. Tools: `run_task`, `get_run`, `list_runs`, `cancel_run`
//! (`tools.rs`, their errors in `error.rs`); the runs this server started
//! (`runs.rs`) and its store (`stored.rs`); inline tasks made into task
//! directories (`inline.rs`).
//!
//! Over stdio (the default) stdout is the protocol channel: nothing else may
//! print there, so logs and notices go to stderr; the parent process owns the
//! pipe, and with it the server. `--http ADDR` serves streamable HTTP at
//! `/mcp` instead, on a loopback address only, rmcp's Host check refusing
//! DNS-rebound names. The tools run tasks (and their commands) as this user
//! and loopback is open to every user of the machine, so every request must
//! carry the bearer token (`auth.rs`); sessions idle too long are closed
//! (`sessions.rs`).
//!
//! When the client goes away (stdin closes), on ctrl-c (SIGINT) or on SIGTERM
//! (systemd, `docker stop`), every run still going is aborted (`user_abort`)
//! and waited for, so no tool process and no unfinished store record is left
//! behind by the server's own exit.

mod args;
mod auth;
mod error;
mod inline;
mod runs;
mod sessions;
mod stored;
mod tools;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use crate::args::McpArgs;
use crate::store::{default_store, open_store};

use self::auth::{AuthError, Token, require_token};
use self::sessions::IdleSessions;

pub(crate) use runs::ServerRuns;
pub(crate) use tools::AgentryServer;

/// Why `agentry mcp` could not serve.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServeError {
    /// `--store FILE` cannot be opened (bad input, exit 2).
    #[error(transparent)]
    Store(#[from] agentry::RuntimeError),
    /// `--http` names an address other than a loopback one.
    #[error(
        "--http {0}: only a loopback address (127.0.0.1, [::1]) is served: the tools run tasks as this user"
    )]
    NotLoopback(SocketAddr),
    /// `--http` without a usable token and without `--no-auth` (exit 2).
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// Binding, accepting or the stdio transport failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The MCP session could not start (a broken initialize).
    #[error("the MCP session failed: {0}")]
    Session(String),
}

/// Serves until the client goes away (stdio), or SIGINT or SIGTERM (both).
pub(crate) async fn serve(args: McpArgs) -> Result<(), ServeError> {
    check_store(&args)?;
    let http = match args.http {
        // Refused first: no token makes another address safe.
        Some(addr) if !addr.ip().is_loopback() => return Err(ServeError::NotLoopback(addr)),
        Some(addr) => Some(HttpServing {
            addr,
            token: Token::for_http(&args)?,
            idle_timeout: args.session_idle_timeout,
        }),
        None => None,
    };
    // Installed before anything is served: from here on neither signal can
    // kill the process before its runs record their stop.
    let stop = StopSignals::listen().map_err(|source| ServeError::Io {
        what: "cannot listen for SIGINT and SIGTERM".into(),
        source,
    })?;
    let runs = Arc::new(ServerRuns::new(&args));
    let served = match http {
        Some(http) => serve_http(http, runs.clone(), stop).await,
        None => serve_stdio(runs.clone(), stop).await,
    };
    runs.abort_all().await;
    served
}

/// A `--store FILE` that cannot be used is refused at start (as `agentry run`
/// refuses it), not at the first `run_task`. The default store is checked
/// per run, where an unusable one is a warning.
fn check_store(args: &McpArgs) -> Result<(), ServeError> {
    if let Some(path) = &args.store {
        open_store(path)?;
    } else if !args.no_store {
        // Only the refusals of a planted path are fatal here, as for `run`.
        default_store()?;
    }
    Ok(())
}

async fn serve_stdio(runs: Arc<ServerRuns>, mut stop: StopSignals) -> Result<(), ServeError> {
    let server = AgentryServer::new(runs);
    let stdin = detached_stdin().map_err(|source| ServeError::Io {
        what: "cannot read stdin".into(),
        source,
    })?;
    let service = server
        .serve((stdin, tokio::io::stdout()))
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    tokio::select! {
        ended = service.waiting() => {
            ended.map_err(|e| ServeError::Session(e.to_string()))?;
        }
        signal = stop.next() => {
            eprintln!("agentry: mcp: {signal}; aborting the runs still going");
        }
    }
    Ok(())
}

/// What `--http` serves with.
struct HttpServing {
    addr: SocketAddr,
    /// `None` under `--no-auth`.
    token: Option<Token>,
    /// `--session-idle-timeout`.
    idle_timeout: Duration,
}

async fn serve_http(
    http: HttpServing,
    runs: Arc<ServerRuns>,
    mut signals: StopSignals,
) -> Result<(), ServeError> {
    let HttpServing {
        addr,
        token,
        idle_timeout,
    } = http;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Io {
            what: format!("--http {addr}: cannot listen"),
            source,
        })?;
    let bound = listener.local_addr().map_err(|source| ServeError::Io {
        what: format!("--http {addr}"),
        source,
    })?;
    let stop = CancellationToken::new();
    // rmcp's defaults accept only loopback Host names (DNS rebinding); a
    // browser page's cross-origin request is refused outright.
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .enforce_origin_validation();
    let sessions = Arc::new(IdleSessions::new(idle_timeout));
    tokio::spawn(sessions.clone().sweep(stop.child_token()));
    let service: StreamableHttpService<AgentryServer, IdleSessions> = StreamableHttpService::new(
        move || Ok(AgentryServer::new(runs.clone())),
        sessions,
        config,
    );
    let mut router = axum::Router::new().nest_service("/mcp", service);
    // Outermost: a request without the token is answered from its headers,
    // before rmcp reads or parses anything.
    match token {
        Some(token) => {
            router = router.layer(axum::middleware::from_fn_with_state(token, require_token));
        }
        None => eprintln!(
            "agentry: mcp: --no-auth: any local user can run tasks, and their commands, as this user"
        ),
    }
    // Tests and scripts read the address (a port 0 was just picked) here.
    eprintln!("agentry: mcp: listening on http://{bound}/mcp");
    let shutdown = stop.clone();
    tokio::spawn(async move {
        let signal = signals.next().await;
        eprintln!("agentry: mcp: {signal}; aborting the runs still going");
        shutdown.cancel();
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { stop.cancelled_owned().await })
        .await
        .map_err(|source| ServeError::Io {
            what: format!("--http {bound}"),
            source,
        })
}

/// Standard input, read on a thread of its own. A read on tokio's stdin runs
/// on the blocking pool and cannot be cancelled: stopped by a signal while
/// the client still holds stdin open, the server would wait for that read
/// forever when the runtime shuts down. This thread is simply left behind
/// when the process exits.
fn detached_stdin() -> std::io::Result<tokio::io::DuplexStream> {
    let (reader, mut writer) = tokio::io::duplex(STDIN_BUFFER);
    let runtime = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("agentry-mcp-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut chunk = vec![0u8; STDIN_BUFFER];
            loop {
                let n = match std::io::Read::read(&mut stdin, &mut chunk) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::debug!(error = %e, "stdin failed; ending the session");
                        break;
                    }
                };
                // The session is gone once the reader is dropped.
                if runtime.block_on(writer.write_all(&chunk[..n])).is_err() {
                    break;
                }
            }
            // Dropping the writer is the session's end of input.
        })?;
    Ok(reader)
}

/// Bytes of stdin in flight between its thread and the session.
const STDIN_BUFFER: usize = 64 * 1024;

/// SIGINT (ctrl-c) and SIGTERM (systemd, `docker stop`, `kill`): either stops
/// the server the same graceful way. The handlers are installed by
/// [`StopSignals::listen`] itself, not when first polled.
struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> std::io::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(StopSignals {})
        }
    }

    /// Waits for the first of the two; says which, for the notice.
    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "interrupted",
                _ = self.terminate.recv() => "terminated (SIGTERM)",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "interrupted"
        }
    }
}
