//! `agentry serve` nodes on one Postgres database: real processes on
//! 127.0.0.1 ports, the test harness's private PostgreSQL server, named
//! agents whose command tools append keyed lines to a ledger file (each
//! line once: the command checks under a lock, so a call run again after a
//! take-over writes nothing twice). A node is killed (SIGKILL) or paused
//! past its lease (SIGSTOP), and the others take its runs over; requests
//! sent to a node that does not hold the run are applied by the one that does.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use super::lease::signal;
use super::serve::Served;
use super::serve_hibernation::message_text;
use crate::*;

const NEEDS_PG: &str = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it";

/// Bound on waiting for a cluster to finish its runs.
pub(super) const FINISH: Duration = Duration::from_secs(240);

/// A cluster's directory: serve.toml, the agents' tasks, the ledger.
pub(super) struct Place {
    pub(super) dir: tempfile::TempDir,
    pub(super) url: String,
}

impl Place {
    /// Agents: `append` (three calls of a keyed append, then done), `chat`
    /// (event-driven, answers every message), `brief` (`chat` with a
    /// deadline of two seconds), `gated` (one append that waits for a
    /// human's approval).
    /// `serve_keys`: more `[serve]` keys, besides `workdir_root` (`work/`).
    pub(super) fn new(serve_keys: &str) -> Place {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("ledger")).unwrap();
        let ledger = root.join("ledger");
        let append_tool = format!(
            "[sandbox]\nwrite = [\"{ledger}\"]\n\
             [[tools.command]]\nname = \"append\"\ndescription = \"append a keyed line\"\n\
             argv = [\"flock\", \"{ledger}/lock\", \"sh\", \"-c\", \"sleep 0.02; k=\\\"$AGENTRY_RUN_ID $AGENTRY_CALL_ID\\\"; grep -qx \\\"$k\\\" {ledger}/lines 2>/dev/null || echo \\\"$k\\\" >> {ledger}/lines\"]\n\
             idempotency = \"idempotent\"\ntimeout = \"60s\"\n",
            ledger = ledger.display()
        );
        let calls = |n: usize| {
            let mut turns: Vec<Value> = (1..=n)
                .map(|i| json!({"tool_calls": [{"id": format!("a{i}"), "name": "append", "arguments": {}}]}))
                .collect();
            turns.push(json!({"final": "done"}));
            json!({ "turns": turns }).to_string()
        };
        task(
            root,
            "append",
            &format!(
                "goal = \"append three lines\"\n[budget]\nmax_steps = 10\ndeadline = \"600s\"\n\
                 [tools]\ngrant = [\"append\"]\n[progress]\nwindow = 0\n{append_tool}"
            ),
            &calls(3),
        );
        task(
            root,
            "gated",
            &format!(
                "goal = \"append once, approved\"\n[budget]\nmax_steps = 10\ndeadline = \"600s\"\n\
                 [tools]\ngrant = [\"append\"]\napprove = [\"append\"]\n[progress]\nwindow = 0\n{append_tool}"
            ),
            &calls(1),
        );
        task(
            root,
            "chat",
            "goal = \"answer every message\"\n[budget]\nmax_steps = 200\ndeadline = \"600s\"\n\
             [driver]\nmode = \"events\"\n[progress]\nwindow = 0\n",
            &json!({"turns": [{"final": "ok"}], "then": "repeat_last"}).to_string(),
        );
        task(
            root,
            "brief",
            "goal = \"answer messages for two seconds\"\n[budget]\nmax_steps = 200\ndeadline = \"2s\"\n\
             [driver]\nmode = \"events\"\n[progress]\nwindow = 0\n",
            &json!({"turns": [{"final": "ok"}], "then": "repeat_last"}).to_string(),
        );
        std::fs::write(
            root.join("serve.toml"),
            format!(
                "[serve]\nworkdir_root = \"{work}\"\n{serve_keys}\n\
                 [agents.append]\ntask = \"tasks/append\"\n\
                 [agents.gated]\ntask = \"tasks/gated\"\n\
                 [agents.chat]\ntask = \"tasks/chat\"\n\
                 [agents.brief]\ntask = \"tasks/brief\"\n",
                work = root.join("work").display()
            ),
        )
        .unwrap();
        let url = agentry_test_postgres::PgServer::shared().database();
        Place { dir, url }
    }

    /// A node on this place's database, with runs leased for `lease`.
    pub(super) fn node(&self, lease: &str) -> Served {
        let config = self.dir.path().join("serve.toml");
        Served::start(
            &[
                "--config",
                path_str(&config),
                "--no-auth",
                "--store",
                &self.url,
                "--lease",
                lease,
            ],
            &[("RUST_LOG", "warn")],
        )
    }

    /// Each ledger line and how often it was written.
    pub(super) fn ledger(&self) -> BTreeMap<String, usize> {
        let text =
            std::fs::read_to_string(self.dir.path().join("ledger/lines")).unwrap_or_default();
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            *counts.entry(line.to_string()).or_insert(0) += 1;
        }
        counts
    }
}

