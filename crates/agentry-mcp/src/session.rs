//! One connection to a server: for stdio the child (in its own process group)
//! and its captured stderr, the rmcp session over its pipes; for HTTP the
//! streamable-HTTP session. Made by [`connect`], bounded by the start's
//! deadline (the declaration's `startup_timeout`).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentry_protocol::ProcessGroupRecord;
use agentry_tools::expand_vars as expand;
use agentry_tools::proc::ServerProcess;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{PaginatedRequestParams, Tool as McpTool};
use rmcp::service::{ClientInitializeError, Peer, RoleClient, RunningService, serve_client};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::{McpServerConfig, McpTransport};
use crate::error::McpError;
use crate::framing::ReplyGuard;
use crate::handler::Client;
use crate::options::StartOptions;
use crate::tls;

/// How long a closing session waits for the rmcp task to stop.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// How long the stderr reader may drain after a failed start.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// The last `cap` bytes a server wrote on stderr.
#[derive(Debug)]
pub(crate) struct StderrTail {
    buf: Mutex<VecDeque<u8>>,
    cap: usize,
}

impl StderrTail {
    fn new(cap: usize) -> Arc<Self> {
        Arc::new(StderrTail {
            buf: Mutex::new(VecDeque::with_capacity(cap.min(64 * 1024))),
            cap,
        })
    }

    fn push(&self, bytes: &[u8]) {
        let mut buf = self.buf.lock().unwrap_or_else(PoisonError::into_inner);
        buf.extend(bytes);
        let excess = buf.len().saturating_sub(self.cap);
        buf.drain(..excess);
    }

    /// What was kept, as lossy UTF-8.
    pub(crate) fn text(&self) -> String {
        let buf = self.buf.lock().unwrap_or_else(PoisonError::into_inner);
        let (a, b) = buf.as_slices();
        String::from_utf8_lossy(&[a, b].concat()).into_owned()
    }
}

/// A live connection.
pub(crate) struct Session {
    pub(crate) service: RunningService<RoleClient, Client>,
    /// The stdio server's process group (none for HTTP).
    process: Option<ServerProcess>,
    stderr: Option<(Arc<StderrTail>, JoinHandle<()>)>,
    /// Set by a call whose request met a transport error: an HTTP server that
    /// went away leaves the session looking open, so the next call must
    /// reconnect rather than fail the same way.
    pub(crate) broken: Arc<AtomicBool>,
}

