//! The HTTP service example (`examples/service`), driven over real HTTP: its very
//! router runs on a 127.0.0.1 listener and a real client talks to it, Server-Sent
//! Events included.

// Examples cannot be imported, so the test compiles the example's service module
// itself; `main.rs` adds only arguments, logging and signals.
#[path = "../../examples/service/app.rs"]
mod app;

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
}

impl ServiceProcess {
    fn start(store: &std::path::Path) -> Result<ServiceProcess, TestError> {
        let mut command = std::process::Command::new(super::service_bin::binary()?);
        command.arg("--store").arg(store);
        let spawned = super::service_bin::spawn(command, WAIT)?;
        Ok(ServiceProcess {
            child: spawned.child,
            base: format!("http://{}", spawned.addr),
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
        let mut runtime = Runtime::with_builtins()?;
        if let Some(path) = store {
            let store = std::sync::Arc::new(agentry::SqliteStore::open(path)?);
            runtime = runtime.with_store(store, agentry::Durability::Strict)?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let app = app::App::new(runtime.clone());
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
        let response = self
            .client
            .get(format!("{}/runs/{run_id}/events", self.base))
            // The event stream may outlive the client's per-request timeout.
            .timeout(Duration::from_secs(60))
            .send()
            .await?;
        assert_eq!(response.status().as_u16(), 200);
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert_eq!(content_type, "text/event-stream");
        Ok(SseStream {
            response,
            buffer: String::new(),
        })
    }
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

/// A run created over HTTP streams every event from `step_started` to
/// `run_stopped` over SSE, and GET shows it stopped `done` with its outcome; a
/// client connecting after the stop still gets the whole history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_its_events_and_stops_done() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(sum_task()).await?;
    let events = service.events(&run_id).await?.rest().await?;

    let got = names(&events);
    assert_eq!(got.first(), Some(&"step_started"), "{got:?}");
    assert_eq!(got.last(), Some(&"run_stopped"), "{got:?}");
    assert_eq!(
        got.iter().filter(|n| **n == "step_started").count(),
        3,
        "{got:?}"
    );
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "ids are the sequence numbers, from 1, no gaps"
    );
    for e in &events {
        assert_eq!(e.data["seq"], e.id);
        assert_eq!(e.data["run_id"], run_id.as_str());
        assert_eq!(e.data["event"]["type"], e.event.as_str());
    }
    let stopped = events.last().ok_or("no events")?;
    assert_eq!(stopped.data["event"]["stop_reason"], "done");

    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.status, 200);
    assert_eq!(
        run.body,
        json!({
            "run_id": run_id,
            "status": "stopped",
            "steps": 3,
            "tool_calls": 3,
            "inputs": 0,
            "pending_approvals": [],
            "outcome": {
                "stop_reason": "done",
                "answer": "sum=23",
                "detail": "answer \"sum=23\" accepted: 2 checks passed",
                "steps": 3,
                "tool_calls": 3,
            }
        })
    );

    let late = service.events(&run_id).await?.rest().await?;
    assert_eq!(names(&late), got, "a late client replays the whole run");
    Ok(())
}

/// A call that needs approval parks the run (GET shows it, with the call); an
/// unknown call id is 404; approving runs the call and the run finishes `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs() -> Result<(), TestError> {
    let service = Service::start().await?;
    let mut task = approval_task();
    task["accept"] = json!([{"file": "sum.txt", "equals": "23"}]);
    let run_id = service.create(task).await?;
    let mut stream = service.events(&run_id).await?;
    let parked = stream.until("awaiting_approval").await?;
    let parked = parked.last().ok_or("no event")?;
    assert_eq!(parked.data["event"]["call"]["id"], "write");

    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.body["status"], "awaiting_approval", "{:?}", run.body);
    let pending = run.body["pending_approvals"]
        .as_array()
        .ok_or("no pending list")?;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["call"]["id"], "write");
    assert_eq!(pending[0]["call"]["name"], "fs.write");

    let unknown = service
        .post(
            &format!("/runs/{run_id}/approvals/nope"),
            json!({"decision": "approve"}),
        )
        .await?;
    assert_eq!(unknown.status, 404, "{:?}", unknown.body);
    assert!(
        unknown.body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("nope"),
        "{:?}",
        unknown.body
    );

    let approved = service
        .post(
            &format!("/runs/{run_id}/approvals/write"),
            json!({"decision": "approve"}),
        )
        .await?;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert!(
        approved.body["seq"].as_u64().is_some_and(|s| s >= 1),
        "{:?}",
        approved.body
    );

    let rest = stream.rest().await?;
    let written = rest
        .iter()
        .find(|e| {
            e.event == "tool_call_finished" && e.data["event"]["result"]["tool_call_id"] == "write"
        })
        .ok_or("no result for the approved call")?;
    assert_eq!(written.data["event"]["result"]["ok"], true);
    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.body["status"], "stopped");
    assert_eq!(run.body["outcome"]["stop_reason"], "done", "{:?}", run.body);

    // The run has stopped: no more decisions.
    let late = service
        .post(
            &format!("/runs/{run_id}/approvals/write"),
            json!({"decision": "approve"}),
        )
        .await?;
    assert_eq!(late.status, 409, "{:?}", late.body);
    Ok(())
}

