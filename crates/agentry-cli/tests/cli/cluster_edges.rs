//! More of a cluster (see `cluster.rs`): a run whose working directory a
//! node cannot reach, a hibernated agent owned by no node and woken where its
//! input lands, a log its node never closed, and the two commands of
//! docs/cluster.md run as written.

use std::time::{Duration, Instant};

use serde_json::json;

use super::cluster::{FINISH, Place, applied_messages, read_stream};
use super::serve::Served;
use crate::*;

/// The working directory a stored run runs in, as its stored config says.
fn stored_workdir(place: &Place, id: &str) -> std::path::PathBuf {
    let db = place.url.rsplit('/').next().unwrap();
    let config = agentry_test_postgres::PgServer::shared().superuser_sql(
        db,
        &format!("SELECT config FROM agentry.runs WHERE run_id = '{id}'"),
    );
    let config: Value = serde_json::from_str(config.trim()).unwrap();
    fn find(value: &Value) -> Option<String> {
        match value {
            Value::Object(map) => map
                .get("workdir")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| map.values().find_map(find)),
            Value::Array(items) => items.iter().find_map(find),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => None,
        }
    }
    find(&config)
        .expect("a workdir in the stored config")
        .into()
}

/// Waits (bounded) until run `id`'s stored status is `status`: a node's
/// view is its live state, which may be a commit ahead of the store.
async fn until_stored(place: &Place, id: &str, status: &str) {
    let db = place.url.rsplit('/').next().unwrap();
    let deadline = Instant::now() + FINISH;
    loop {
        let stored = agentry_test_postgres::PgServer::shared().superuser_sql(
            db,
            &format!("SELECT status FROM agentry.runs WHERE run_id = '{id}'"),
        );
        if stored.trim() == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} never stored {status}: {stored}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until `node`'s view of run `id` satisfies `ok`.
async fn view_until(node: &Served, id: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + FINISH;
    loop {
        let reply = node.send("GET", &format!("/runs/{id}"), None, None).await;
        if reply.status == 200 && ok(&reply.body) {
            return reply.body;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} never got there: {} {:?}\nthe node's log:\n{}",
            reply.status,
            reply.body,
            node.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A node takes a run over only if it can reach the run's working directory:
/// while it cannot, the run waits and its status says why; once it can, the
/// run goes on there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_run_whose_workdir_a_node_cannot_reach_waits_and_says_why() {
    let place = Place::new("");
    let first = place.node("1s");
    let second = place.node("1s");
    let reply = first
        .send("POST", "/runs", None, Some(&json!({"agent": "gated"})))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap().to_string();
    let parked = first.wait_status("", &id, "awaiting_approval").await;
    let call = parked["pending_approvals"][0]["call"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    until_stored(&place, &id, "awaiting_approval").await;
    let workdir = stored_workdir(&place, &id);
    assert!(
        workdir.starts_with(place.dir.path().join("work")),
        "made under [serve] workdir_root: {}",
        workdir.display()
    );
    let away = workdir.with_extension("away");
    first.kill();
    std::fs::rename(&workdir, &away).unwrap();
    let waiting = view_until(&second, &id, |view| {
        view["note"]
            .as_str()
            .is_some_and(|n| n.contains("cannot reach its working directory"))
    })
    .await;
    assert_eq!(waiting["status"], "awaiting_approval", "{waiting:?}");
    std::fs::rename(&away, &workdir).unwrap();
    let deadline = Instant::now() + FINISH;
    while !second
        .log
        .lock()
        .unwrap()
        .contains(&format!("took over run {id}"))
    {
        assert!(Instant::now() < deadline, "never taken over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let held = view_until(&second, &id, |view| view.get("note").is_none()).await;
    assert_eq!(held["status"], "awaiting_approval", "{held:?}");
    let decided = second
        .send(
            "POST",
            &format!("/runs/{id}/approvals/{call}"),
            None,
            Some(&json!({"decision": "approve"})),
        )
        .await;
    assert_eq!(decided.status, 200, "{:?}", decided.body);
    let done = second.wait_status("", &id, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
}

/// How many owner rows run `id` has (0: owned by no node).
fn owners_of(place: &Place, id: &str) -> u32 {
    let db = place.url.rsplit('/').next().unwrap();
    agentry_test_postgres::PgServer::shared()
        .superuser_sql(
            db,
            &format!("SELECT count(*) FROM agentry.owners WHERE run_id = '{id}'"),
        )
        .trim()
        .parse()
        .unwrap()
}

/// Waits (bounded) until run `id` is owned by no node.
async fn until_unowned(place: &Place, id: &str) {
    let deadline = Instant::now() + FINISH;
    while owners_of(place, id) != 0 {
        assert!(Instant::now() < deadline, "run {id} never let its lease go");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (bounded) until `node`'s log says it woke run `id`.
async fn until_woken_by(node: &Served, id: &str) {
    let deadline = Instant::now() + FINISH;
    while !node.log.lock().unwrap().contains(&format!("woke run {id}")) {
        assert!(
            Instant::now() < deadline,
            "run {id} never woke on this node:\n{}",
            node.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A hibernated agent is owned by no node: it lets its lease go, and
/// whichever node its next input reaches takes the lease and wakes it;
/// the node it slept on plays no part (killed, the agent wakes all the
/// same). Its stream holds every message, once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_hibernated_agent_is_owned_by_no_node_and_wakes_where_its_input_lands() {
    let place = Place::new("hibernate_after = \"100ms\"");
    let first = place.node("1s");
    let second = place.node("1s");
    let reply = first
        .send(
            "POST",
            "/runs",
            None,
            Some(&json!({"agent": "chat", "input": "m0"})),
        )
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap().to_string();
    // A stream opened before it sleeps stays open across the rest and the wakes.
    let early = tokio::spawn(applied_messages_owned(second.base.clone(), id.clone(), 3));
    view_until(&second, &id, |v| {
        v["status"] == "sleeping" && v["inputs"] == 1
    })
    .await;
    // Past hibernate_after: out of memory on the first node and owned by none.
    until_unowned(&place, &id).await;
    let resting = view_until(&second, &id, |v| v.get("note").is_some()).await;
    assert!(
        resting["note"]
            .as_str()
            .unwrap()
            .contains("hibernated and owned by no node"),
        "{resting:?}"
    );
    let sent = second
        .send(
            "POST",
            &format!("/runs/{id}/messages"),
            None,
            Some(&json!({"text": "m1"})),
        )
        .await;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    until_woken_by(&second, &id).await;
    view_until(&first, &id, |v| {
        v["status"] == "sleeping" && v["inputs"] == 2
    })
    .await;
    // Asleep again: the second node lets it go too; its first node dies.
    until_unowned(&place, &id).await;
    assert!(
        !first.log.lock().unwrap().contains("woke run"),
        "the node it first slept on never woke it"
    );
    first.kill();
    let third = place.node("1s");
    let sent = third
        .send(
            "POST",
            &format!("/runs/{id}/messages"),
            None,
            Some(&json!({"text": "m2"})),
        )
        .await;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    until_woken_by(&third, &id).await;
    view_until(&second, &id, |v| {
        v["inputs"] == 3 && v["status"] == "sleeping"
    })
    .await;
    let texts = applied_messages(&third.base, &id, 3).await;
    assert_eq!(texts, ["m0", "m1", "m2"]);
    let streamed = tokio::time::timeout(FINISH, early).await.unwrap().unwrap();
    assert_eq!(
        streamed,
        ["m0", "m1", "m2"],
        "the stream opened before the rest"
    );
}

/// [`applied_messages`] for a task of its own.
async fn applied_messages_owned(base: String, id: String, n: usize) -> Vec<String> {
    applied_messages(&base, &id, n).await
}

/// A resting agent (hibernated, owned by no node) whose deadline passes
/// with no input is woken by a node's take-over scan and stopped at it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_resting_agent_past_its_deadline_is_woken_and_stopped_by_some_node() {
    let place = Place::new("hibernate_after = \"100ms\"");
    let first = place.node("1s");
    let second = place.node("1s");
    let reply = first
        .send("POST", "/runs", None, Some(&json!({"agent": "brief"})))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap().to_string();
    until_unowned(&place, &id).await;
    let done = view_until(&second, &id, |v| v["status"] == "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "deadline", "{done:?}");
    let woken = [&first, &second]
        .iter()
        .any(|node| node.log.lock().unwrap().contains(&format!("woke run {id}")));
    assert!(woken, "a node's scan woke it");
}

/// The two commands of docs/cluster.md, run as written: a private Postgres
/// from Debian's package (`examples/cluster/postgres.sh`), then two nodes
/// (`examples/cluster/nodes.sh 2`); a run created on one is seen done on
/// the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn the_documented_two_commands_start_a_cluster() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // The server runs as the postgres user when the test runs as root.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cluster = dir.path().join("cluster");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let script = |name: &str, args: &[&str]| {
        let out = Command::new(root().join("examples/cluster").join(name))
            .args(args)
            .current_dir(dir.path())
            .env("AGENTRY_CLUSTER_DIR", &cluster)
            .env("PGPORT", ports[0].to_string())
            .env("BASE_PORT", (ports[1] - 1).to_string())
            .env("AGENTRY", env!("CARGO_BIN_EXE_agentry"))
            .env_remove("AGENTRY_STORE")
            .env_remove("AGENTRY_TOKEN")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    /// Stops the nodes and the server, passed or not.
    struct Stop<F: Fn(&str, &[&str]) -> String>(F);
    impl<F: Fn(&str, &[&str]) -> String> Drop for Stop<F> {
        fn drop(&mut self) {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                (self.0)("nodes.sh", &["stop"]);
                (self.0)("postgres.sh", &["stop"]);
            }));
        }
    }
    let url = script("postgres.sh", &[]);
    let stop = Stop(script);
    assert_eq!(
        url.trim(),
        format!("postgres://agentry@127.0.0.1:{}/agentry", ports[0])
    );
    // Two nodes, so the one after the first is BASE_PORT + 2.
    let bases = (stop.0)("nodes.sh", &["2"]);
    let bases: Vec<&str> = bases.lines().collect();
    assert_eq!(bases.len(), 2, "{bases:?}");
    agentry_models::install_crypto_provider();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let created: Value = client
        .post(format!("{}/runs", bases[0]))
        .json(&json!({"goal": "answer", "script": {"turns": [{"final": "42"}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["run_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + FINISH;
    loop {
        let seen: Value = client
            .get(format!("{}/runs/{id}", bases[1]))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if seen["status"] == "stopped" {
            assert_eq!(seen["outcome"]["answer"], "42", "{seen}");
            break;
        }
        assert!(Instant::now() < deadline, "{seen}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stop);
}

/// A port nothing listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// New runs sent to one node are placed on the nodes with the most room:
/// with three nodes, a dozen runs created on the first end up on all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn new_runs_are_placed_on_the_nodes_with_the_most_room() {
    const RUNS: usize = 12;
    let place = Place::new("");
    let nodes: Vec<Served> = (0..3).map(|_| place.node("2s")).collect();
    // Every node beat once, with its load, before the first run.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        let reply = nodes[0]
            .send("POST", "/runs", None, Some(&json!({"agent": "chat"})))
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        ids.push(reply.body["run_id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        view_until(&nodes[0], id, |v| v["status"] == "sleeping").await;
    }
    let db = place.url.rsplit('/').next().unwrap();
    let held = agentry_test_postgres::PgServer::shared().superuser_sql(
        db,
        "SELECT n.node_id, count(*) FROM agentry.owners o
         JOIN agentry.cluster_nodes n ON n.owner_key = o.machine || '#' || o.pid
         GROUP BY n.node_id ORDER BY n.node_id",
    );
    let counts: Vec<usize> = held
        .lines()
        .filter_map(|line| line.rsplit('|').next()?.trim().parse().ok())
        .collect();
    assert_eq!(counts.len(), 3, "runs on every node: {held}");
    assert_eq!(counts.iter().sum::<usize>(), RUNS, "{held}");
    assert!(counts.iter().all(|n| *n >= 2), "spread out: {held}");
}

/// A run whose node died between committing its stop and writing
/// `run_stopped` (made here by deleting that event and dating the stop back):
/// its stream still ends with a `run_stopped` carrying the stored reason,
/// numbered after the last event, the same for every reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_log_whose_node_died_before_run_stopped_is_closed_by_its_readers() {
    let place = Place::new("");
    let node = place.node("1s");
    let reply = node
        .send("POST", "/runs", None, Some(&json!({"agent": "append"})))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap().to_string();
    node.wait_status("", &id, "stopped").await;
    let db = place.url.rsplit('/').next().unwrap();
    let sql = |q: &str| agentry_test_postgres::PgServer::shared().superuser_sql(db, q);
    // Its writer may still be on its way: wait for the real one, then lose it.
    let deadline = Instant::now() + FINISH;
    let count = format!(
        "SELECT count(*) FROM agentry.run_events WHERE run_id = '{id}' AND kind = 'run_stopped'"
    );
    while sql(&count) != "1" {
        assert!(Instant::now() < deadline, "run_stopped never written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let last: u64 = sql(&format!(
        "DELETE FROM agentry.run_events WHERE run_id = '{id}' AND kind = 'run_stopped' RETURNING seq"
    ))
    .parse()
    .unwrap();
    sql(&format!(
        "UPDATE agentry.runs SET updated_at_ms = updated_at_ms - 60000 WHERE run_id = '{id}'"
    ));
    for _ in 0..2 {
        let mut seen = Vec::new();
        read_stream(&node.base, &id, |event| {
            let stopped = event.kind == "run_stopped";
            seen.push((event.id, event.data));
            stopped
        })
        .await;
        let (closing_id, closing) = seen.last().unwrap();
        assert_eq!(*closing_id, Some(last), "numbered where the lost one was");
        let closing = closing.as_ref().unwrap();
        assert_eq!(closing["event"]["stop_reason"], "done", "{closing}");
        assert_eq!(closing["seq"], last, "{closing}");
        let ids: Vec<u64> = seen.iter().filter_map(|(id, _)| *id).collect();
        assert_eq!(ids, (1..=last).collect::<Vec<_>>());
    }
    assert_eq!(sql(&count), "1", "closed once");
}
