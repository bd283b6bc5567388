//! `agentry serve`: the real binary on 127.0.0.1:0, driven over real HTTP,
//! its store a real SQLite file. Shared here: starting it, a client, the
//! tasks; the tests are in `serve_auth.rs` (tokens and tenants),
//! `serve_agents.rs` (named agents, models, serve.toml), `serve_limits.rs`
//! (limits shared across runs) and `serve_ops.rs` (the drain on SIGTERM,
//! `/healthz`, logs and span export).

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::*;

/// Bound on any wait for the server.
pub(super) const WAIT: Duration = Duration::from_secs(60);

/// The running server; killed when the test ends, passed or not.
pub(super) struct Served {
    child: Child,
    pub(super) base: String,
    /// Everything it printed on stderr so far.
    pub(super) log: Arc<Mutex<String>>,
    client: reqwest::Client,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reply: status and JSON body (`Null` when not JSON).
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) body: Value,
    /// The headers, and the body as text (`/metrics`).
    pub(super) headers: reqwest::header::HeaderMap,
    pub(super) text: String,
}

/// `agentry serve ARGS --addr 127.0.0.1:0` with `env` (nothing of the
/// test's own AGENTRY_TOKEN or model keys), run until it exits (it must
/// not start).
pub(super) fn refused(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = serve_command(args, env);
    command.stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    child.wait_with_output().unwrap()
}

fn serve_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = agentry_command();
    command
        .arg("serve")
        .args(args)
        .args(["--addr", "127.0.0.1:0"])
        .current_dir(root())
        .env_remove("AGENTRY_TOKEN")
        .env_remove("RUST_LOG")
        .env_remove("OPENAI_API_KEY")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

impl Served {
    /// Starts `agentry serve ARGS` and waits (bounded) for its address.
    pub(super) fn start(args: &[&str], env: &[(&str, &str)]) -> Served {
        let mut command = serve_command(args, env);
        let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log: Arc<Mutex<String>> = Arc::default();
        let seen = log.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                seen.lock().unwrap().push_str(&format!("{line}\n"));
                if let Some(url) = line.strip_prefix("agentry: serve: listening on ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let base = match rx.recv_timeout(WAIT) {
            Ok(base) => base,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "the server did not print its address: {}",
                    log.lock().unwrap()
                );
            }
        };
        agentry_models::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(WAIT)
            .build()
            .unwrap();
        Served {
            child,
            base,
            log,
            client,
        }
    }

    /// SIGKILL: the process and every run in it are gone, the store stays.
    /// The server's process id (to pause it with SIGSTOP).
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(super) fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (what a service manager sends to stop it).
    pub(super) fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits (bounded) for the process to exit by itself.
    pub(super) fn exit_status(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not exit: {}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `METHOD PATH` with `token` (none: no Authorization header) and a JSON body.
    pub(super) async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        Reply {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
            headers,
            text,
        }
    }

    /// Creates a run as `token`'s tenant; panics unless 201.
    pub(super) async fn create(&self, token: &str, body: &Value) -> String {
        let reply = self.send("POST", "/runs", Some(token), Some(body)).await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        reply.body["run_id"].as_str().unwrap().to_string()
    }

    /// Polls `GET /runs/{id}` until its status is `status` (bounded).
    pub(super) async fn wait_status(&self, token: &str, id: &str, status: &str) -> Value {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let reply = self
                .send("GET", &format!("/runs/{id}"), Some(token), None)
                .await;
            if reply.body["status"] == status {
                return reply.body;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "run {id} never {status}: {:?}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The run's event stream up to (and with) the first event named
    /// `until`, as (event name, data).
    pub(super) async fn events_until(
        &self,
        token: &str,
        id: &str,
        until: &str,
    ) -> Vec<(String, Value)> {
        let mut response = self
            .client
            .get(format!("{}/runs/{id}/events", self.base))
            .header("authorization", format!("Bearer {token}"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let (mut buffer, mut seen) = (String::new(), Vec::new());
        loop {
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let name = block.lines().find_map(|l| l.strip_prefix("event: "));
                let data = block.lines().find_map(|l| l.strip_prefix("data: "));
                if let (Some(name), Some(data)) = (name, data) {
                    let found = name == until;
                    seen.push((name.to_string(), serde_json::from_str(data).unwrap()));
                    if found {
                        return seen;
                    }
                }
            }
            let chunk = tokio::time::timeout(WAIT, response.chunk())
                .await
                .unwrap()
                .unwrap();
            let Some(chunk) = chunk else {
                panic!("the stream ended before {until}: {seen:?}");
            };
            buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }
}

/// A tokens file: one `TENANT SHA256-HEX` line per (tenant, token).
pub(super) fn tokens_file(dir: &Path, tenants: &[(&str, &str)]) -> PathBuf {
    use sha2::Digest;
    let text: String = tenants
        .iter()
        .map(|(tenant, token)| {
            let digest = sha2::Sha256::digest(token.as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("{tenant} {hex}\n")
        })
        .collect();
    let path = dir.join("tokens");
    std::fs::write(&path, text).unwrap();
    path
}

/// An inline event-driven agent that answers "ok" to every message and never finishes.
pub(super) fn listener_task() -> Value {
    json!({
        "goal": "answer every message",
        "budget": {"max_steps": 100, "deadline": "60s"},
        "driver": {"mode": "events"},
        "progress": {"window": 0},
        "script": {"turns": [{"final": "ok"}], "then": "repeat_last"}
    })
}