/// Denying a parked call feeds `EPERM`, with the reason, back as its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_gets_eperm() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(approval_task()).await?;
    let mut stream = service.events(&run_id).await?;
    stream.until("awaiting_approval").await?;

    let denied = service
        .post(
            &format!("/runs/{run_id}/approvals/write"),
            json!({"decision": "deny", "reason": "not on a Friday"}),
        )
        .await?;
    assert_eq!(denied.status, 200, "{:?}", denied.body);
    assert_eq!(denied.body["decision"], "deny");

    let rest = stream.rest().await?;
    let result = rest
        .iter()
        .find(|e| {
            e.event == "tool_call_finished" && e.data["event"]["result"]["tool_call_id"] == "write"
        })
        .map(|e| &e.data["event"]["result"])
        .ok_or("no result for the denied call")?;
    assert_eq!(result["ok"], false);
    assert_eq!(result["error"]["code"], "EPERM", "{result:?}");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not on a Friday"), "{message}");
    assert_eq!(names(&rest).last(), Some(&"run_stopped"));
    Ok(())
}

/// An event-driven run over HTTP: messages and custom events each wake a step;
/// pause parks it, resume frees it, abort stops it `user_abort`; input to the
/// stopped run is 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_events_and_interrupts() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(listener_task()).await?;
    let run_path = format!("/runs/{run_id}");
    let mut stream = service.events(&run_id).await?;

    let sent = service
        .post(&format!("{run_path}/messages"), json!({"text": "hello"}))
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let seen = stream.until("budget_spent").await?;
    let input = seen
        .iter()
        .find(|e| e.event == "input_applied")
        .ok_or("no input_applied")?;
    assert_eq!(
        input.data["event"]["input"],
        json!({"type": "message", "text": "hello"})
    );

    let injected = service
        .post(
            &format!("{run_path}/events"),
            json!({"name": "webhook", "payload": {"order": 7}}),
        )
        .await?;
    assert_eq!(injected.status, 202, "{:?}", injected.body);
    let seen = stream.until("budget_spent").await?;
    let input = seen
        .iter()
        .find(|e| e.event == "input_applied")
        .ok_or("no input_applied")?;
    assert_eq!(
        input.data["event"]["input"],
        json!({"type": "event", "name": "webhook", "payload": {"order": 7}})
    );

    let paused = service
        .post(&format!("{run_path}/interrupt"), json!({"action": "pause"}))
        .await?;
    assert_eq!(paused.status, 202, "{:?}", paused.body);
    let seen = stream.until("input_applied").await?;
    assert_eq!(
        seen.last().ok_or("none")?.data["event"]["input"]["type"],
        "pause"
    );
    let run = service.get(&run_path).await?;
    assert_eq!(run.body["status"], "paused", "{:?}", run.body);
    assert_eq!(run.body["steps"], 2);

    let resumed = service
        .post(
            &format!("{run_path}/interrupt"),
            json!({"action": "resume"}),
        )
        .await?;
    assert_eq!(resumed.status, 202, "{:?}", resumed.body);
    let seen = stream.until("input_applied").await?;
    assert_eq!(
        seen.last().ok_or("none")?.data["event"]["input"]["type"],
        "resume"
    );

    let aborted = service
        .post(&format!("{run_path}/interrupt"), json!({"action": "abort"}))
        .await?;
    assert_eq!(aborted.status, 202, "{:?}", aborted.body);
    let rest = stream.rest().await?;
    let stopped = rest.last().ok_or("no events after abort")?;
    assert_eq!(stopped.event, "run_stopped");
    assert_eq!(stopped.data["event"]["stop_reason"], "user_abort");

    let run = service.get(&run_path).await?;
    assert_eq!(run.body["status"], "stopped");
    assert_eq!(run.body["inputs"], 4, "message, event, pause, resume");
    assert_eq!(
        run.body["outcome"]["stop_reason"], "user_abort",
        "{:?}",
        run.body
    );
    for (path, body) in [
        ("messages", json!({"text": "too late"})),
        ("events", json!({"name": "webhook"})),
        ("interrupt", json!({"action": "resume"})),
        ("interrupt", json!({"action": "abort"})),
    ] {
        let late = service.post(&format!("{run_path}/{path}"), body).await?;
        assert_eq!(late.status, 409, "{path}: {:?}", late.body);
        assert!(
            late.body["error"]
                .as_str()
                .unwrap_or_default()
                .contains("stopped"),
            "{:?}",
            late.body
        );
    }
    Ok(())
}

