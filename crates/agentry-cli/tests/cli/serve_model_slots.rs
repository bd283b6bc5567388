//! `[models.NAME] max_concurrent` on a cluster: two `agentry serve` nodes
//! on one Postgres database (the test harness's private server), one named
//! model pointing at a real OpenAI-compatible server on 127.0.0.1 that
//! counts the requests in flight at once. Each node's own gate would let one
//! request through; the cluster lets one through in all. A node killed
//! while it holds the slot holds it no longer than the slots' lease.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::Notify;

use super::serve::{Served, WAIT};
use super::serve_limits::{answer_task, releasing_every};
use crate::server::{MockServer, Reply};
use crate::sse::one_call;
use crate::*;

const TOKEN: &str = "model-slots-token-3c8a";

/// Runs started, alternating between the two nodes.
const RUNS: usize = 6;

/// A node on the database `url` whose agent `direct` runs on the named
/// model `local` (`max_concurrent = 1`) served by `server`.
fn node(dir: &Path, url: &str, server: &MockServer) -> Served {
    let config = format!(
        "[agents.direct]\ntask = \"tasks/answer\"\nmodel = \"local\"\n\
         [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\nbase_url = \"{}/v1\"\nmax_concurrent = 1\n",
        server.base_url
    );
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    Served::start(
        &["--config", path_str(&path), "--store", url],
        &[("AGENTRY_TOKEN", TOKEN), ("RUST_LOG", "warn")],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_models_max_concurrent_holds_for_the_cluster_measured_at_the_server() {
    let dir = tempfile::tempdir().unwrap();
    answer_task(dir.path());
    // Each reply is held until the next release (every 200 ms).
    let go = Arc::new(Notify::new());
    let replies = (0..RUNS)
        .map(|_| {
            Reply::sse(one_call("fin", "task_finish", r#"{"answer":"42"}"#))
                .hold_after(1, Arc::clone(&go))
        })
        .collect();
    let server = MockServer::start(replies).await.unwrap();
    let url = agentry_test_postgres::PgServer::shared().database();
    let nodes = [
        node(dir.path(), &url, &server),
        node(dir.path(), &url, &server),
    ];
    let releasing = releasing_every(Arc::clone(&go), Duration::from_millis(200));
    let mut started = Vec::new();
    for i in 0..RUNS {
        let on = &nodes[i % 2];
        let id = on
            .create(
                TOKEN,
                &json!({"agent": "direct", "input": "six times seven?"}),
            )
            .await;
        started.push((on, id));
    }
    for (on, id) in &started {
        let run = on.wait_status(TOKEN, id, "stopped").await;
        assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    }
    releasing.abort();
    assert_eq!(server.received().len(), RUNS);
    assert_eq!(server.most_in_flight(), 1, "requests in flight at once");
    assert!(server.rejected().is_empty(), "{:?}", server.rejected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_model_slot_held_by_a_killed_node_lapses_and_the_others_go_on() {
    let dir = tempfile::tempdir().unwrap();
    answer_task(dir.path());
    let finish = || Reply::sse(one_call("fin", "task_finish", r#"{"answer":"42"}"#));
    // The first request is never answered (its node is killed meanwhile);
    // the others (the second node's run, and the killed node's run once
    // taken over) are.
    let never = Arc::new(Notify::new());
    let server = MockServer::start(vec![
        finish().hold_after(1, Arc::clone(&never)),
        finish(),
        finish(),
    ])
    .await
    .unwrap();
    let url = agentry_test_postgres::PgServer::shared().database();
    let first = node(dir.path(), &url, &server);
    let second = node(dir.path(), &url, &server);
    let body = json!({"agent": "direct", "input": "six times seven?"});
    first.create(TOKEN, &body).await;
    let deadline = Instant::now() + WAIT;
    while server.in_flight() < 1 {
        assert!(Instant::now() < deadline, "the first request never came");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill();
    // Its slot's row stays until its lease lapses; then this run goes on.
    let id = second.create(TOKEN, &body).await;
    let run = second.wait_status(TOKEN, &id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    assert_eq!(server.most_in_flight(), 1, "requests in flight at once");
}