impl Session {
    fn new(
        service: RunningService<RoleClient, Client>,
        process: Option<ServerProcess>,
        stderr: Option<(Arc<StderrTail>, JoinHandle<()>)>,
    ) -> Self {
        Session {
            service,
            process,
            stderr,
            broken: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the server can still take a call: its process runs and the
    /// session is open.
    pub(crate) fn alive(&mut self) -> bool {
        let exited = self.process.as_mut().is_some_and(ServerProcess::has_exited);
        !exited
            && !self.broken.load(Ordering::SeqCst)
            && !self.service.is_closed()
            && !self.service.peer().is_transport_closed()
    }

    pub(crate) fn record(&self) -> Option<ProcessGroupRecord> {
        self.process.as_ref().map(|p| p.record().clone())
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(ServerProcess::pid)
    }

    /// What the server printed on stderr so far (empty for HTTP).
    pub(crate) fn stderr(&self) -> String {
        self.stderr
            .as_ref()
            .map_or_else(String::new, |(t, _)| t.text())
    }

    /// Ends the session: closes the connection (a stdio server sees its stdin
    /// close), then SIGTERM the group and SIGKILL it after `grace`.
    pub(crate) async fn close(mut self, grace: Duration) {
        let token = self.service.cancellation_token();
        token.cancel();
        let _ = tokio::time::timeout(CLOSE_WAIT, self.service.cancel()).await;
        if let Some(process) = self.process.as_mut() {
            process.terminate(grace).await;
        }
    }
}

/// A process being started and its stderr, until the session is up.
struct Spawned {
    process: ServerProcess,
    tail: Arc<StderrTail>,
    reader: JoinHandle<()>,
}

/// Connects to `config`'s server and lists its tools (every page, at most
/// `max_tools`), all before `deadline`. On failure nothing is left running.
pub(crate) async fn connect(
    config: &McpServerConfig,
    options: &StartOptions,
    client: Client,
    deadline: Instant,
) -> Result<(Session, Vec<McpTool>), McpError> {
    match &config.transport {
        McpTransport::Stdio { command, env } => {
            connect_stdio(config, options, client, command, env, deadline).await
        }
        McpTransport::Http {
            url,
            headers,
            ca_cert,
        } => {
            let transport = http_transport(config, url, headers, ca_cert.as_deref())?;
            let up = handshake(client, transport, config.max_tools);
            match tokio::time::timeout_at(deadline, up).await {
                Ok(result) => result.map_err(|f| f.into_error(config, String::new())),
                Err(_) => Err(timed_out(config, String::new())),
            }
        }
    }
}

/// The start did not finish within `config`'s `startup_timeout`.
pub(crate) fn timed_out(config: &McpServerConfig, stderr: String) -> McpError {
    McpError::StartupTimeout {
        server: config.name.clone(),
        timeout_ms: millis(config.startup_timeout),
        stderr,
    }
}

async fn connect_stdio(
    config: &McpServerConfig,
    options: &StartOptions,
    client: Client,
    command: &[String],
    env: &BTreeMap<String, String>,
    deadline: Instant,
) -> Result<(Session, Vec<McpTool>), McpError> {
    let mut spawned = spawn(config, options, command, env)?;
    let (Some(stdout), Some(stdin)) = (spawned.process.take_stdout(), spawned.process.take_stdin())
    else {
        return Err(McpError::Config {
            server: config.name.clone(),
            reason: "the server's pipes were not set up".into(),
        });
    };
    let up = async {
        let stdout = ReplyGuard::new(stdout, Arc::clone(&client.server));
        let service = serve_client(client, (stdout, stdin))
            .await
            .map_err(|e| Failure::Initialize(e.to_string()))?;
        let tools = list_tools(service.peer(), config.max_tools)
            .await
            .map_err(Failure::List)?;
        Ok::<_, Failure>((service, tools))
    };
    let outcome = tokio::time::timeout_at(deadline, up).await;
    match outcome {
        Ok(Ok((service, tools))) => Ok((
            Session::new(
                service,
                Some(spawned.process),
                Some((spawned.tail, spawned.reader)),
            ),
            tools,
        )),
        Ok(Err(failure)) => {
            let stderr = spawned.fail().await;
            Err(failure.into_error(config, stderr))
        }
        Err(_) => {
            let stderr = spawned.fail().await;
            Err(timed_out(config, stderr))
        }
    }
}

impl Spawned {
    /// Kills the group and returns what it printed on stderr.
    async fn fail(mut self) -> String {
        self.process.terminate(Duration::from_millis(100)).await;
        // The pipe closes with the group; the reader then has it all.
        let _ = tokio::time::timeout(STDERR_DRAIN, &mut self.reader).await;
        self.reader.abort();
        self.tail.text()
    }
}

/// Starts the stdio server: its own group, a cleared environment with the
/// allowlist's host values and the declaration's `env`, in the run's workdir.
fn spawn(
    config: &McpServerConfig,
    options: &StartOptions,
    command: &[String],
    env: &BTreeMap<String, String>,
) -> Result<Spawned, McpError> {
    let program = command.first().cloned().unwrap_or_default();
    let mut vars: Vec<(String, OsString)> = options
        .env_allowlist
        .iter()
        .filter(|name| !env.contains_key(*name))
        .filter_map(|name| std::env::var_os(name).map(|v| (name.clone(), v)))
        .collect();
    vars.extend(env.iter().map(|(k, v)| (k.clone(), OsString::from(v))));
    let sandbox = match &options.sandbox {
        Some(sandboxes) => Some(
            sandboxes
                .sandbox(&config.sandbox.clone().unwrap_or_default())
                .and_then(|sandbox| sandbox.call())
                .map_err(|source| McpError::Sandbox {
                    server: config.name.clone(),
                    source,
                })?,
        ),
        None => None,
    };
    let mut process =
        ServerProcess::spawn(command, vars, &options.workdir, sandbox).map_err(|source| {
            McpError::Spawn {
                server: config.name.clone(),
                program,
                source,
            }
        })?;
    let tail = StderrTail::new(options.stderr_cap);
    let reader = match process.take_stderr() {
        Some(mut pipe) => {
            let tail = Arc::clone(&tail);
            tokio::spawn(async move {
                let mut chunk = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    tail.push(&chunk[..n]);
                }
            })
        }
        None => tokio::spawn(async {}),
    };
    Ok(Spawned {
        process,
        tail,
        reader,
    })
}

/// The streamable-HTTP transport, headers expanded, trusting the OS roots,
/// `SSL_CERT_FILE`'s and `ca_cert`'s CAs.
fn http_transport(
    config: &McpServerConfig,
    url: &str,
    headers: &BTreeMap<String, String>,
    ca_cert: Option<&Path>,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    let headers = expand_headers(&config.name, headers, |var| std::env::var(var).ok())?;
    let http = tls::http_client(&config.name, url, ca_cert)?;
    let transport = StreamableHttpClientTransport::with_client(
        http,
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(headers),
    );
    Ok(transport)
}

/// Why a started server did not get through the handshake.
enum Failure {
    Initialize(String),
    List(ListFailure),
    /// The HTTPS handshake under `initialize` failed: the TLS library's words.
    Tls(String),
}

impl Failure {
    fn into_error(self, config: &McpServerConfig, stderr: String) -> McpError {
        let (stage, reason) = match self {
            Failure::Initialize(r) => ("initialize", r),
            Failure::List(ListFailure::Request(r)) => ("tools/list", r),
            Failure::List(ListFailure::TooMany { listed }) => {
                return McpError::TooManyTools {
                    server: config.name.clone(),
                    listed,
                    cap: config.max_tools,
                };
            }
            Failure::Tls(reason) => {
                let url = match &config.transport {
                    McpTransport::Http { url, .. } => url.clone(),
                    McpTransport::Stdio { .. } => String::new(),
                };
                return McpError::Tls {
                    server: config.name.clone(),
                    url,
                    reason,
                };
            }
        };
        McpError::Handshake {
            server: config.name.clone(),
            stage,
            reason,
            stderr,
        }
    }
}

async fn handshake(
    client: Client,
    transport: StreamableHttpClientTransport<reqwest::Client>,
    max_tools: usize,
) -> Result<(Session, Vec<McpTool>), Failure> {
    let service = serve_client(client, transport).await.map_err(|e| {
        // Only a transport error can be a refused handshake.
        let tls = if let ClientInitializeError::TransportError { error, .. } = &e {
            tls::tls_failure(error)
        } else {
            None
        };
        tls.map_or_else(|| Failure::Initialize(e.to_string()), Failure::Tls)
    })?;
    let tools = list_tools(service.peer(), max_tools)
        .await
        .map_err(Failure::List)?;
    Ok((Session::new(service, None, None), tools))
}

/// Why `tools/list` gave no listing.
pub(crate) enum ListFailure {
    /// A page's request failed.
    Request(String),
    /// More than `max_tools` tools were listed: the listing stopped there.
    TooMany {
        /// How many had been listed.
        listed: usize,
    },
}

impl std::fmt::Display for ListFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListFailure::Request(reason) => write!(f, "{reason}"),
            ListFailure::TooMany { listed } => {
                write!(f, "it listed {listed} tools, more than max_tools")
            }
        }
    }
}

