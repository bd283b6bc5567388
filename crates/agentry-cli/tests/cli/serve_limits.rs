//! `agentry serve`'s limits shared across runs, through the real binary on
//! 127.0.0.1: `[serve] max_running` with its FIFO queue (`max_queued`, 429
//! with `Retry-After` past it, the queue kept across a restart); a named
//! model's `max_concurrent` measured at the models crate's strict mock
//! server, and a provider's 429 holding back every run on the model;
//! `[tenants.NAME] max_running` and `max_cost_per_day`; the gauges of
//! `GET /metrics`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::Notify;

use super::serve::{Reply as Answer, Served, WAIT, listener_task, tokens_file};
use crate::server::{MockServer, Reply};
use crate::sse::one_call;
use crate::*;

const TOKEN: &str = "limits-token-5e1f";
const ACME: &str = "acme-token-77c1";
const GLOBEX: &str = "globex-token-9d02";

fn start(dir: &Path, config: &str, env: &[(&str, &str)]) -> Served {
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let store = dir.join("runs.db");
    Served::start(
        &["--config", path_str(&path), "--store", path_str(&store)],
        env,
    )
}

/// `tasks/answer`: one model turn that finishes; `[budget] max_steps = 3`.
pub(super) fn answer_task(dir: &Path) {
    let task = dir.join("tasks/answer");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"answer the user\"\n[budget]\nmax_steps = 3\n[tools]\ngrant = [\"fs.read\"]\n",
    )
    .unwrap();
}

