//! The HTTP service (`examples/service`) attacked over real TCP on 127.0.0.1:
//! the real binary, started as a subprocess with its real flags (`cargo test`
//! builds it with the examples; a missing or stale binary fails the test). The
//! attacker is a web page in the user's browser (cross-site posts, DNS
//! rebinding), or a client that holds memory and connections.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use agentry_test_support::TestError;

use crate::suite::service_bin;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on any single wait for the service (what is expected takes well under
/// a tenth of it).
const WAIT: Duration = Duration::from_secs(30);

/// How to start the service.
#[derive(Default)]
struct Launch<'a> {
    args: Vec<&'a str>,
    env: Vec<(&'a str, String)>,
    /// The process's open-file limit (`ulimit -n`).
    max_files: Option<u32>,
}

/// The real service binary on an ephemeral 127.0.0.1 port; killed when dropped.
struct Service {
    child: Child,
    addr: SocketAddr,
    client: reqwest::Client,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Service {
    fn start(args: &[&str]) -> Result<Service, TestError> {
        Service::launch(Launch {
            args: args.to_vec(),
            ..Launch::default()
        })
    }

    fn launch(launch: Launch<'_>) -> Result<Service, TestError> {
        let binary = service_bin::binary()?;
        let mut command = match launch.max_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&binary);
                sh
            }
            None => Command::new(&binary),
        };
        command
            .args(&launch.args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)));
        let spawned = service_bin::spawn(command, WAIT)?;
        Ok(Service {
            child: spawned.child,
            addr: spawned.addr,
            client: reqwest::Client::builder()
                .no_proxy()
                .timeout(WAIT)
                .build()?,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn post(&self, path: &str, body: &Value) -> Result<(u16, Value), TestError> {
        let response = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, serde_json::from_slice(&response.bytes().await?)?))
    }

    async fn get(&self, path: &str) -> Result<(u16, Value), TestError> {
        let response = self.client.get(self.url(path)).send().await?;
        let status = response.status().as_u16();
        Ok((status, serde_json::from_slice(&response.bytes().await?)?))
    }

    /// Creates a run; fails unless the service answers 201.
    async fn create(&self, task: &Value) -> Result<String, TestError> {
        let (status, body) = self.post("/runs", task).await?;
        if status != 201 {
            return Err(format!("create: {status} {body}").into());
        }
        Ok(body["run_id"].as_str().ok_or("no run_id")?.to_string())
    }

    /// Polls `GET /runs/{id}` until `done` says so; returns that view.
    async fn wait_for(&self, id: &str, done: impl Fn(&Value) -> bool) -> Result<Value, TestError> {
        let deadline = Instant::now() + WAIT;
        loop {
            let (_, view) = self.get(&format!("/runs/{id}")).await?;
            if done(&view) {
                return Ok(view);
            }
            if Instant::now() > deadline {
                return Err(format!("run {id} never got there: {view}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The service process's resident memory, in bytes.
    fn rss(&self) -> Result<u64, TestError> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or("no VmRSS")?;
        Ok(kib * 1024)
    }

    /// Sends `request` as is on a new connection; the answer.
    async fn raw(&self, request: &[u8]) -> Result<Raw, TestError> {
        let mut stream = TcpStream::connect(self.addr).await?;
        stream.write_all(request).await?;
        read_response(&mut stream).await
    }
}

/// An answer read off the wire.
struct Raw {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n\n{}",
            self.head,
            String::from_utf8_lossy(&self.body)
        )
    }
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then_some(value.trim())
        })
    }

    /// The `{"error": ...}` message; fails unless the answer is exactly that, as JSON.
    fn error(&self) -> Result<String, TestError> {
        let content_type = self.header("content-type").unwrap_or_default();
        if !content_type.starts_with("application/json") {
            return Err(format!(
                "{} with content-type {content_type:?}: {self:?}",
                self.status
            )
            .into());
        }
        let body: Value = serde_json::from_slice(&self.body)?;
        let message = body["error"].as_str().ok_or("no error field")?;
        if message.is_empty() || body.as_object().map(|o| o.len()) != Some(1) {
            return Err(format!("not the error shape: {body}").into());
        }
        Ok(message.to_string())
    }
}