/// Every page of `tools/list`, stopping at the first page that takes the
/// count past `max_tools` (each page is at most one message: 16 MiB).
pub(crate) async fn list_tools(
    peer: &Peer<RoleClient>,
    max_tools: usize,
) -> Result<Vec<McpTool>, ListFailure> {
    let mut tools = Vec::new();
    let mut cursor = None;
    loop {
        let params = PaginatedRequestParams::default().with_cursor(cursor);
        let page = peer
            .list_tools(Some(params))
            .await
            .map_err(|e| ListFailure::Request(e.to_string()))?;
        tools.extend(page.tools);
        if tools.len() > max_tools {
            return Err(ListFailure::TooMany {
                listed: tools.len(),
            });
        }
        cursor = page.next_cursor;
        if cursor.is_none() {
            return Ok(tools);
        }
    }
}

/// Header values with each `${VAR}` replaced by the variable's value
/// (`lookup`); a missing variable is an error naming header and variable.
pub(crate) fn expand_headers(
    server: &str,
    headers: &BTreeMap<String, String>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<HashMap<HeaderName, HeaderValue>, McpError> {
    let mut out = HashMap::new();
    for (name, template) in headers {
        let value = expand(template, &lookup).map_err(|var| McpError::MissingHeaderVar {
            server: server.to_string(),
            header: name.clone(),
            var,
        })?;
        let bad = |reason: String| McpError::BadHeader {
            server: server.to_string(),
            header: name.clone(),
            reason,
        };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad(e.to_string()))?;
        let mut value = HeaderValue::from_str(&value).map_err(|e| bad(e.to_string()))?;
        // Credentials stay out of debug output.
        value.set_sensitive(true);
        out.insert(header, value);
    }
    Ok(out)
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(var: &str) -> Option<String> {
        (var == "TOKEN").then(|| "s3cret".to_string())
    }

    #[test]
    fn header_values_expand_variables() {
        let headers = BTreeMap::from([
            ("Authorization".to_string(), "Bearer ${TOKEN}".to_string()),
            ("X-Plain".to_string(), "a $b ${c".to_string()),
        ]);
        let out = expand_headers("srv", &headers, lookup).unwrap();
        assert_eq!(
            out[&HeaderName::from_static("authorization")],
            "Bearer s3cret"
        );
        assert_eq!(out[&HeaderName::from_static("x-plain")], "a $b ${c");
    }

    #[test]
    fn a_missing_variable_names_header_and_variable() {
        let headers = BTreeMap::from([("X-Key".to_string(), "${NOPE}".to_string())]);
        let err = expand_headers("srv", &headers, lookup).unwrap_err();
        assert!(
            matches!(&err, McpError::MissingHeaderVar { header, var, .. } if header == "X-Key" && var == "NOPE")
        );
        let text = err.to_string();
        assert!(
            text.contains("srv") && text.contains("X-Key") && text.contains("NOPE"),
            "{text}"
        );
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_bytes() {
        let tail = StderrTail::new(5);
        tail.push(b"abc");
        tail.push(b"defg");
        assert_eq!(tail.text(), "cdefg");
    }
}