fn task(root: &Path, name: &str, toml: &str, script: &str) {
    let dir = root.join("tasks").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("script.json"), script).unwrap();
}

/// Waits (bounded) until no run of the cluster is unfinished; returns
/// every run's stop reason, by id, as `node` lists them.
async fn all_stopped(node: &Served, expected: usize) -> BTreeMap<String, String> {
    let deadline = Instant::now() + FINISH;
    loop {
        let listed = node.send("GET", "/runs?limit=500", None, None).await;
        assert_eq!(listed.status, 200, "{:?}", listed.body);
        let runs = listed.body["runs"].as_array().cloned().unwrap_or_default();
        let stopped: BTreeMap<String, String> = runs
            .iter()
            .filter(|r| r["status"] == "stopped")
            .map(|r| {
                (
                    r["run_id"].as_str().unwrap().to_string(),
                    r["stop_reason"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        if runs.len() >= expected && stopped.len() == runs.len() {
            return stopped;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} runs stopped after {FINISH:?}",
            stopped.len(),
            runs.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One SSE event of a stream: its `event:`, `id:` and `data:` lines.
pub(super) struct SseEvent {
    pub(super) kind: String,
    pub(super) id: Option<u64>,
    pub(super) data: Option<Value>,
}

/// Reads run `id`'s event stream from `base` (following a redirect), handing
/// each event to `seen` until it returns true; panics if the stream ends
/// first or goes quiet for [`FINISH`].
pub(super) async fn read_stream(base: &str, id: &str, mut seen: impl FnMut(SseEvent) -> bool) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut response = client
        .get(format!("{base}/runs/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut buffer = String::new();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let line = |prefix: &str| block.lines().find_map(|l| l.strip_prefix(prefix));
            let event = SseEvent {
                kind: line("event: ").unwrap_or_default().to_string(),
                id: line("id: ").and_then(|n| n.parse().ok()),
                data: line("data: ").and_then(|d| serde_json::from_str(d).ok()),
            };
            if seen(event) {
                return;
            }
        }
        let chunk = tokio::time::timeout(FINISH, response.chunk())
            .await
            .expect("the stream went quiet")
            .unwrap()
            .unwrap_or_else(|| panic!("run {id}'s stream ended early"));
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

/// The texts of the first `n` messages run `id` applied, in order, from
/// `base`'s stream.
pub(super) async fn applied_messages(base: &str, id: &str, n: usize) -> Vec<String> {
    let mut texts = Vec::new();
    read_stream(base, id, |event| {
        if event.kind == "input_applied"
            && let Some(text) = event.data.as_ref().and_then(message_text)
        {
            texts.push(text);
        }
        texts.len() == n
    })
    .await;
    texts
}

/// The ids of run `id`'s events as `base` streams them, up to `run_stopped`.
pub(super) async fn stream_ids(base: &str, id: &str) -> Vec<u64> {
    let mut ids = Vec::new();
    read_stream(base, id, |event| {
        ids.extend(event.id);
        event.kind == "run_stopped"
    })
    .await;
    ids
}

/// 300 runs created across three nodes; one node is killed while they run.
/// Every run ends done, each call's line is in the ledger exactly once, and
/// the dead node's runs were finished by the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn three_nodes_finish_every_run_when_one_is_killed() {
    const RUNS: usize = 300;
    let place = Place::new("");
    let mut nodes: Vec<Option<Served>> = (0..3).map(|_| Some(place.node("2s"))).collect();
    let mut created_on = vec![Vec::new(); 3];
    for i in 0..RUNS {
        let node = nodes[i % 3].as_ref().expect(NEEDS_PG);
        let reply = node
            .send("POST", "/runs", None, Some(&json!({"agent": "append"})))
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        created_on[i % 3].push(reply.body["run_id"].as_str().unwrap().to_string());
    }
    // Mid-way: some lines are written, most are not.
    let deadline = Instant::now() + FINISH;
    while place.ledger().len() < RUNS / 2 {
        assert!(Instant::now() < deadline, "the runs never got going");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    nodes[0].take().unwrap().kill();
    let survivor = nodes[1].as_ref().unwrap();
    let stopped = all_stopped(survivor, RUNS).await;
    assert_eq!(stopped.len(), RUNS);
    let not_done: Vec<_> = stopped.iter().filter(|(_, r)| *r != "done").collect();
    assert!(
        not_done.is_empty(),
        "runs that did not finish: {not_done:?}"
    );
    let ledger = place.ledger();
    let twice: Vec<_> = ledger.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "lines written more than once: {twice:?}");
    assert_eq!(ledger.len(), RUNS * 3, "one line per call");
    for id in &created_on[0] {
        for call in ["a1", "a2", "a3"] {
            assert!(ledger.contains_key(&format!("{id} {call}")), "{id} {call}");
        }
    }
    // Every run's event stream, from either survivor, numbered 1, 2, 3, ...
    // to its `run_stopped`: nothing missing, nothing twice.
    let bases: Vec<String> = nodes.iter().flatten().map(|n| n.base.clone()).collect();
    for (i, id) in stopped.keys().enumerate() {
        let ids = stream_ids(&bases[i % bases.len()], id).await;
        let expected: Vec<u64> = (1..=ids.len() as u64).collect();
        assert_eq!(ids, expected, "run {id}'s stream");
    }
    let logs: String = nodes
        .iter()
        .flatten()
        .map(|n| n.log.lock().unwrap().clone())
        .collect();
    let taken = logs.matches("took over run").count();
    assert!(taken > 0, "no node took a run over:\n{logs}");
}

/// A node paused past its lease (SIGSTOP) loses its runs to the other node;
/// let go again (SIGCONT), its writes are refused, it drops those runs, and
/// no line is written twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_paused_node_loses_its_runs_and_writes_nothing_twice() {
    const RUNS: usize = 20;
    let place = Place::new("");
    let paused = place.node("1s");
    let other = place.node("1s");
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        let reply = paused
            .send("POST", "/runs", None, Some(&json!({"agent": "append"})))
            .await;
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        ids.push(reply.body["run_id"].as_str().unwrap().to_string());
    }
    signal(paused.pid(), "-STOP");
    let deadline = Instant::now() + FINISH;
    while other.log.lock().unwrap().matches("took over run").count() < 1 {
        assert!(
            Instant::now() < deadline,
            "the other node took nothing over"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stopped = all_stopped(&other, RUNS).await;
    signal(paused.pid(), "-CONT");
    assert!(stopped.values().all(|r| r == "done"), "{stopped:?}");
    // Back, the paused node learns at its next write or heartbeat that its
    // runs are the other's, and lets them go.
    let deadline = Instant::now() + FINISH;
    while !paused
        .log
        .lock()
        .unwrap()
        .contains("taken over by another node")
    {
        assert!(
            Instant::now() < deadline,
            "the paused node never noticed: {}",
            paused.log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in &ids {
        let reply = paused.send("GET", &format!("/runs/{id}"), None, None).await;
        assert_eq!(reply.status, 200, "{:?}", reply.body);
        assert_eq!(reply.body["status"], "stopped", "{:?}", reply.body);
    }
    let ledger = place.ledger();
    assert!(ledger.values().all(|n| *n == 1), "{ledger:?}");
    assert_eq!(ledger.len(), RUNS * 3);
}

/// Messages sent to the node that does not hold a run are applied by the
/// one that does, each once, in the order they were sent; an approval too,
/// answered with its sequence number; the run's state and its event stream
/// are reachable from either node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn inputs_reach_the_node_that_holds_the_run_once_and_in_order() {
    let place = Place::new("");
    let holder = place.node("2s");
    let other = place.node("2s");
    let reply = holder
        .send("POST", "/runs", None, Some(&json!({"agent": "chat"})))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap().to_string();
    for i in 0..10 {
        let sent = other
            .send(
                "POST",
                &format!("/runs/{id}/messages"),
                None,
                Some(&json!({"text": format!("m{i}")})),
            )
            .await;
        assert_eq!(sent.status, 202, "{:?}", sent.body);
        assert_eq!(sent.body["accepted"], true, "{:?}", sent.body);
    }
    // The stream, asked of the other node, is the holder's.
    let texts = applied_messages(&other.base, &id, 10).await;
    let expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(texts, expected);
    let seen = other.send("GET", &format!("/runs/{id}"), None, None).await;
    assert_eq!(seen.status, 200, "{:?}", seen.body);
    assert_eq!(seen.body["inputs"], 10, "{:?}", seen.body);
    // An approval through the other node.
    let reply = holder
        .send("POST", "/runs", None, Some(&json!({"agent": "gated"})))
        .await;
    let gated = reply.body["run_id"].as_str().unwrap().to_string();
    let parked = other.wait_status("", &gated, "awaiting_approval").await;
    let call = parked["pending_approvals"][0]["call"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let decided = other
        .send(
            "POST",
            &format!("/runs/{gated}/approvals/{call}"),
            None,
            Some(&json!({"decision": "approve"})),
        )
        .await;
    assert_eq!(decided.status, 200, "{:?}", decided.body);
    assert!(decided.body["seq"].as_u64().is_some(), "{:?}", decided.body);
    let done = other.wait_status("", &gated, "stopped").await;
    assert_eq!(done["outcome"]["stop_reason"], "done", "{done:?}");
    assert_eq!(place.ledger().get(&format!("{gated} {call}")), Some(&1));
    // A run no node holds and none can: 404 from either.
    let missing = other
        .send(
            "POST",
            "/runs/no-such-run/messages",
            None,
            Some(&json!({"text": "x"})),
        )
        .await;
    assert_eq!(missing.status, 404, "{:?}", missing.body);
}