/// Reads one answer (head, then a body of its Content-Length) within [`WAIT`].
async fn read_response(stream: &mut TcpStream) -> Result<Raw, TestError> {
    let mut buffer = Vec::new();
    let read = async {
        let head_end = loop {
            if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(TestError::from(format!(
                    "closed before an answer: {:?}",
                    String::from_utf8_lossy(&buffer)
                )));
            }
            buffer.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(buffer[..head_end].to_vec())?;
        let mut raw = Raw {
            status: head.split(' ').nth(1).ok_or("no status")?.parse()?,
            head,
            body: buffer[head_end + 4..].to_vec(),
        };
        let length: usize = raw.header("content-length").unwrap_or("0").parse()?;
        while raw.body.len() < length {
            let mut chunk = [0u8; 4096];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            raw.body.extend_from_slice(&chunk[..n]);
        }
        Ok(raw)
    };
    tokio::time::timeout(WAIT, read)
        .await
        .map_err(|_| "no answer within the wait")?
}

/// Waits until the server closes `stream` (reads EOF, or a reset); fails after
/// `within`. Anything the server sends first is returned.
async fn closed_by_server(stream: &mut TcpStream, within: Duration) -> Result<Vec<u8>, TestError> {
    let mut got = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .map_err(|_| format!("the server kept the connection open past {within:?}"))?;
    Ok(got)
}

fn finish(answer: &str) -> Value {
    json!({"tool_calls": [{"id": "finish", "name": "task.finish", "arguments": {"answer": answer}}]})
}

/// What a hostile page posts: a task whose acceptance check runs `id` and
/// writes it to `marker`, as the service's user.
fn command_task(marker: &Path) -> Value {
    json!({
        "goal": "g",
        "budget": {"max_steps": 3, "deadline": "20s"},
        "accept": [{"command": format!("id > '{}'", marker.display())}],
        "script": {"turns": [finish("ok")]}
    })
}

/// An event-driven agent that answers every input and never finishes.
fn listener_task() -> Value {
    json!({
        "goal": "answer every message",
        "budget": {"max_steps": 1000, "deadline": "60s"},
        "driver": {"mode": "events"},
        "progress": {"window": 0},
        "script": {"turns": [{"final": "ok"}], "then": "repeat_last"}
    })
}

fn post(path: &str, host: &str, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn get(path: &str, host: &str, headers: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n")
        .into_bytes()
}

/// A page on any site can post to localhost, but only as a "simple" request:
/// text/plain, a form, multipart, and always with its `Origin`. Each is refused
/// before any run starts; the same task posted as JSON from no page runs its
/// command (so the payload was live).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_post_cannot_start_a_run() -> Result<(), TestError> {
    let service = Service::start(&[])?;
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("pwned");
    let task = command_task(&marker).to_string();
    let host = service.addr.to_string();
    for content_type in [
        "Content-Type: text/plain\r\n",
        "Content-Type: application/x-www-form-urlencoded\r\n",
        "Content-Type: multipart/form-data; boundary=x\r\n",
        "",
    ] {
        let raw = service
            .raw(&post("/runs", &host, content_type, &task))
            .await?;
        assert_eq!(raw.status, 415, "{content_type:?}: {raw:?}");
        assert!(raw.error()?.contains("application/json"), "{raw:?}");
    }
    for origin in ["http://evil.example", "null", "http://127.0.0.1:1"] {
        let headers = format!("Content-Type: application/json\r\nOrigin: {origin}\r\n");
        let raw = service.raw(&post("/runs", &host, &headers, &task)).await?;
        assert_eq!(raw.status, 403, "{origin}: {raw:?}");
        assert!(raw.error()?.contains(origin), "{raw:?}");
    }
    assert!(!marker.exists(), "a refused request ran its command");

    let control = dir.path().join("control");
    let id = service.create(&command_task(&control)).await?;
    let view = service.wait_for(&id, |v| v["status"] == "stopped").await?;
    assert_eq!(view["outcome"]["stop_reason"], "done", "{view}");
    assert!(std::fs::read_to_string(&control)?.contains("uid="));
    Ok(())
}

