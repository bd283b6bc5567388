//! The HTTP service (`agentry-serve`), driven over real HTTP: its very router
//! runs on a 127.0.0.1 listener and a real client talks to it, Server-Sent
//! Events included.

use agentry_serve as app;

mod errors;
mod inputs;
mod metrics;
mod redirect;
mod runs;
mod store;

use std::time::Duration;

use agentry::Runtime;
use agentry_test_support::TestError;
use serde_json::{Value, json};

/// Bound on any single wait for the service.
const WAIT: Duration = Duration::from_secs(10);

/// The service on an ephemeral 127.0.0.1 port; stopped (runs aborted, server
/// task ended) when dropped.
struct Service {
    client: ServiceClient,
    runtime: Runtime,
    server: tokio::task::JoinHandle<()>,
    /// A durable service leaves its runs in the store when it goes away.
    durable: bool,
}

impl Drop for Service {
    fn drop(&mut self) {
        if !self.durable {
            self.runtime.shutdown();
        }
        self.server.abort();
    }
}

/// The real service binary (`examples/service`, built by `cargo test` with the
/// examples) as a child process on a store, so that it can die for real: a
/// SIGKILL leaves nothing of it running.
struct ServiceProcess {
    child: std::process::Child,
    base: String,
    _tmp: Option<tempfile::TempDir>,
}

impl ServiceProcess {
    fn start(store: &std::path::Path) -> Result<ServiceProcess, TestError> {
        let mut command = std::process::Command::new(crate::suite::service_bin::binary()?);
        command.arg("--store").arg(store);
        // Runs' working directories go beside the store: a service started
        // again on it (after a kill) finds them, and the test's temp dir
        // takes them away.
        if let Some(dir) = store.parent() {
            command.env("TMPDIR", dir);
        }
        let spawned = crate::suite::service_bin::spawn(command, WAIT)?;
        Ok(ServiceProcess {
            child: spawned.child,
            base: format!("http://{}", spawned.addr),
            _tmp: spawned.tmp,
        })
    }

    /// SIGKILL, as a crash: the process and every run in it are gone.
    fn kill(mut self) -> Result<(), TestError> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status and JSON body (`Value::Null` when the body is not JSON).
#[derive(Debug)]
struct Reply {
    status: u16,
    body: Value,
}

impl Service {
    async fn start() -> Result<Service, TestError> {
        Service::start_on(None).await
    }

    /// With a store: runs are committed there, and the runs a previous service
    /// left unfinished are resumed before the service listens.
    async fn start_on(store: Option<&std::path::Path>) -> Result<Service, TestError> {
        Service::start_with(store, app::ServiceConfig::default()).await
    }

    /// [`Service::start_on`] with these limits.
    async fn start_with(
        store: Option<&std::path::Path>,
        config: app::ServiceConfig,
    ) -> Result<Service, TestError> {
        let mut runtime = Runtime::with_builtins()?;
        if let Some(path) = store {
            let store = std::sync::Arc::new(agentry::SqliteStore::open(path)?);
            runtime = runtime.with_store(store, agentry::Durability::Strict)?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let app = app::App::with_config(runtime.clone(), config);
        if store.is_some() {
            app.resume_unfinished().await?;
        }
        // The service's own accept loop, as main.rs runs it.
        let server = tokio::spawn(async move {
            let _ = app.serve(listener, std::future::pending()).await;
        });
        Ok(Service {
            client: Service::client_of(&base)?,
            runtime,
            server,
            durable: store.is_some(),
        })
    }

    /// A client of a service running elsewhere (a [`ServiceProcess`]).
    fn client_of(base: &str) -> Result<ServiceClient, TestError> {
        // reqwest has no crypto provider of its own in this workspace.
        agentry_models::install_crypto_provider();
        Ok(ServiceClient {
            base: base.to_string(),
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(WAIT)
                .build()?,
        })
    }
}

impl std::ops::Deref for Service {
    type Target = ServiceClient;

    fn deref(&self) -> &ServiceClient {
        &self.client
    }
}

/// A real HTTP client of one service, by its base address.
struct ServiceClient {
    base: String,
    client: reqwest::Client,
}

impl ServiceClient {
    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<String>,
    ) -> Result<Reply, TestError> {
        let method = reqwest::Method::from_bytes(method.as_bytes())?;
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        let text = response.text().await?;
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Reply { status, body })
    }