/// The value of the gauge `name` with these labels in `/metrics`' text.
fn gauge(text: &str, series: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

async fn metrics(served: &Served, token: &str) -> String {
    let reply = served.send("GET", "/metrics", Some(token), None).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
    reply.text
}

/// Polls `/metrics` until `series` has `value` (bounded).
async fn wait_gauge(served: &Served, token: &str, series: &str, value: i64) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = metrics(served, token).await;
        if gauge(&text, series) == Some(value) {
            return text;
        }
        assert!(Instant::now() < deadline, "{series} never {value}: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn retry_after(reply: &Answer) -> u64 {
    reply
        .headers
        .get("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After: {:?}", reply.body))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn abort(served: &Served, token: &str, id: &str) {
    let reply = served
        .send(
            "POST",
            &format!("/runs/{id}/interrupt"),
            Some(token),
            Some(&json!({"action": "abort"})),
        )
        .await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
}

async fn status(served: &Served, token: &str, id: &str) -> Value {
    served
        .send("GET", &format!("/runs/{id}"), Some(token), None)
        .await
        .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_running_queues_in_order_past_max_queued_is_429_and_the_queue_survives_a_restart() {
    // Size: one queue followed through its 429, a start in order and a
    // restart; halves would each rebuild the same queue.
    let dir = tempfile::tempdir().unwrap();
    let config = "[serve]\nmax_running = 1\nmax_queued = 2\n[telemetry]\nmetrics = true\n";
    let env = [("AGENTRY_TOKEN", TOKEN)];
    let served = start(dir.path(), config, &env);
    // Event-driven listeners: each holds its slot until it is aborted.
    let first = served.create(TOKEN, &listener_task()).await;
    let mut queued = Vec::new();
    for _ in 0..2 {
        let reply = served
            .send("POST", "/runs", Some(TOKEN), Some(&listener_task()))
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        assert_eq!(reply.body["status"], "queued", "{:?}", reply.body);
        queued.push(reply.body["run_id"].as_str().unwrap().to_string());
    }
    let (second, third) = (queued[0].clone(), queued[1].clone());
    let full = served
        .send("POST", "/runs", Some(TOKEN), Some(&listener_task()))
        .await;
    assert_eq!(full.status, 429, "{:?}", full.body);
    assert!(retry_after(&full) > 0);
    assert_eq!(full.body["error"]["code"], "too_many_requests");
    assert!(
        full.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_queued"),
        "{:?}",
        full.body
    );
    let shown = status(&served, TOKEN, &third).await;
    assert_eq!(shown["status"], "queued", "{shown:?}");
    assert_eq!(shown["position"], 2, "{shown:?}");
    let listed = served.send("GET", "/runs", Some(TOKEN), None).await;
    let statuses: Vec<(String, String)> = listed.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run_id"].as_str().unwrap().into(),
                r["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(statuses.len(), 3, "{statuses:?}");
    for id in [&second, &third] {
        assert!(
            statuses.contains(&(id.clone(), "queued".into())),
            "{statuses:?}"
        );
    }
    // A queued run takes no input until it starts.
    let message = served
        .send(
            "POST",
            &format!("/runs/{second}/messages"),
            Some(TOKEN),
            Some(&json!({"text": "hi"})),
        )
        .await;
    assert_eq!(message.status, 409, "{:?}", message.body);
    let text = metrics(&served, TOKEN).await;
    assert_eq!(
        gauge(&text, "agentry_serve_runs_running"),
        Some(1),
        "{text}"
    );
    assert_eq!(gauge(&text, "agentry_serve_runs_queued"), Some(2), "{text}");

    // The first slot frees: the second starts, the third keeps waiting.
    abort(&served, TOKEN, &first).await;
    served.wait_status(TOKEN, &second, "sleeping").await;
    let shown = status(&served, TOKEN, &third).await;
    assert_eq!(
        (shown["status"].as_str(), shown["position"].as_i64()),
        (Some("queued"), Some(1))
    );
    let run = served.wait_status(TOKEN, &first, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "user_abort", "{run:?}");

    // A restart loses nothing: the second resumes and holds its slot, the
    // third is still queued behind it, then starts when the second stops.
    served.kill();
    let served = start(dir.path(), config, &env);
    served.wait_status(TOKEN, &second, "sleeping").await;
    let shown = status(&served, TOKEN, &third).await;
    assert_eq!(shown["status"], "queued", "{shown:?}");
    abort(&served, TOKEN, &second).await;
    served.wait_status(TOKEN, &third, "sleeping").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_aborted_never_runs() {
    let dir = tempfile::tempdir().unwrap();
    let config = "[serve]\nmax_running = 1\n";
    let served = start(dir.path(), config, &[("AGENTRY_TOKEN", TOKEN)]);
    let first = served.create(TOKEN, &listener_task()).await;
    let second = served.create(TOKEN, &listener_task()).await;
    assert_eq!(status(&served, TOKEN, &second).await["status"], "queued");
    abort(&served, TOKEN, &second).await;
    let run = served.wait_status(TOKEN, &second, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "user_abort", "{run:?}");
    assert_eq!(run["steps"], 0, "{run:?}");
    // Its slot was never taken: the first still runs, alone.
    assert_eq!(status(&served, TOKEN, &first).await["status"], "sleeping");
}

/// Releases held replies every 20 ms until told to stop.
fn keep_releasing(go: Arc<Notify>) -> tokio::task::JoinHandle<()> {
    releasing_every(go, Duration::from_millis(20))
}

/// Releases held replies every `period` until told to stop.
pub(super) fn releasing_every(go: Arc<Notify>, period: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            go.notify_waiters();
            tokio::time::sleep(period).await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_max_concurrent_holds_across_runs_and_fallbacks_measured_at_the_server() {
    const RUNS: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    answer_task(dir.path());
    let go = Arc::new(Notify::new());
    let replies = (0..RUNS)
        .map(|_| {
            Reply::sse(one_call("fin", "task_finish", r#"{"answer":"42"}"#))
                .hold_after(1, Arc::clone(&go))
        })
        .collect();
    let server = MockServer::start(replies).await.unwrap();
    // `front` is down: its runs reach `local` as its fallback, through the
    // same gate as the runs on `local` itself.
    let config = format!(
        "[telemetry]\nmetrics = true\n\
         [agents.direct]\ntask = \"tasks/answer\"\nmodel = \"local\"\n\
         [agents.via]\ntask = \"tasks/answer\"\nmodel = \"front\"\n\
         [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"{}/v1\"\nmax_concurrent = 2\n\
         [models.front]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"http://127.0.0.1:9/v1\"\nfallback = [\"local\"]\n",
        server.base_url
    );
    let served = start(dir.path(), &config, &[("AGENTRY_TOKEN", TOKEN)]);
    let mut ids = Vec::new();
    for i in 0..RUNS {
        let agent = if i % 2 == 0 { "direct" } else { "via" };
        ids.push(
            served
                .create(TOKEN, &json!({"agent": agent, "input": "six times seven?"}))
                .await,
        );
    }
    let deadline = Instant::now() + WAIT;
    while server.in_flight() < 2 {
        assert!(Instant::now() < deadline, "never two requests in flight");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The other three wait at the gate, not at the server.
    let text = wait_gauge(
        &served,
        TOKEN,
        "agentry_serve_model_requests_throttled{model=\"local\"}",
        3,
    )
    .await;
    assert_eq!(
        gauge(
            &text,
            "agentry_serve_model_requests_in_flight{model=\"local\"}"
        ),
        Some(2),
        "{text}"
    );
    assert_eq!(server.received().len(), 2);
    let releasing = keep_releasing(Arc::clone(&go));
    for id in &ids {
        let run = served.wait_status(TOKEN, id, "stopped").await;
        assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    }
    releasing.abort();
    assert_eq!(server.received().len(), RUNS);
    assert_eq!(server.most_in_flight(), 2);
    assert!(server.rejected().is_empty(), "{:?}", server.rejected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_429_to_one_run_holds_back_every_run_on_the_model() {
    let dir = tempfile::tempdir().unwrap();
    answer_task(dir.path());
    let finish = || Reply::sse(one_call("fin", "task_finish", r#"{"answer":"42"}"#));
    let server = MockServer::start(vec![
        Reply::status(429, "{\"error\":\"slow down\"}").header("retry-after", "2"),
        finish(),
        finish(),
    ])
    .await
    .unwrap();
    let config = format!(
        "[agents.direct]\ntask = \"tasks/answer\"\nmodel = \"local\"\n\
         [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"{}/v1\"\n",
        server.base_url
    );
    let served = start(dir.path(), &config, &[("AGENTRY_TOKEN", TOKEN)]);
    let body = json!({"agent": "direct", "input": "six times seven?"});
    let first = served.create(TOKEN, &body).await;
    let deadline = Instant::now() + WAIT;
    while server.received().is_empty() {
        assert!(Instant::now() < deadline, "the first run never asked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The second run starts while the first waits out the provider's 2 s.
    let second = served.create(TOKEN, &body).await;
    for id in [&first, &second] {
        let run = served.wait_status(TOKEN, id, "stopped").await;
        assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    }
    let received = server.received();
    assert_eq!(received.len(), 3);
    let held_until = received[0].at + Duration::from_secs(2);
    assert!(
        received[1].at >= held_until && received[2].at >= held_until,
        "a request started before the provider's Retry-After passed"
    );
}

/// A tokens file for acme and globex, and a config with these tables.
fn tenants_config(dir: &Path, rest: &str) -> String {
    let tokens = tokens_file(dir, &[("acme", ACME), ("globex", GLOBEX)]);
    format!(
        "[auth]\ntokens_file = \"{}\"\n[telemetry]\nmetrics = true\n{rest}",
        tokens.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_at_its_max_running_queues_without_holding_back_other_tenants() {
    let dir = tempfile::tempdir().unwrap();
    let config = tenants_config(dir.path(), "[tenants.acme]\nmax_running = 1\n");
    let served = start(dir.path(), &config, &[]);
    let a1 = served.create(ACME, &listener_task()).await;
    let a2 = served.create(ACME, &listener_task()).await;
    assert_eq!(status(&served, ACME, &a2).await["status"], "queued");
    // globex's runs start at once, past acme's queued one.
    let g1 = served.create(GLOBEX, &listener_task()).await;
    let g2 = served.create(GLOBEX, &listener_task()).await;
    for id in [&g1, &g2] {
        served.wait_status(GLOBEX, id, "sleeping").await;
    }
    let text = metrics(&served, ACME).await;
    for (series, value) in [
        ("agentry_serve_tenant_runs_running{tenant=\"acme\"}", 1),
        ("agentry_serve_tenant_runs_queued{tenant=\"acme\"}", 1),
        ("agentry_serve_tenant_runs_running{tenant=\"globex\"}", 2),
        ("agentry_serve_runs_running", 3),
    ] {
        assert_eq!(gauge(&text, series), Some(value), "{series}: {text}");
    }
    // Tenants are labels by name only: no token, no other name.
    for token in [ACME, GLOBEX] {
        assert!(!text.contains(token), "{text}");
    }
    let labelled: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("tenant=\"").nth(1)?.split('"').next())
        .collect();
    assert!(
        labelled.iter().all(|t| ["acme", "globex"].contains(t)),
        "{labelled:?}"
    );
    abort(&served, ACME, &a1).await;
    served.wait_status(ACME, &a2, "sleeping").await;
}

/// Seconds to the next UTC midnight.
fn to_midnight() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    86_400 - now % 86_400
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_cost_for_the_day_is_429_until_midnight_and_a_run_gets_what_is_left() {
    let dir = tempfile::tempdir().unwrap();
    answer_task(dir.path());
    // Each turn: 10 tokens in, 5 out, at 40000 a million each: 0.6.
    let server = MockServer::start(vec![
        Reply::sse(one_call("fin", "task_finish", r#"{"answer":"42"}"#)),
        Reply::sse(one_call("read", "fs_read", r#"{"path":"note.txt"}"#)),
        Reply::sse(one_call("fin", "task_finish", r#"{"answer":"42"}"#)),
    ])
    .await
    .unwrap();
    let rest = format!(
        "[tenants.acme]\nmax_cost_per_day = 1.0\n\
         [agents.direct]\ntask = \"tasks/answer\"\nmodel = \"local\"\n\
         [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"{}/v1\"\n\
         input_price = 40000\noutput_price = 40000\n",
        server.base_url
    );
    let config = tenants_config(dir.path(), &rest);
    let served = start(dir.path(), &config, &[]);
    let body = json!({"agent": "direct", "input": "six times seven?", "files": {"note.txt": "42"}});
    let first = served.create(ACME, &body).await;
    let run = served.wait_status(ACME, &first, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    let series = "agentry_serve_tenant_cost_today_micros{tenant=\"acme\"}";
    wait_gauge(&served, ACME, series, 600_000).await;
    // 0.4 is left: the second run's budget is capped there, so its first
    // turn (0.6) is its last, though the agent's own budget has no max_cost.
    let second = served.create(ACME, &body).await;
    let run = served.wait_status(ACME, &second, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "max_cost", "{run:?}");
    wait_gauge(&served, ACME, series, 1_200_000).await;
    let refused = served.send("POST", "/runs", Some(ACME), Some(&body)).await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_cost_per_day"), "{message}");
    let wait = retry_after(&refused);
    assert!(
        wait.abs_diff(to_midnight()) <= 5,
        "{wait} vs {}",
        to_midnight()
    );
    // Another tenant is not held back.
    let other = served.create(GLOBEX, &body).await;
    let run = served.wait_status(GLOBEX, &other, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    // A restart does not give acme its day back.
    served.kill();
    let served = start(dir.path(), &config, &[]);
    let refused = served.send("POST", "/runs", Some(ACME), Some(&body)).await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
}

#[test]
fn bad_limits_are_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        ("[serve]\nmax_running = 0\n", "serve.max_running"),
        ("[serve]\nmax_queued = \"ten\"\n", "serve.max_queued"),
        ("[tenants.nobody]\nmax_running = 1\n", "tenants.nobody"),
        (
            "[tenants.default]\nmax_cost_per_day = -1\n",
            "tenants.default.max_cost_per_day",
        ),
        (
            "[models.m]\nprovider = \"openai\"\nmodel = \"x\"\nmax_concurrent = 0\n",
            "models.m.max_concurrent",
        ),
    ] {
        let config = dir.path().join("serve.toml");
        std::fs::write(&config, text).unwrap();
        let store = dir.path().join("runs.db");
        let out = super::serve::refused(
            &["--config", path_str(&config), "--store", path_str(&store)],
            &[("AGENTRY_TOKEN", TOKEN)],
        );
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(key), "{text}: {}", stderr(&out));
    }
}

/// `[serve] max_message_bytes` takes effect: a 2 KiB message is 413 naming
/// the key, a small one is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_message_bytes_in_serve_toml_refuses_a_larger_message() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("AGENTRY_TOKEN", TOKEN)];
    let served = start(dir.path(), "[serve]\nmax_message_bytes = 1024\n", &env);
    let id = served.create(TOKEN, &listener_task()).await;
    let path = format!("/runs/{id}/messages");
    let big = json!({"text": "x".repeat(2048)});
    let reply = served.send("POST", &path, Some(TOKEN), Some(&big)).await;
    assert_eq!(reply.status, 413, "{:?}", reply.body);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_message_bytes"), "{message}");
    assert!(message.contains("1024"), "{message}");
    let small = json!({"text": "hello"});
    let reply = served.send("POST", &path, Some(TOKEN), Some(&small)).await;
    assert_eq!(reply.status, 202, "{:?}", reply.body);
}

/// A bad guard limit in serve.toml keeps `agentry serve` from starting:
/// exit 2, the key named.
#[test]
fn a_bad_guard_limit_in_serve_toml_is_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (text, key) in [
        (
            "[serve]\nmax_message_bytes = 0\n",
            "serve.max_message_bytes",
        ),
        (
            "[serve]\nheader_timeout = \"soon\"\n",
            "serve.header_timeout",
        ),
        (
            "[serve]\nmax_connections = 4\nmax_streams = 4\n",
            "serve.max_streams",
        ),
    ] {
        let config = dir.path().join("serve.toml");
        std::fs::write(&config, text).unwrap();
        let store = dir.path().join("runs.db");
        let out = super::serve::refused(
            &["--config", path_str(&config), "--store", path_str(&store)],
            &[("AGENTRY_TOKEN", TOKEN)],
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(err.contains(key), "{text}: {err}");
    }
}