/// `--allow-origin` lets that origin's pages in, with the CORS answers a
/// browser needs to send JSON; any other origin is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_origin_gets_cors_answers() -> Result<(), TestError> {
    let service = Service::start(&["--allow-origin", "http://ui.example:3000"])?;
    let host = service.addr.to_string();
    let preflight = format!(
        "OPTIONS /runs HTTP/1.1\r\nHost: {host}\r\nOrigin: http://ui.example:3000\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\nConnection: close\r\n\r\n"
    );
    let raw = service.raw(preflight.as_bytes()).await?;
    assert_eq!(raw.status, 204, "{raw:?}");
    assert_eq!(
        raw.header("access-control-allow-origin"),
        Some("http://ui.example:3000")
    );
    assert!(
        raw.header("access-control-allow-headers")
            .is_some_and(|h| h.contains("content-type"))
    );

    let task = json!({"goal": "g", "script": {"turns": [finish("ok")]}}).to_string();
    let headers = "Content-Type: application/json\r\nOrigin: http://ui.example:3000\r\n";
    let raw = service.raw(&post("/runs", &host, headers, &task)).await?;
    assert_eq!(raw.status, 201, "{raw:?}");
    assert_eq!(
        raw.header("access-control-allow-origin"),
        Some("http://ui.example:3000")
    );
    let headers = "Content-Type: application/json\r\nOrigin: http://ui.example:3001\r\n";
    let raw = service.raw(&post("/runs", &host, headers, &task)).await?;
    assert_eq!(raw.status, 403, "{raw:?}");
    Ok(())
}

/// DNS rebinding: a page on evil.example re-points its name at 127.0.0.1, so
/// its requests are same-origin and carry `Host: evil.example:PORT`. Only the
/// bound address, `localhost` on its port, and `--allow-host` names are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_host_name_is_refused() -> Result<(), TestError> {
    let service = Service::start(&["--allow-host", "agentry.test"])?;
    let port = service.addr.port();
    let dir = tempfile::tempdir()?;
    let marker = dir.path().join("pwned");
    let task = command_task(&marker).to_string();
    let json = "Content-Type: application/json\r\n";
    for host in [
        format!("evil.example:{port}"),
        "evil.example".to_string(),
        format!("localhost.evil.example:{port}"),
        "127.0.0.1:1".to_string(),
        format!("user@127.0.0.1:{port}"),
    ] {
        let raw = service.raw(&post("/runs", &host, json, &task)).await?;
        assert_eq!(raw.status, 421, "{host}: {raw:?}");
        assert!(raw.error()?.contains("Host"), "{raw:?}");
    }
    // No Host at all (HTTP/1.0), and an absolute-form target naming another host.
    let raw = service
        .raw(b"GET /runs/x HTTP/1.0\r\nConnection: close\r\n\r\n")
        .await?;
    assert_eq!(raw.status, 421, "{raw:?}");
    let absolute = format!(
        "GET http://evil.example:{port}/runs/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    );
    let raw = service.raw(absolute.as_bytes()).await?;
    assert_eq!(raw.status, 421, "{raw:?}");
    assert!(!marker.exists(), "a refused request ran its command");

    // The service's own names pass the check (and reach the route: 404, no such run).
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
        format!("agentry.test:{port}"),
        "agentry.test".to_string(),
    ] {
        let raw = service.raw(&get("/runs/nope", &host, "")).await?;
        assert_eq!(raw.status, 404, "{host}: {raw:?}");
        assert!(raw.error()?.contains("no run with id"), "{raw:?}");
    }
    Ok(())
}

