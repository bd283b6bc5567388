//! `agentry serve --store postgres://…`: the service's own tables (its
//! queue, each tenant's spend of the day, the webhook outbox) live in the
//! store's Postgres database, shared by every `agentry serve` on it. Real
//! binaries on 127.0.0.1, the test harness's private PostgreSQL server.
//!
//! - a run on Postgres goes to its end, `/healthz` is ok, and the store is
//!   named without its password;
//! - a run queued past `max_running` outlives its node's SIGKILL and starts
//!   on a node that comes back on the same database;
//! - a tenant's spend of the day is the sum across nodes, and stays;
//! - webhooks of runs on two nodes are each sent once per attempt;
//! - `[serve] max_running` holds for every node on the database;
//! - `/healthz` is 503 while the Postgres server is stopped, 200 once back.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use agentry_test_postgres::PgServer;
use serde_json::json;

use super::receiver::{Post, Receiver};
use super::serve::{Reply as Answer, Served, WAIT, listener_task, tokens_file};
use super::serve_webhooks::{SECRET, SECRET_ENV, hooks_section, quick_task};
use crate::server::{MockServer, Reply};
use crate::sse::one_call;
use crate::*;

const TOKEN: &str = "pg-serve-token-41d7";
const ACME: &str = "pg-acme-token-0b9e";

/// `agentry serve` on the database `url`, with `config` written to
/// `dir/NAME.toml` (nodes of one test have names of their own).
fn node(dir: &Path, name: &str, url: &str, config: &str, env: &[(&str, &str)]) -> Served {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, config).unwrap();
    Served::start(&["--config", path_str(&path), "--store", url], env)
}

/// The password of a harness URL (`postgres://agentry:PASSWORD@…`).
fn password(url: &str) -> &str {
    url.split(':').nth(2).unwrap().split('@').next().unwrap()
}

/// `url` as messages name it: without the password.
fn shown(url: &str) -> String {
    url.replace(&format!(":{}@", password(url)), "@")
}