    async fn get(&self, path: &str) -> Result<Reply, TestError> {
        self.send("GET", path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Result<Reply, TestError> {
        self.send("POST", path, Some(body.to_string())).await
    }

    /// Creates a run; panics unless the service answers 201.
    async fn create(&self, task: Value) -> Result<String, TestError> {
        let reply = self.post("/runs", task).await?;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        Ok(reply.body["run_id"]
            .as_str()
            .ok_or("no run_id")?
            .to_string())
    }

    async fn events(&self, run_id: &str) -> Result<SseStream, TestError> {
        // The event stream may outlive the client's per-request timeout.
        let request = self
            .client
            .get(format!("{}/runs/{run_id}/events", self.base))
            .timeout(Duration::from_secs(60));
        let response = ok_of_type(request, "text/event-stream").await?;
        Ok(SseStream {
            response,
            buffer: String::new(),
        })
    }
}

/// Sends `request`; asserts a 200 with exactly this content type.
async fn ok_of_type(
    request: reqwest::RequestBuilder,
    content_type: &str,
) -> Result<reqwest::Response, TestError> {
    let response = request.send().await?;
    assert_eq!(response.status().as_u16(), 200);
    let got = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(got, content_type);
    Ok(response)
}

/// One Server-Sent Event.
#[derive(Debug, Clone)]
struct Sse {
    event: String,
    id: u64,
    data: Value,
}

/// An open SSE response, parsed event by event.
struct SseStream {
    response: reqwest::Response,
    buffer: String,
}

impl SseStream {
    /// The next event, or `None` when the stream ended. Errors after [`WAIT`].
    async fn next(&mut self) -> Result<Option<Sse>, TestError> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_sse(&block)? {
                    return Ok(Some(event));
                }
                continue; // a keep-alive comment
            }
            let chunk = tokio::time::timeout(WAIT, self.response.chunk())
                .await
                .map_err(|_| "no SSE event within the wait")??;
            match chunk {
                Some(bytes) => self.buffer.push_str(std::str::from_utf8(&bytes)?),
                None => return Ok(None),
            }
        }
    }

    /// Reads events up to and including the first `name`; returns them all.
    async fn until(&mut self, name: &str) -> Result<Vec<Sse>, TestError> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await? {
            let found = event.event == name;
            seen.push(event);
            if found {
                return Ok(seen);
            }
        }
        Err(format!("the stream ended before {name}: {:?}", names(&seen)).into())
    }

    /// Reads to the end of the stream.
    async fn rest(&mut self) -> Result<Vec<Sse>, TestError> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await? {
            seen.push(event);
        }
        Ok(seen)
    }
}

fn parse_sse(block: &str) -> Result<Option<Sse>, TestError> {
    let (mut event, mut id, mut data) = (None, None, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event: ") {
            event = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.parse()?);
        } else if let Some(v) = line.strip_prefix("data: ") {
            data.push_str(v);
        }
    }
    match (event, id) {
        (Some(event), Some(id)) => Ok(Some(Sse {
            event,
            id,
            data: serde_json::from_str(&data)?,
        })),
        _ => Ok(None),
    }
}

fn names(events: &[Sse]) -> Vec<&str> {
    events.iter().map(|e| e.event.as_str()).collect()
}

fn finish(id: &str, answer: &str) -> Value {
    json!({"tool_calls": [{"id": id, "name": "task.finish", "arguments": {"answer": answer}}]})
}

/// The seed task (examples/sum), inline.
fn sum_task() -> Value {
    json!({
        "goal": "Read numbers.txt, sum the numbers, write the sum to sum.txt",
        "budget": {"max_steps": 8, "max_tool_calls": 6, "deadline": "30s"},
        "tools": {"grant": ["fs.read", "fs.write"]},
        "accept": [{"file": "sum.txt", "equals": "23"}, {"command": "test -s sum.txt"}],
        "files": {"numbers.txt": "3\n5\n7\n8\n"},
        "script": {"turns": [
            {"tool_calls": [{"id": "read", "name": "fs.read", "arguments": {"path": "numbers.txt"}}]},
            {"tool_calls": [{"id": "write", "name": "fs.write", "arguments": {"path": "sum.txt", "content": "23"}}]},
            finish("finish", "sum=23"),
        ]}
    })
}

/// fs.write needs a human: the run parks on the call `write`.
fn approval_task() -> Value {
    json!({
        "goal": "write 23 to sum.txt, once a human agrees",
        "budget": {"max_steps": 5, "deadline": "30s"},
        "tools": {"grant": ["fs.read", "fs.write"], "approve": ["fs.write"], "approval_timeout": "20s"},
        "script": {"turns": [
            {"tool_calls": [{"id": "write", "name": "fs.write", "arguments": {"path": "sum.txt", "content": "23"}}]},
            finish("finish", "wrote it, or tried"),
        ]}
    })
}

/// An event-driven agent that answers "ok" to every input and never finishes.
fn listener_task() -> Value {
    json!({
        "goal": "answer every message",
        "budget": {"max_steps": 100, "deadline": "60s"},
        "driver": {"mode": "events"},
        // Every reply is the same; that is not being stuck.
        "progress": {"window": 0},
        "script": {"turns": [{"final": "ok"}], "then": "repeat_last"}
    })
}