/// Every error the service answers is `{"error": "..."}` as JSON: axum's own
/// rejections (bad UTF-8 in the path), bare statuses (404, 405), and the
/// guard's (413, 414, 415), as well as the routes' own 400s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_answer_is_json() -> Result<(), TestError> {
    let service = Service::start(&["--max-message-bytes", "1024"])?;
    let id = service.create(&listener_task()).await?;
    let host = service.addr.to_string();
    let json = "Content-Type: application/json\r\n";
    let long_path = format!("/runs/{}", "a".repeat(9 * 1024));
    let big_message = json!({"text": "x".repeat(2000)}).to_string();
    let messages = format!("/runs/{id}/messages");
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (get("/nowhere", &host, ""), 404, "no such route"),
        (
            format!("DELETE /runs HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                .into_bytes(),
            405,
            "method not allowed",
        ),
        (get("/runs/%FF", &host, ""), 400, "UTF-8"),
        (
            get(&format!("/runs/{id}/approvals"), &host, ""),
            404,
            "no such route",
        ),
        (get(&long_path, &host, ""), 414, "URI"),
        (
            post(&messages, &host, json, &big_message),
            413,
            "--max-message-bytes",
        ),
        (
            post(&messages, &host, "Content-Type: text/plain\r\n", "{}"),
            415,
            "application/json",
        ),
        (
            post(&messages, &host, json, "{\"text\": "),
            400,
            "invalid JSON",
        ),
        (post(&messages, &host, json, "[1]"), 400, "JSON object"),
    ];
    for (request, status, want) in cases {
        let raw = service.raw(&request).await?;
        let line = String::from_utf8_lossy(&request[..request.len().min(60)]).to_string();
        assert_eq!(raw.status, status, "{line}: {raw:?}");
        let error = raw.error()?;
        assert!(error.contains(want), "{line}: {error:?} lacks {want:?}");
    }
    // Bytes that are not UTF-8 in a JSON body.
    let mut request = format!(
        "POST {messages} HTTP/1.1\r\nHost: {host}\r\n{json}Content-Length: 13\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    request.extend_from_slice(b"{\"text\": \"\xff\"}");
    let raw = service.raw(&request).await?;
    assert_eq!(raw.status, 400, "{raw:?}");
    assert!(raw.error()?.contains("invalid JSON"), "{raw:?}");
    Ok(())
}

/// The service runs only built-in tools; a posted `tools.command` used to be
/// dropped without a word (the run then "worked" without it). It is refused,
/// naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_posted_command_tool_is_refused() -> Result<(), TestError> {
    let service = Service::start(&[])?;
    let task = json!({
        "goal": "g",
        "tools": {
            "grant": ["sh"],
            "command": [{"name": "sh", "description": "any command", "argv": ["sh", "-c", "{cmd}"]}]
        },
        "script": {"turns": [finish("ok")]}
    });
    let (status, body) = service.post("/runs", &task).await?;
    assert_eq!(status, 400, "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("tools.command:"), "{error}");
    Ok(())
}

/// A run that read a 256 KiB file 100 times (25 MiB of tool results) used to
/// keep every result in its replay buffer after it stopped. Stopped, it keeps
/// its outcome and at most `--stopped-replay-bytes` of history: the replay a
/// late client gets is that small, and the service's memory (measured: RSS,
/// with glibc returning large blocks as they are freed) goes back down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_keeps_a_bounded_history() -> Result<(), TestError> {
    const READS: usize = 100;
    const FILE: usize = 256 * 1024;
    let service = Service::launch(Launch {
        env: vec![("MALLOC_MMAP_THRESHOLD_", "65536".into())],
        ..Launch::default()
    })?;
    let mut turns: Vec<Value> = (0..READS)
        .map(|i| json!({"tool_calls": [{"id": format!("r{i}"), "name": "fs.read", "arguments": {"path": "big.txt"}}]}))
        .collect();
    turns.push(finish("read it"));
    let task = json!({
        "goal": "read big.txt, many times",
        "budget": {"max_steps": READS + 5, "max_tool_calls": READS + 5, "deadline": "120s"},
        "tools": {"grant": ["fs.read"]},
        "progress": {"window": 0},
        "files": {"big.txt": "a".repeat(FILE)},
        "script": {"turns": turns}
    });
    // Warm up (allocator arenas, the runtime's first run), then measure from here.
    let warm = service
        .create(&json!({"goal": "g", "script": {"turns": [finish("ok")]}}))
        .await?;
    service
        .wait_for(&warm, |v| v["status"] == "stopped")
        .await?;
    let before = service.rss()?;

    let id = service.create(&task).await?;
    let view = service.wait_for(&id, |v| v["status"] == "stopped").await?;
    assert_eq!(view["outcome"]["stop_reason"], "done", "{view}");
    assert_eq!(view["steps"], READS as u64 + 1);

    let events = service.url(&format!("/runs/{id}/events"));
    // Read to the end once: the stream ends at the stop, and the log is shrunk
    // in the same step as the stop enters it.
    service.client.get(&events).send().await?.bytes().await?;
    let replay = service.client.get(&events).send().await?.bytes().await?;
    let replay = String::from_utf8(replay.to_vec())?;
    assert!(
        replay.len() < 512 * 1024,
        "replay of {} bytes",
        replay.len()
    );
    assert!(
        replay.contains("event: run_stopped"),
        "the replay ends with the stop"
    );
    assert!(
        !replay.contains("\nid: 1\n"),
        "the oldest events were dropped"
    );

    let after = service.rss()?;
    let kept = after.saturating_sub(before);
    let results = (READS * FILE) as u64;
    eprintln!("rss before {before}, after {after}: {kept} bytes kept of {results} read");
    assert!(
        kept < results / 2,
        "{kept} bytes kept after the run stopped"
    );
    Ok(())
}

