//! AG-UI on a cluster, checked by AG-UI's official client (`peers/agui.cjs`,
//! as in serve_agui.rs): a thread started on node A is streamed, resumed
//! and messaged through node B, which reads the run's kept events and sends
//! each input as the native request it stands for; a new thread's run is
//! placed as `POST /runs` places it, and followed from the node that took
//! the RunAgentInput.

use serde_json::json;

use super::cluster::Place;
use super::serve_agui::{agui_dir, client, first, types};
use crate::*;

/// The pid of the node process that holds run `id` (its owner row, once
/// the run's first commit wrote it).
pub(super) fn holder_pid(place: &Place, id: &str) -> u32 {
    let db = place.url.rsplit('/').next().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let pid = agentry_test_postgres::PgServer::shared().superuser_sql(
            db,
            &format!("SELECT pid FROM agentry.owners WHERE run_id = '{id}'"),
        );
        if let Ok(pid) = pid.trim().parse() {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run {id} has no owner: {pid:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The agentry run a segment's events are of (the `agentry.run` CUSTOM event).
fn run_of(events: &Value) -> String {
    first(events, "CUSTOM")["value"]["run_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The last event, which must be RUN_FINISHED.
fn finished(events: &Value) -> &Value {
    let last = events.as_array().unwrap().last().unwrap();
    assert_eq!(last["type"], "RUN_FINISHED", "{events}");
    last
}

/// Run `id`'s AG-UI stream through the node at `base`: the segment to its
/// parked call `a1` of `gated`, read from the kept events.
fn parked_as_seen_from(base: &str, id: &str) {
    let got = client(&["get", base, "none", id]);
    assert_eq!(got["ok"], true, "{got}");
    let events = &got["events"];
    let kinds = types(events);
    assert_eq!(kinds[0], "RUN_STARTED", "{kinds:?}");
    assert_eq!(first(events, "RUN_STARTED")["threadId"], id);
    assert_eq!(run_of(events), id);
    assert_eq!(
        first(events, "STATE_SNAPSHOT")["snapshot"]["goal"],
        "append once, approved"
    );
    assert_eq!(first(events, "TOOL_CALL_START")["toolCallName"], "append");
    let approval = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "agentry.approval")
        .unwrap_or_else(|| panic!("no approval: {kinds:?}"));
    assert_eq!(approval["value"]["tool_call_id"], "a1", "{approval}");
    let interrupt = &finished(events)["outcome"]["interrupts"][0];
    assert_eq!(
        (&interrupt["id"], &interrupt["reason"]),
        (&json!("a1"), &json!("approval_required")),
        "{events}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and @ag-ui/client (AGUI_DIR); .ci/run runs it"]
async fn a_thread_node_a_holds_is_streamed_and_resumed_through_node_b() {
    agui_dir();
    let place = Place::new("");
    let a = place.node("10s");
    let b = place.node("10s");

    // Started on A: the one call waits for a human's approval.
    let plan = json!([{"runId": "r1", "message": "go"}]).to_string();
    let seen = client(&["post", &a.base, "none", "gated", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    let id = run_of(&call["events"]);
    assert_eq!(holder_pid(&place, &id), a.pid());
    let parked = finished(&call["events"]);
    assert_eq!(parked["outcome"]["type"], "interrupt", "{parked}");
    assert_eq!(parked["outcome"]["interrupts"][0]["id"], "a1", "{parked}");

    // Its AG-UI stream through B: the same segment, from the kept events,
    // to the same interrupt.
    parked_as_seen_from(&b.base, &id);

    // Resumed through B, which never saw the thread: its id is the run's.
    let resume = json!([{"runId": "r2",
        "resume": [{"interruptId": "a1", "status": "resolved", "payload": {"approved": true}}]}])
    .to_string();
    let seen = client(&["post", &b.base, "none", "gated", &resume, &id]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    assert_eq!(call["result"], "done", "{call}");
    let events = &call["events"];
    assert_eq!(run_of(events), id);
    let kinds = types(events);
    let at = |kind: &str| kinds.iter().position(|k| k == kind);
    assert!(
        at("TOOL_CALL_RESULT") < at("TEXT_MESSAGE_CONTENT"),
        "{kinds:?}"
    );
    assert_eq!(first(events, "TOOL_CALL_RESULT")["toolCallId"], "a1");
    assert_eq!(
        finished(events)["outcome"],
        json!({"type": "success"}),
        "{events}"
    );
    // The run stayed A's, and its call ran once.
    let run = a.wait_status("none", &id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run}");
    let line = format!("{id} a1");
    assert_eq!(place.ledger().get(&line), Some(&1), "{:?}", place.ledger());

    // A resume of the stopped run is the store's refusal; its whole
    // stream, through B, ends done.
    let again = client(&["post", &b.base, "none", "gated", &resume, &id]);
    assert_eq!(again["calls"][0]["ok"], false, "{again}");
    let got = client(&["get", &b.base, "none", &id]);
    assert_eq!(got["ok"], true, "{got}");
    let events = &got["events"];
    assert_eq!(finished(events)["result"], "done", "{events}");
    assert!(types(events).contains(&"TOOL_CALL_RESULT".to_string()));
    // Another agent's endpoint does not go on with it.
    let plan = json!([{"runId": "r3", "message": "hi"}]).to_string();
    let other = client(&["post", &b.base, "none", "chat", &plan, &id]);
    let error = other["calls"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("HTTP 400"), "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and @ag-ui/client (AGUI_DIR); .ci/run runs it"]
async fn an_event_driven_thread_goes_on_through_node_b_and_a_new_one_is_placed() {
    agui_dir();
    let place = Place::new("");
    let a = place.node("10s");
    let b = place.node("10s");

    let plan = json!([{"runId": "r1", "message": "hi"}]).to_string();
    let seen = client(&["post", &a.base, "none", "chat", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    assert_eq!(call["result"], "ok", "{call}");
    let id = run_of(&call["events"]);
    assert_eq!(holder_pid(&place, &id), a.pid());

    // A message through B: the run on A answers it, and falls asleep.
    let plan = json!([{"runId": "r2", "message": "again"}]).to_string();
    let seen = client(&["post", &b.base, "none", "chat", &plan, &id]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    assert_eq!(call["result"], "ok", "{call}");
    assert_eq!(run_of(&call["events"]), id);
    assert_eq!(finished(&call["events"])["outcome"]["type"], "success");
    let run = a.send("GET", &format!("/runs/{id}"), None, None).await;
    assert_eq!(run.body["inputs"], 2, "{:?}", run.body);
    // Its stream through B: both turns, to the run asleep.
    let got = client(&["get", &b.base, "none", &id]);
    assert_eq!(got["ok"], true, "{got}");
    let events = &got["events"];
    let said = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .count();
    assert_eq!(said, 2, "{events}");
    finished(events);

    // A busier A (two unfinished runs to B's none) places a new thread's
    // run on B, as `POST /runs` would; A's answer follows it there.
    let other = a
        .send(
            "POST",
            "/runs",
            None,
            Some(&json!({"agent": "chat", "input": "x"})),
        )
        .await;
    assert_eq!(other.status, 201, "{:?}", other.body);
    let other = other.body["run_id"].as_str().unwrap().to_string();
    assert_eq!(holder_pid(&place, &other), a.pid());
    let plan = json!([{"runId": "r1", "message": "placed?"}]).to_string();
    let seen = client(&["post", &a.base, "none", "chat", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    assert_eq!(call["result"], "ok", "{call}");
    let placed = run_of(&call["events"]);
    assert_eq!(holder_pid(&place, &placed), b.pid());
    assert_eq!(finished(&call["events"])["outcome"]["type"], "success");
    // The thread goes on through A, which does not hold its run.
    let plan = json!([{"runId": "r2", "message": "still?"}]).to_string();
    let thread = seen["threadId"].as_str().unwrap();
    let seen = client(&["post", &a.base, "none", "chat", &plan, thread]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    assert_eq!(run_of(&call["events"]), placed);
    let run = b.send("GET", &format!("/runs/{placed}"), None, None).await;
    assert_eq!(run.body["inputs"], 2, "{:?}", run.body);
}