/// Bad requests get a 4xx and `{"error": ...}` naming the problem.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_naming_the_problem() -> Result<(), TestError> {
    let service = Service::start().await?;
    let live = service.create(listener_task()).await?;
    let script = json!({"turns": [{"final": "ok"}]});
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        (
            "POST",
            "/runs".into(),
            Some("{\"goal\": ".into()),
            400,
            "invalid JSON",
        ),
        (
            "POST",
            "/runs".into(),
            Some("[1, 2]".into()),
            400,
            "must be a JSON object",
        ),
        (
            "POST",
            "/runs".into(),
            Some(
                json!({"goal": "g", "budget": {"max_steps": "ten"}, "script": script}).to_string(),
            ),
            400,
            "budget.max_steps: expected a positive integer, found \"ten\"",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "budget": {"max_steps": null}, "script": script}).to_string()),
            400,
            "budget.max_steps: null is not allowed",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "budgte": {}, "script": script}).to_string()),
            400,
            "unknown field `budgte`",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g"}).to_string()),
            400,
            "script: missing",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "script": {"turns": [{}]}}).to_string()),
            400,
            "script: turns[0]",
        ),
        (
            "POST",
            "/runs".into(),
            Some(
                json!({"goal": "g", "policy": {"script": "s.json"}, "script": script}).to_string(),
            ),
            400,
            "policy:",
        ),
        (
            "POST",
            "/runs".into(),
            Some(
                json!({"goal": "g", "script": script, "files": {"../escape.txt": "x"}}).to_string(),
            ),
            400,
            "files[\"../escape.txt\"]: expected a relative path",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "script": script, "files": {"/etc/x": "x"}}).to_string()),
            400,
            "files[\"/etc/x\"]",
        ),
        (
            "POST",
            "/runs".into(),
            Some(json!({"goal": "g", "script": script, "files": {"a.txt": 3}}).to_string()),
            400,
            "files[\"a.txt\"]: expected the file content as a string",
        ),
        ("GET", "/runs/no-such-run".into(), None, 404, "no-such-run"),
        (
            "GET",
            "/runs/no-such-run/events".into(),
            None,
            404,
            "no-such-run",
        ),
        (
            "POST",
            "/runs/no-such-run/messages".into(),
            Some(json!({"text": "hi"}).to_string()),
            404,
            "no-such-run",
        ),
        (
            "POST",
            format!("/runs/{live}/interrupt"),
            Some(json!({"action": "stop"}).to_string()),
            400,
            "action: expected \"pause\", \"resume\" or \"abort\", found \"stop\"",
        ),
        (
            "POST",
            format!("/runs/{live}/interrupt"),
            Some("{}".into()),
            400,
            "action: missing",
        ),
        (
            "POST",
            format!("/runs/{live}/messages"),
            Some(json!({"text": 3}).to_string()),
            400,
            "text: expected",
        ),
        (
            "POST",
            format!("/runs/{live}/messages"),
            Some(json!({"text": "hi", "urgent": true}).to_string()),
            400,
            "unknown field \"urgent\"",
        ),
        (
            "POST",
            format!("/runs/{live}/events"),
            Some(json!({"payload": {}}).to_string()),
            400,
            "name: missing",
        ),
        (
            "POST",
            format!("/runs/{live}/approvals/c1"),
            Some(json!({"decision": "maybe"}).to_string()),
            400,
            "decision: expected \"approve\" or \"deny\"",
        ),
        ("GET", "/nowhere".into(), None, 404, "no such route"),
        ("DELETE", "/runs".into(), None, 405, "method not allowed"),
    ];
    for (method, path, body, status, want) in cases {
        let reply = service.send(method, &path, body.clone()).await?;
        let error = reply.body["error"].as_str().unwrap_or_default();
        assert_eq!(
            reply.status, status,
            "{method} {path} {body:?}: {:?}",
            reply.body
        );
        assert!(
            error.contains(want),
            "{method} {path} {body:?}: got {error:?}, want {want:?}"
        );
    }
    // None of that disturbed the live run: it is (or soon is) asleep, no step taken.
    let mut status = Value::Null;
    for _ in 0..200 {
        let run = service.get(&format!("/runs/{live}")).await?;
        assert_eq!(run.body["steps"], 0, "{:?}", run.body);
        status = run.body["status"].clone();
        if status == "sleeping" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(status, "sleeping");
    Ok(())
}