async fn health(served: &Served) -> Answer {
    served.send("GET", "/healthz", None, None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn serve_on_postgres_runs_a_task_to_its_end_and_is_healthy() {
    let url = PgServer::shared().database();
    let dir = tempfile::tempdir().unwrap();
    let served = node(dir.path(), "a", &url, "", &[("AGENTRY_TOKEN", TOKEN)]);
    let log = served.log.lock().unwrap().clone();
    assert!(
        log.contains(&format!("runs are stored in {}", shown(&url))),
        "{log}"
    );
    assert!(!log.contains(password(&url)), "{log}");
    let reply = health(&served).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    assert_eq!(reply.body, json!({"status": "ok", "store": "ok"}));
    let id = served.create(TOKEN, &quick_task("42")).await;
    let run = served.wait_status(TOKEN, &id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    assert_eq!(run["outcome"]["answer"], "42", "{run:?}");
    // The service's tables are in the database, beside the store's.
    let pg = PgServer::shared();
    let db = url.rsplit('/').next().unwrap();
    let tables = pg.superuser_sql(
        db,
        "SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables \
         WHERE table_schema = 'agentry' AND table_name LIKE 'serve_%'",
    );
    assert_eq!(tables, "serve_queue,serve_slots,serve_spend");
    let log = served.log.lock().unwrap().clone();
    assert!(!log.contains(password(&url)), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_run_queued_on_a_killed_node_starts_on_a_node_that_comes_back() {
    let url = PgServer::shared().database();
    let dir = tempfile::tempdir().unwrap();
    let config = "[serve]\nmax_running = 1\n";
    let env = [("AGENTRY_TOKEN", TOKEN)];
    let first = node(dir.path(), "a", &url, config, &env);
    // A listener holds the one slot until it is aborted.
    let holder = first.create(TOKEN, &listener_task()).await;
    first.wait_status(TOKEN, &holder, "sleeping").await;
    let reply = first
        .send("POST", "/runs", Some(TOKEN), Some(&quick_task("queued")))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.body["status"], "queued", "{:?}", reply.body);
    let queued = reply.body["run_id"].as_str().unwrap().to_string();
    first.kill();

    // The next node resumes the holder, then takes the queued run once the
    // killed node's hold on it lapses, and starts it when the slot frees.
    let second = node(dir.path(), "b", &url, config, &env);
    second.wait_status(TOKEN, &holder, "sleeping").await;
    second.wait_status(TOKEN, &queued, "queued").await;
    let aborted = second
        .send(
            "POST",
            &format!("/runs/{holder}/interrupt"),
            Some(TOKEN),
            Some(&json!({"action": "abort"})),
        )
        .await;
    assert_eq!(aborted.status, 202, "{:?}", aborted.body);
    let run = second.wait_status(TOKEN, &queued, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    assert_eq!(run["outcome"]["answer"], "queued", "{run:?}");
    // Started, it leaves the queue's table.
    let db = url.rsplit('/').next().unwrap();
    let left = PgServer::shared().superuser_sql(db, "SELECT count(*) FROM agentry.serve_queue");
    assert_eq!(left, "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn max_running_holds_for_every_node_on_the_database() {
    let url = PgServer::shared().database();
    let dir = tempfile::tempdir().unwrap();
    let config = "[serve]\nmax_running = 1\n";
    let env = [("AGENTRY_TOKEN", TOKEN)];
    let a = node(dir.path(), "a", &url, config, &env);
    let b = node(dir.path(), "b", &url, config, &env);
    let holder = a.create(TOKEN, &listener_task()).await;
    a.wait_status(TOKEN, &holder, "sleeping").await;
    // Node b runs nothing, but the one slot is a's run's.
    let reply = b
        .send("POST", "/runs", Some(TOKEN), Some(&quick_task("waited")))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    assert_eq!(reply.body["status"], "queued", "{:?}", reply.body);
    let queued = reply.body["run_id"].as_str().unwrap().to_string();
    let aborted = a
        .send(
            "POST",
            &format!("/runs/{holder}/interrupt"),
            Some(TOKEN),
            Some(&json!({"action": "abort"})),
        )
        .await;
    assert_eq!(aborted.status, 202, "{:?}", aborted.body);
    // The slot a frees goes to b's queued run.
    let run = b.wait_status(TOKEN, &queued, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    let db = url.rsplit('/').next().unwrap();
    let slots = PgServer::shared().superuser_sql(db, "SELECT count(*) FROM agentry.serve_slots");
    assert_eq!(slots, "0");
}

/// A tokens file for acme and serve.toml naming `rest`.
fn acme_config(dir: &Path, rest: &str) -> String {
    let tokens = tokens_file(dir, &[("acme", ACME)]);
    format!("[auth]\ntokens_file = \"{}\"\n{rest}", tokens.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_tenants_spend_of_the_day_is_summed_across_nodes_and_kept_in_postgres() {
    let url = PgServer::shared().database();
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tasks/answer");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"answer the user\"\n[budget]\nmax_steps = 3\n[tools]\ngrant = [\"fs.read\"]\n",
    )
    .unwrap();
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
         [agents.direct]\ntask = \"{}\"\nmodel = \"local\"\n\
         [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"{}/v1\"\n\
         input_price = 40000\noutput_price = 40000\n",
        task.display(),
        server.base_url
    );
    let config = acme_config(dir.path(), &rest);
    let a = node(dir.path(), "a", &url, &config, &[]);
    let b = node(dir.path(), "b", &url, &config, &[]);
    let body = json!({"agent": "direct", "input": "six times seven?", "files": {"note.txt": "42"}});
    let first = a.create(ACME, &body).await;
    let run = a.wait_status(ACME, &first, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    // Node b counts what node a's run spent: 0.4 is left, so its run's
    // first turn (0.6) is its last.
    let db = url.rsplit('/').next().unwrap();
    let spent = || {
        PgServer::shared().superuser_sql(
            db,
            "SELECT COALESCE(SUM(to_micros - from_micros), 0) FROM agentry.serve_spend \
             WHERE tenant = 'acme'",
        )
    };
    let deadline = Instant::now() + WAIT;
    while spent() != "600000" {
        assert!(Instant::now() < deadline, "never 600000: {}", spent());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let second = b.create(ACME, &body).await;
    let run = b.wait_status(ACME, &second, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "max_cost", "{run:?}");
    let deadline = Instant::now() + WAIT;
    while spent() != "1200000" {
        assert!(Instant::now() < deadline, "never 1200000: {}", spent());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Node a, which ran only the first, refuses: the day is spent.
    let refused = a.send("POST", "/runs", Some(ACME), Some(&body)).await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_cost_per_day"), "{message}");
    // Both gone, a new node still knows.
    a.kill();
    b.kill();
    let c = node(dir.path(), "c", &url, &config, &[]);
    let refused = c.send("POST", "/runs", Some(ACME), Some(&body)).await;
    assert_eq!(refused.status, 429, "{:?}", refused.body);
}

/// Each POST's status, by `webhook-id`, in order.
fn answers(posts: &[Post]) -> HashMap<String, Vec<u16>> {
    let mut answers: HashMap<String, Vec<u16>> = HashMap::new();
    for post in posts {
        let id = post.header("webhook-id").to_string();
        answers.entry(id).or_default().push(post.answered);
    }
    answers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn webhooks_of_runs_on_two_nodes_are_each_sent_once_per_attempt() {
    let url = PgServer::shared().database();
    let dir = tempfile::tempdir().unwrap();
    // A webhook's first POST is answered 500, every later one 200.
    let receiver = Receiver::answering(|before, post| {
        let id = post.header("webhook-id");
        if before.iter().any(|p| p.header("webhook-id") == id) {
            200
        } else {
            500
        }
    })
    .await;
    let env = [("AGENTRY_TOKEN", TOKEN), (SECRET_ENV, SECRET)];
    let a = node(dir.path(), "a", &url, &hooks_section(), &env);
    let b = node(dir.path(), "b", &url, &hooks_section(), &env);
    let mut ids = Vec::new();
    for served in [&a, &b, &a, &b, &a, &b] {
        let mut body = quick_task("hooked");
        body["webhook"] = json!(receiver.url);
        ids.push(served.create(TOKEN, &body).await);
    }
    // Every webhook fails once (500), is retried 5 s later by whichever
    // node claims it first, and succeeds: two POSTs each, never more.
    let all_delivered = |posts: &[Post]| {
        let got = answers(posts);
        ids.iter().all(|id| {
            got.get(&format!("msg_{id}"))
                .is_some_and(|a| a.contains(&200))
        })
    };
    receiver.until("not all delivered", all_delivered).await;
    // Time for a second sender, had there been one, to show itself.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = answers(&receiver.posts());
    assert_eq!(got.len(), ids.len(), "{got:?}");
    for id in &ids {
        assert_eq!(got[&format!("msg_{id}")], [500, 200], "{got:?}");
    }
    let db = url.rsplit('/').next().unwrap();
    let delivered = PgServer::shared().superuser_sql(
        db,
        "SELECT count(*) FROM agentry.webhook_outbox WHERE state = 'delivered' AND attempts = 2",
    );
    assert_eq!(delivered, ids.len().to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn healthz_is_503_while_postgres_is_stopped_and_200_once_it_is_back() {
    // A private server: stopping the shared one would fail other tests.
    let pg = PgServer::start();
    let url = pg.database();
    let dir = tempfile::tempdir().unwrap();
    let served = node(dir.path(), "a", &url, "", &[("AGENTRY_TOKEN", TOKEN)]);
    let reply = health(&served).await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
    pg.stop();
    let reply = health(&served).await;
    assert_eq!(reply.status, 503, "{:?}", reply.body);
    assert_eq!(reply.body["store"], "unavailable", "{:?}", reply.body);
    assert_eq!(reply.body["status"], "unavailable", "{:?}", reply.body);
    let message = reply.body["error"]["message"].as_str().unwrap();
    assert!(!message.contains(password(&url)), "{message}");
    pg.start_again();
    let deadline = Instant::now() + WAIT;
    loop {
        let reply = health(&served).await;
        if reply.status == 200 {
            assert_eq!(reply.body["store"], "ok", "{:?}", reply.body);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never healthy again: {:?}",
            reply.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And it serves runs again.
    let id = served.create(TOKEN, &quick_task("back")).await;
    let run = served.wait_status(TOKEN, &id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
}
