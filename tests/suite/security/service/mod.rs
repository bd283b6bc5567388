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

mod answers;
mod connections;
mod memory;
mod origins;
mod streams;
mod workdirs;

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
    _tmp: Option<tempfile::TempDir>,
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
        // reqwest has no crypto provider of its own in this workspace.
        agentry_models::install_crypto_provider();
        Ok(Service {
            child: spawned.child,
            addr: spawned.addr,
            _tmp: spawned.tmp,
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

    /// The `{"error": {"code", "message", "field"?}}` message; fails unless
    /// the answer is exactly that shape, as JSON.
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
        let message = body["error"]["message"].as_str().ok_or("no error field")?;
        let code = body["error"]["code"].as_str().unwrap_or_default();
        let only_known = body["error"].as_object().is_some_and(|o| {
            o.keys()
                .all(|k| ["code", "message", "field"].contains(&k.as_str()))
        });
        if message.is_empty()
            || code.is_empty()
            || !only_known
            || body.as_object().map(|o| o.len()) != Some(1)
        {
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

/// Where a service whose `TMPDIR` is `tmp` makes its runs' working directories.
fn run_dirs(tmp: &Path) -> std::path::PathBuf {
    tmp.join("agentry/service")
}

fn finish(answer: &str) -> Value {
    json!({"tool_calls": [{"id": "finish", "name": "task.finish", "arguments": {"answer": answer}}]})
}

/// What a hostile page posts: a task whose acceptance check runs `id` and
/// writes it to `marker`, as the service's user. (Under the default sandbox
/// the write outside the run's directory would be refused anyway, and a
/// client may not grant it: the refused status is the guard there.)
fn command_task(marker: &Path) -> Value {
    json!({
        "goal": "g",
        "budget": {"max_steps": 3, "deadline": "20s"},
        "accept": [{"command": format!("id > '{}'", marker.display())}],
        "script": {"turns": [finish("ok")]}
    })
}

/// The same command posted from an allowed page: it writes `id` inside its
/// working directory, and the run is `done` only if the file then says
/// `uid=` (so the command ran).
fn control_task() -> Value {
    json!({
        "goal": "g",
        "budget": {"max_steps": 3, "deadline": "20s"},
        "accept": [{"command": "id > control.txt"}, {"file": "control.txt", "contains": "uid="}],
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