/// A service on a store is killed (SIGKILL) with a run still open (an
/// event-driven agent waiting for messages); a new service on the same store
/// resumes it before it listens, under the same id, and the run goes on from
/// where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_a_store_resumes_its_runs_after_a_restart() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("service.db");
    let task = json!({
        "goal": "answer two messages, then finish",
        "budget": {"max_steps": 10, "deadline": "60s"},
        "driver": {"mode": "events"},
        "script": {"turns": [
            {"final": "first"},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "second"}}]}
        ]}
    });
    let process = ServiceProcess::start(&db)?;
    let first = Service::client_of(&process.base)?;
    let run_id = first.create(task).await?;
    let sent = first
        .post(&format!("/runs/{run_id}/messages"), json!({"text": "one"}))
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    // Step 1 answered: the run sleeps until the next message.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = first.get(&format!("/runs/{run_id}")).await?;
        if run.body["steps"] == 1 && run.body["status"] == "sleeping" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    process.kill()?;

    let second = Service::start_on(Some(&db)).await?;
    let run = second.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.status, 200, "the resumed run is served under its id");
    assert_eq!(run.body["steps"], 1);
    // Nothing was interrupted mid-call, so there is nothing to settle.
    let settle = second
        .post(
            &format!("/runs/{run_id}/decisions/nope"),
            json!({"decision": "happened"}),
        )
        .await?;
    assert_eq!(settle.status, 404, "{:?}", settle.body);
    let settle = second
        .post(
            &format!("/runs/{run_id}/decisions/nope"),
            json!({"decision": "maybe"}),
        )
        .await?;
    assert_eq!(settle.status, 400, "{:?}", settle.body);
    assert!(
        settle.body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("happened, retry or skip"),
        "{:?}",
        settle.body
    );
    let sent = second
        .post(&format!("/runs/{run_id}/messages"), json!({"text": "two"}))
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = second.get(&format!("/runs/{run_id}")).await?;
        if run.body["status"] == "stopped" {
            assert_eq!(run.body["outcome"]["stop_reason"], "done", "{:?}", run.body);
            assert_eq!(run.body["outcome"]["answer"], "second");
            assert_eq!(run.body["steps"], 2);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