/// A stopped run used to keep its handle, and with it the run's event channel
/// (~170 KiB each, measured): a thousand short runs held 170 MiB. Stopped, a
/// run keeps its outcome and its (small) history only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_runs_keep_little_each() -> Result<(), TestError> {
    const RUNS: usize = 100;
    let service = Service::launch(Launch {
        env: vec![("MALLOC_MMAP_THRESHOLD_", "65536".into())],
        ..Launch::default()
    })?;
    let task = json!({"goal": "g", "script": {"turns": [finish("ok")]}});
    let mut rss = Vec::new();
    for _ in 0..2 {
        let mut ids = Vec::new();
        for _ in 0..RUNS {
            ids.push(service.create(&task).await?);
        }
        for id in &ids {
            service.wait_for(id, |v| v["status"] == "stopped").await?;
        }
        rss.push(service.rss()?);
    }
    // The first batch warms the allocator up; the second one is what runs cost.
    let each = rss[1].saturating_sub(rss[0]) / RUNS as u64;
    eprintln!("rss {rss:?}: {each} bytes per stopped run");
    assert!(each < 64 * 1024, "{each} bytes kept per stopped run");
    Ok(())
}

/// Past `--keep-stopped`, the oldest stopped run is forgotten: 404, and its
/// working directory removed. Live runs are never forgotten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_stopped_runs_are_forgotten() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let service = Service::launch(Launch {
        args: vec!["--keep-stopped", "2"],
        env: vec![("TMPDIR", tmp.path().display().to_string())],
        ..Launch::default()
    })?;
    let live = service.create(&listener_task()).await?;
    let task = json!({"goal": "g", "script": {"turns": [finish("ok")]}});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let id = service.create(&task).await?;
        service.wait_for(&id, |v| v["status"] == "stopped").await?;
        ids.push(id);
    }
    let deadline = Instant::now() + WAIT;
    while service.get(&format!("/runs/{}", ids[0])).await?.0 != 404 {
        assert!(
            Instant::now() < deadline,
            "the oldest stopped run is still kept"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in [&ids[1], &ids[2], &live] {
        assert_eq!(service.get(&format!("/runs/{id}")).await?.0, 200);
    }
    // One directory per run still kept: the live one and two stopped ones.
    while std::fs::read_dir(tmp.path())?.count() != 3 {
        assert!(
            Instant::now() < deadline,
            "the forgotten run's directory is still there"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A paused run keeps every message it is sent. A message over
/// `--max-message-bytes` is refused (413), and so is any input past the run's
/// `--max-run-input-bytes`: the run cannot be fed without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_takes_bounded_input() -> Result<(), TestError> {
    const MESSAGE: usize = 64 * 1024;
    const RUN: usize = 1024 * 1024;
    let service = Service::start(&[
        "--max-message-bytes",
        &MESSAGE.to_string(),
        "--max-run-input-bytes",
        &RUN.to_string(),
    ])?;
    let id = service.create(&listener_task()).await?;
    let (status, body) = service
        .post(
            &format!("/runs/{id}/interrupt"),
            &json!({"action": "pause"}),
        )
        .await?;
    assert_eq!(status, 202, "{body}");

    let messages = format!("/runs/{id}/messages");
    let (status, body) = service
        .post(&messages, &json!({"text": "x".repeat(MESSAGE)}))
        .await?;
    assert_eq!(status, 413, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--max-message-bytes")
    );

    let text = json!({"text": "x".repeat(60_000)});
    let size = text.to_string().len();
    let mut accepted = 0;
    let refused = loop {
        let (status, body) = service.post(&messages, &text).await?;
        match status {
            202 => accepted += 1,
            413 => break body,
            other => return Err(format!("{other}: {body}").into()),
        }
        assert!(
            accepted <= RUN / size,
            "{accepted} messages of {size} bytes taken"
        );
    };
    assert_eq!(accepted, RUN / size);
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(error.contains("--max-run-input-bytes"), "{error}");
    assert!(error.contains(&id), "{error}");
    Ok(())
}

/// With 256 file descriptors, 300 connections that send nothing, half a head or
/// half a body used to take every descriptor: no request was answered again.
/// Now at most `--max-connections` are open and, at the limit, the oldest idle
/// one is closed to let a new one in: a real request is answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_do_not_starve_a_real_client() -> Result<(), TestError> {
    let service = Service::launch(Launch {
        args: vec!["--max-connections", "64"],
        max_files: Some(256),
        ..Launch::default()
    })?;
    let host = service.addr.to_string();
    let mut held = Vec::new();
    for i in 0..300 {
        let mut stream = TcpStream::connect(service.addr).await?;
        match i % 3 {
            0 => {}
            1 => {
                let head = format!("GET /runs/x HTTP/1.1\r\nHost: {host}\r\nX-Slow: ");
                stream.write_all(head.as_bytes()).await?;
            }
            _ => {
                let head = format!(
                    "POST /runs/x/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"te"
                );
                stream.write_all(head.as_bytes()).await?;
            }
        }
        held.push(stream);
    }
    let started = Instant::now();
    for _ in 0..3 {
        let raw = service.raw(&get("/runs/nope", &host, "")).await?;
        assert_eq!(raw.status, 404, "{raw:?}");
    }
    eprintln!(
        "answered in {:?} with 300 connections held",
        started.elapsed()
    );
    Ok(())
}

/// A connection that sends nothing, stops halfway through its head or its body,
/// or idles after a request is closed by the server, within ten times the
/// timeouts given (1 s each here). The half-sent body gets a 408 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_by_the_server() -> Result<(), TestError> {
    let service = Service::start(&["--header-timeout", "1s", "--body-timeout", "1s"])?;
    let host = service.addr.to_string();
    let within = Duration::from_secs(10);

    let idle = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        closed_by_server(&mut stream, within).await
    };
    let half_head = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        stream
            .write_all(format!("GET /runs/x HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
            .await?;
        closed_by_server(&mut stream, within).await
    };
    let half_body = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        let head = format!(
            "POST /runs/x/messages HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"te"
        );
        stream.write_all(head.as_bytes()).await?;
        let raw = read_response(&mut stream).await?;
        closed_by_server(&mut stream, within).await?;
        Ok::<_, TestError>(raw)
    };
    let kept_alive = async {
        let mut stream = TcpStream::connect(service.addr).await?;
        let request = format!("GET /runs/nope HTTP/1.1\r\nHost: {host}\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let raw = read_response(&mut stream).await?;
        closed_by_server(&mut stream, within).await?;
        Ok::<_, TestError>(raw)
    };
    let (idle, half_head, half_body, kept_alive) =
        tokio::join!(idle, half_head, half_body, kept_alive);
    assert!(idle?.is_empty());
    let half_head = half_head?;
    assert!(
        half_head.is_empty() || String::from_utf8_lossy(&half_head).starts_with("HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&half_head)
    );
    let half_body = half_body?;
    assert_eq!(half_body.status, 408, "{half_body:?}");
    assert!(half_body.error()?.contains("--body-timeout"));
    assert_eq!(kept_alive?.status, 404);
    Ok(())
}

/// SIGTERM stops the service at once even with connections that sent nothing
/// or half a head (hyper's graceful shutdown would wait them out, until the
/// 10 s grace); an open event stream still ends with its run's `run_stopped`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_not_held_up_by_stalled_connections() -> Result<(), TestError> {
    let mut service = Service::start(&[])?;
    let host = service.addr.to_string();
    let id = service.create(&listener_task()).await?;
    let mut idle = TcpStream::connect(service.addr).await?;
    let mut half = TcpStream::connect(service.addr).await?;
    half.write_all(format!("GET /runs/x HTTP/1.1\r\nHost: {host}\r\n").as_bytes())
        .await?;
    let mut events = TcpStream::connect(service.addr).await?;
    events
        .write_all(format!("GET /runs/{id}/events HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .await?;
    let head = read_response(&mut events).await?;
    assert_eq!(head.status, 200, "{head:?}");

    let signalled = Instant::now();
    let killed = Command::new("kill")
        .args(["-TERM", &service.child.id().to_string()])
        .status()?;
    assert!(killed.success());
    let stream = closed_by_server(&mut events, WAIT).await?;
    let stream = String::from_utf8_lossy(&stream);
    assert!(stream.contains("user_abort"), "{stream}");
    closed_by_server(&mut idle, WAIT).await?;
    closed_by_server(&mut half, WAIT).await?;
    let exited = loop {
        if let Some(status) = service.child.try_wait()? {
            break status;
        }
        assert!(signalled.elapsed() < WAIT, "the service did not exit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(exited.success(), "{exited}");
    // Well under the 10 s the grace (and the header timeout) would have taken.
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{:?}",
        signalled.elapsed()
    );
    Ok(())
}

/// The service wrote a request's `files` on its async workers, so one large
/// create held up every other request. With one async worker
/// (`TOKIO_WORKER_THREADS=1`), an unrelated GET is answered while the files of a
/// large create are still being written (seen in its working directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_create_does_not_hold_up_other_requests() -> Result<(), TestError> {
    const FILES: usize = 4000;
    let tmp = tempfile::tempdir()?;
    let service = Service::launch(Launch {
        env: vec![
            ("TOKIO_WORKER_THREADS", "1".into()),
            ("TMPDIR", tmp.path().display().to_string()),
        ],
        ..Launch::default()
    })?;
    let files: serde_json::Map<String, Value> = (0..FILES)
        .map(|i| (format!("f{i:05}.txt"), Value::String("a".repeat(2048))))
        .collect();
    let task = json!({"goal": "g", "files": files, "script": {"turns": [finish("ok")]}});
    let create = {
        let client = service.client.clone();
        let url = service.url("/runs");
        tokio::spawn(async move {
            // What is checked is the order (the GET first), not how long the
            // create takes: a loaded machine may take minutes to write it.
            let response = client
                .post(url)
                .header("content-type", "application/json")
                .body(task.to_string())
                .timeout(Duration::from_secs(300))
                .send()
                .await?;
            Ok::<_, reqwest::Error>(response.status().as_u16())
        })
    };
    // Progress: the working directory exists and holds a first file.
    let deadline = Instant::now() + WAIT;
    let workdir = loop {
        let found = std::fs::read_dir(tmp.path())?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some()));
        if let Some(dir) = found {
            break dir;
        }
        assert!(Instant::now() < deadline, "no file was ever written");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let seen = Instant::now();
    let (status, body) = service.get("/runs/nope").await?;
    let written = std::fs::read_dir(&workdir)?.count();
    let answered = seen.elapsed();
    assert_eq!(status, 404, "{body}");
    assert!(
        written < FILES,
        "the GET was answered only after all {FILES} files were written"
    );
    assert_eq!(create.await??, 201);
    eprintln!(
        "GET answered in {answered:?} with {written} of {FILES} files written; all written after {:?}",
        seen.elapsed()
    );
    assert_eq!(std::fs::read_dir(&workdir)?.count(), FILES);
    Ok(())
}
