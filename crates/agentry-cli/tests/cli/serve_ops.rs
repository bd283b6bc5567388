//! Operating `agentry serve`: SIGTERM drains (503 with `Retry-After` to every
//! request but `/healthz`, the running step finishes, exit 0, the next start
//! resumes the run with nothing lost or run twice; a second SIGTERM or the
//! drain's timeout cuts the step as a crash would, and the run still
//! resumes); `/healthz` reports the store; `--log-format json` lines carry
//! the run id and nothing of a refused request; `[telemetry] otlp` exports
//! the runs' spans and `[telemetry] metrics` serves `GET /metrics`.

use std::io::Read;
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::serve::{Served, WAIT};
use crate::*;

const TOKEN: &str = "ops-token-6c1e";

/// `dir/tasks/slow`: one call of `work`, a command tool that writes "start",
/// sleeps `secs`, writes "end" (each a line of calls.txt in the run's
/// working directory), then finishes. Acceptance: calls.txt is `expect`, so
/// a run that is `done` ran the tool exactly as `expect` says.
fn slow_task(dir: &Path, secs: u32, idempotency: &str, expect: &str) {
    let task = dir.join("tasks/slow");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "goal = \"do the slow work once\"\n\
             [budget]\nmax_steps = 5\ndeadline = \"120s\"\n\
             [tools]\ngrant = [\"work\"]\n\
             [progress]\nwindow = 0\n\
             [[tools.command]]\nname = \"work\"\ndescription = \"slow work\"\n\
             argv = [\"sh\", \"-c\", \"echo start >> calls.txt; sleep {secs}; echo end >> calls.txt\"]\n\
             idempotency = \"{idempotency}\"\ntimeout = \"60s\"\n\
             [[accept]]\nfile = \"calls.txt\"\nequals = {expect:?}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        task.join("script.json"),
        json!({"turns": [
            {"tool_calls": [{"id": "w1", "name": "work", "arguments": {}}]},
            {"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "worked"}}]}
        ]})
        .to_string(),
    )
    .unwrap();
}

/// `agentry serve` on `dir/serve.toml` (`config`) and `dir/runs.db`, with `args`.
fn start(dir: &Path, config: &str, args: &[&str], env: &[(&str, &str)]) -> Served {
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let store = dir.join("runs.db");
    let mut all = vec!["--config", path_str(&path), "--store", path_str(&store)];
    all.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(("AGENTRY_TOKEN", TOKEN));
    Served::start(&all, &env)
}

/// A raw answer: status, `Retry-After`, JSON body.
struct Raw {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn raw(served: &Served, method: &str, path: &str, body: Option<&Value>) -> Raw {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client
        .request(method, format!("{}{path}", served.base))
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let body = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
    Raw {
        status,
        retry_after,
        body,
    }
}

/// The run's event stream, open.
async fn open_stream(base: &str, id: &str) -> reqwest::Response {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .get(format!("{base}/runs/{id}/events"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    response
}

/// The stream's text, until the server ends it (bounded); panics if the
/// connection was cut instead of the stream ended.
async fn stream_to_end(mut response: reqwest::Response) -> String {
    let mut text = String::new();
    loop {
        let chunk = tokio::time::timeout(WAIT, response.chunk())
            .await
            .expect("the stream did not end");
        match chunk {
            Ok(Some(bytes)) => text.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(None) => return text,
            Err(e) => panic!("the stream was cut, not ended ({e}), after: {text}"),
        }
    }
}

/// Polls until a run's calls.txt under `root` says "start" (bounded).
fn wait_started(root: &Path) {
    let deadline = std::time::Instant::now() + WAIT;
    let started = || {
        std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .any(|run| {
                std::fs::read_to_string(run.path().join("calls.txt"))
                    .is_ok_and(|calls| calls.contains("start"))
            })
    };
    while !started() {
        assert!(
            std::time::Instant::now() < deadline,
            "the work never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Polls until the server's log holds `text` (bounded).
fn wait_log(served: &Served, text: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    while !served.log.lock().unwrap().contains(text) {
        assert!(
            std::time::Instant::now() < deadline,
            "the log never said {text:?}: {}",
            served.log.lock().unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// SIGTERM while `work` sleeps: new requests are 503 with `Retry-After`
/// (the JSON error body), `/healthz` says draining; the call finishes; the
/// server exits 0; after a restart the run resumes and finishes with the
/// call run once (its acceptance check reads calls.txt: one start, one end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_running_step_and_the_run_resumes_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    slow_task(dir.path(), 6, "none", "start\nend\n");
    let config = "[serve]\ndrain_timeout = \"60s\"\n[agents.slow]\ntask = \"tasks/slow\"\n";
    let mut served = start(dir.path(), config, &[], &[]);
    let id = served
        .create(TOKEN, &json!({"agent": "slow", "input": "go"}))
        .await;
    served.events_until(TOKEN, &id, "tool_call_started").await;
    let stream = tokio::spawn(stream_to_end(open_stream(&served.base, &id).await));
    served.terminate();
    wait_log(&served, "agentry: serve: draining");

    let health = raw(&served, "GET", "/healthz", None).await;
    assert_eq!(health.status, 503, "{:?}", health.body);
    assert_eq!(health.body["status"], "draining", "{:?}", health.body);
    assert_eq!(health.body["store"], "ok", "{:?}", health.body);
    for (method, path, body) in [
        (
            "POST",
            "/runs".to_string(),
            Some(json!({"agent": "slow", "input": "more"})),
        ),
        ("GET", format!("/runs/{id}"), None),
        ("GET", "/runs".to_string(), None),
    ] {
        let refused = raw(&served, method, &path, body.as_ref()).await;
        assert_eq!(refused.status, 503, "{method} {path}: {:?}", refused.body);
        assert_eq!(refused.body["error"]["code"], "service_unavailable");
        let wait: u64 = refused.retry_after.expect("Retry-After").parse().unwrap();
        assert!(wait > 0);
    }

    let status = served.exit_status();
    assert_eq!(status.code(), Some(0), "{}", served.log.lock().unwrap());
    assert!(
        served
            .log
            .lock()
            .unwrap()
            .contains("drained: 1 runs parked between steps, 0 stopped mid-step"),
        "{}",
        served.log.lock().unwrap()
    );
    drop(served);
    // The stream was ended (not cut) by the drain, and never said the run
    // stopped: it goes on after the restart.
    let streamed = stream.await.unwrap();
    assert!(streamed.contains("event: tool_call_finished"), "{streamed}");
    assert!(!streamed.contains("run_stopped"), "{streamed}");

    let again = start(dir.path(), config, &[], &[]);
    let run = again.wait_status(TOKEN, &id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    assert_eq!(run["outcome"]["answer"], "worked", "{run:?}");
    assert_eq!(run["tool_calls"], 2, "work once, then finish: {run:?}");
}

/// The step is cut when the drain runs out of time, or at a second SIGTERM:
/// exit 0 all the same, and the run resumes by the resume rules (`work` is
/// idempotent, so its call without an outcome runs again: two starts, one
/// end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_cut_short_leaves_the_run_to_resume_as_after_a_crash() {
    for second_signal in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        slow_task(dir.path(), 8, "idempotent", "start\nstart\nend\n");
        let timeout = if second_signal { "60s" } else { "1s" };
        let work = dir.path().join("work");
        let config = format!(
            "[serve]\ndrain_timeout = \"{timeout}\"\nworkdir_root = {:?}\n\
             [agents.slow]\ntask = \"tasks/slow\"\n",
            path_str(&work)
        );
        let mut served = start(dir.path(), &config, &[], &[]);
        let id = served
            .create(TOKEN, &json!({"agent": "slow", "input": "go"}))
            .await;
        served.events_until(TOKEN, &id, "tool_call_started").await;
        // `tool_call_started` comes before the process has run a line: cut
        // it before "start" and the resume sees one start, not two.
        wait_started(&work);
        served.terminate();
        wait_log(&served, "agentry: serve: draining");
        if second_signal {
            served.terminate();
        }
        let status = served.exit_status();
        let log = served.log.lock().unwrap().clone();
        assert_eq!(status.code(), Some(0), "{log}");
        assert!(
            log.contains("drained: 0 runs parked between steps, 1 stopped mid-step"),
            "{log}"
        );
        drop(served);

        let again = start(dir.path(), &config, &[], &[]);
        let run = again.wait_status(TOKEN, &id, "stopped").await;
        assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    }
}

/// `/healthz` is 200 while the store answers; once its file is removed, or
/// replaced by another, the service writes where no later start will read:
/// 503 naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_reports_the_store() {
    for replace in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let served = start(dir.path(), "", &[], &[]);
        let health = raw(&served, "GET", "/healthz", None).await;
        assert_eq!(health.status, 200, "{:?}", health.body);
        assert_eq!(health.body, json!({"status": "ok", "store": "ok"}));

        let db = dir.path().join("runs.db");
        std::fs::remove_file(&db).unwrap();
        if replace {
            std::fs::write(&db, b"not the service's store").unwrap();
        }
        let health = raw(&served, "GET", "/healthz", None).await;
        assert_eq!(health.status, 503, "{:?}", health.body);
        assert_eq!(health.body["status"], "unavailable", "{:?}", health.body);
        assert_eq!(health.body["store"], "unavailable", "{:?}", health.body);
        let message = health.body["error"]["message"].as_str().unwrap();
        assert!(message.contains(path_str(&db)), "{message}");
        let word = if replace { "replaced" } else { "gone" };
        assert!(message.contains(word), "{message}");
    }
}

/// `--log-format json`: every log line is a JSON object, a run's start
/// carries its id; a request refused 401 leaves nothing of its body in the
/// log, even at debug level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_run_id_and_nothing_of_a_refused_request() {
    const MARKER: &str = "refused-body-marker-5d0c";
    let dir = tempfile::tempdir().unwrap();
    let mut served = start(
        dir.path(),
        "",
        &["--log-format", "json"],
        &[("RUST_LOG", "debug")],
    );
    let id = served.create(TOKEN, &super::serve::listener_task()).await;
    let refused = served
        .send(
            "POST",
            "/runs",
            Some("wrong-token"),
            Some(&json!({"goal": MARKER, "script": {"turns": [{"final": MARKER}]}})),
        )
        .await;
    assert_eq!(refused.status, 401);
    served.wait_status(TOKEN, &id, "sleeping").await;
    served.terminate();
    assert_eq!(served.exit_status().code(), Some(0));

    let log = served.log.lock().unwrap().clone();
    assert!(!log.contains(MARKER), "{log}");
    let mut started = false;
    for line in log.lines() {
        // The service's own lines (its address, the drain) are plain text.
        if line.starts_with("agentry: ") {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(value["level"].is_string(), "{line}");
        if value["fields"]["message"] == "run started" {
            assert_eq!(value["fields"]["run_id"], id.as_str(), "{line}");
            started = true;
        }
    }
    assert!(started, "no `run started` line: {log}");
}

/// An OTLP/HTTP collector on 127.0.0.1 that keeps each request body.
struct Collector {
    url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
        let bodies: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let kept = Arc::clone(&bodies);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let body = read_request(&mut stream);
                kept.lock().unwrap().push(body);
                use std::io::Write;
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        Collector { url, bodies }
    }
}

/// One HTTP/1.1 request's body (by its Content-Length; bounded by a timeout).
fn read_request(stream: &mut std::net::TcpStream) -> Vec<u8> {
    stream.set_read_timeout(Some(WAIT)).unwrap();
    let mut data = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let head_end = data.windows(4).position(|w| w == b"\r\n\r\n");
        if let Some(end) = head_end {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            if data.len() >= end + 4 + length {
                return data[end + 4..end + 4 + length].to_vec();
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return data,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
    }
}

/// `[telemetry] otlp` in serve.toml: the runs' `invoke_agent` spans reach
/// the collector (flushed at the latest when the drained server exits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_otlp_in_serve_toml_exports_the_runs_spans() {
    let collector = Collector::start();
    let dir = tempfile::tempdir().unwrap();
    let config = format!("[telemetry]\notlp = \"{}\"\n", collector.url);
    let mut served = start(dir.path(), &config, &[], &[]);
    let body = json!({
        "goal": "say hi",
        "budget": {"max_steps": 3},
        "script": {"turns": [{"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "hi"}}]}]}
    });
    let id = served.create(TOKEN, &body).await;
    served.wait_status(TOKEN, &id, "stopped").await;
    served.terminate();
    assert_eq!(served.exit_status().code(), Some(0));
    let bodies = collector.bodies.lock().unwrap();
    let exported = bodies
        .iter()
        .any(|b| b.windows(12).any(|w| w == b"invoke_agent"));
    assert!(
        exported,
        "no invoke_agent span among {} exports",
        bodies.len()
    );
}

/// `[telemetry] metrics = true`: `GET /metrics` (with a token) counts the
/// runs; without it the route is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_metrics_in_serve_toml_serves_get_metrics() {
    let body = json!({
        "goal": "say hi",
        "budget": {"max_steps": 3},
        "script": {"turns": [{"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "hi"}}]}]}
    });
    for on in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let config = format!("[telemetry]\nmetrics = {on}\n");
        let served = start(dir.path(), &config, &[], &[]);
        let id = served.create(TOKEN, &body).await;
        served.wait_status(TOKEN, &id, "stopped").await;
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let response = client
            .get(format!("{}/metrics", served.base))
            .header("authorization", format!("Bearer {TOKEN}"))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        if !on {
            assert_eq!(status, 404, "{text}");
            continue;
        }
        assert_eq!(status, 200, "{text}");
        let done = text
            .lines()
            .find(|l| l.starts_with("agentry_runs_total{stop_reason=\"done\"}"))
            .unwrap_or_else(|| panic!("no count of done runs: {text}"));
        assert!(done.ends_with(" 1"), "{done}");
    }
}
