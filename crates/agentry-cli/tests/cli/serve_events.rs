//! `agentry serve`'s event stream resumed with `Last-Event-ID` (or `?after=`):
//! a client that reconnects gets the events after the one it names once, in
//! order, then the live ones, also when the run hibernated in between.

use std::time::{Duration, Instant};

use serde_json::json;

use super::serve::Served;
use super::serve_hibernation::{answering_task, read_until};
use crate::*;

const TOKEN: &str = "events-token-7a3c";

/// A server with the answering agent, hibernating after `hibernate_after`.
fn start(dir: &Path, hibernate_after: &str) -> Served {
    answering_task(dir);
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[serve]\nhibernate_after = \"{hibernate_after}\"\n\
             [agents.answer]\ntask = \"tasks/answer\"\n"
        ),
    )
    .unwrap();
    let store = dir.join("runs.db");
    Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[
            ("AGENTRY_TOKEN", TOKEN),
            (
                "RUST_LOG",
                "warn,agentry_runtime::conductor::hibernate=debug",
            ),
        ],
    )
}

/// `GET /runs/{id}/events{query}` with `Last-Event-ID: last` when given.
async fn open(served: &Served, id: &str, query: &str, last: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .get(format!("{}/runs/{id}/events{query}", served.base))
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(last) = last {
        request = request.header("last-event-id", last);
    }
    request.send().await.unwrap()
}

/// Reads `response` until its first SSE block is whole; returns that block
/// and leaves the rest in `buffer`.
async fn first_block(response: &mut reqwest::Response, buffer: &mut String) -> String {
    while !buffer.contains("\n\n") {
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("the stream went quiet")
            .expect("the stream failed")
            .expect("the stream ended");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let end = buffer.find("\n\n").unwrap();
    buffer.drain(..end + 2).collect()
}

/// Sends `text` to the run; panics unless taken.
async fn message(served: &Served, id: &str, text: &str) {
    let reply = served
        .send(
            "POST",
            &format!("/runs/{id}/messages"),
            Some(TOKEN),
            Some(&json!({ "text": text })),
        )
        .await;
    assert_eq!(reply.status / 100, 2, "{:?}", reply.body);
}

/// Polls until the run is asleep having taken `inputs` inputs (bounded).
async fn wait_asleep(served: &Served, id: &str, inputs: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = served.wait_status(TOKEN, id, "sleeping").await;
        if run["inputs"] == inputs {
            return;
        }
        assert!(Instant::now() < deadline, "never took {inputs}: {run:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the server's log until the run hibernated `times` times (bounded).
async fn wait_hibernated(served: &Served, id: &str, times: usize) {
    let line = format!("run hibernated run_id={id}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while served.log.lock().unwrap().matches(&line).count() < times {
        assert!(
            Instant::now() < deadline,
            "the run never hibernated {times}x"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The first step's events, read on a stream then dropped, and the id of one
/// in their middle to resume after.
async fn first_step_then_drop(served: &Served, id: &str) -> (Vec<(u64, String)>, u64) {
    let mut stream = open(served, id, "", None).await;
    assert_eq!(stream.status().as_u16(), 200);
    let seen = read_until(&mut stream, &mut String::new(), "budget_spent", 1).await;
    assert!(seen.len() >= 3, "{seen:?}");
    let resume = seen[seen.len() / 2].0;
    (seen, resume)
}

/// Opens the stream after `resume` and checks it: the comment first, then the
/// events of `before` after `resume` again, exactly, then new ones up to
/// `budget_spent` number `steps`, gapless. Returns what it read, and the
/// stream with its buffer for the live part.
async fn resume_and_check(
    served: &Served,
    id: &str,
    before: &[(u64, String)],
    resume: u64,
    steps: usize,
) -> (reqwest::Response, String, Vec<(u64, String)>) {
    let mut stream = open(served, id, "", Some(&resume.to_string())).await;
    assert_eq!(stream.status().as_u16(), 200);
    let mut buffer = String::new();
    let note = first_block(&mut stream, &mut buffer).await;
    assert_eq!(note, format!(": resuming after event {resume}\n\n"));
    let seen = read_until(&mut stream, &mut buffer, "budget_spent", steps).await;
    let again: Vec<_> = before
        .iter()
        .filter(|(n, _)| *n > resume)
        .cloned()
        .collect();
    assert_eq!(
        seen[..again.len()],
        again[..],
        "the replay differs: {seen:?}"
    );
    let ids: Vec<u64> = seen.iter().map(|(n, _)| *n).collect();
    let expected: Vec<u64> = (resume + 1..resume + 1 + ids.len() as u64).collect();
    assert_eq!(ids, expected, "a gap or a repeat after {resume}: {seen:?}");
    (stream, buffer, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_with_last_event_id_gets_each_later_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path(), "off");
    let id = served
        .create(TOKEN, &json!({"agent": "answer", "input": "one"}))
        .await;
    let (before, resume) = first_step_then_drop(&served, &id).await;
    // Two more steps while nobody follows the run (one at a time: two
    // messages waiting together are taken in one step).
    message(&served, &id, "two").await;
    wait_asleep(&served, &id, 2).await;
    message(&served, &id, "three").await;
    wait_asleep(&served, &id, 3).await;

    let (mut stream, mut buffer, seen) = resume_and_check(&served, &id, &before, resume, 3).await;
    let applied = seen.iter().filter(|(_, e)| e == "input_applied").count();
    let applied_before = before
        .iter()
        .filter(|(n, e)| *n > resume && e == "input_applied")
        .count();
    assert_eq!(applied, applied_before + 2, "{seen:?}");
    // Then the live ones, on the same stream.
    message(&served, &id, "four").await;
    let live = read_until(&mut stream, &mut buffer, "budget_spent", 1).await;
    let last = seen.last().unwrap().0;
    assert_eq!(live[0].0, last + 1, "{live:?}");
    assert!(live.iter().any(|(_, e)| e == "input_applied"), "{live:?}");

    // `?after=` does the same for clients that cannot set headers.
    let mut after = open(&served, &id, &format!("?after={last}"), None).await;
    assert_eq!(after.status().as_u16(), 200);
    let mut buffer = String::new();
    let note = first_block(&mut after, &mut buffer).await;
    assert_eq!(note, format!(": resuming after event {last}\n\n"));
    let replay = read_until(&mut after, &mut buffer, "budget_spent", 1).await;
    assert_eq!(replay, live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_with_last_event_id_across_hibernation_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path(), "300ms");
    let id = served
        .create(TOKEN, &json!({"agent": "answer", "input": "one"}))
        .await;
    let (before, resume) = first_step_then_drop(&served, &id).await;
    wait_hibernated(&served, &id, 1).await;
    // The message wakes it; its step's events are numbered on, and it
    // hibernates again before the client comes back.
    message(&served, &id, "two").await;
    wait_hibernated(&served, &id, 2).await;

    let (mut stream, mut buffer, seen) = resume_and_check(&served, &id, &before, resume, 2).await;
    assert!(
        seen.iter().any(|(_, e)| e == "input_applied"),
        "the woken step's input is missing: {seen:?}"
    );
    // The resumed stream is held on a hibernated run: a message wakes it
    // and its events come on the same stream, numbered on.
    message(&served, &id, "three").await;
    let live = read_until(&mut stream, &mut buffer, "budget_spent", 1).await;
    assert_eq!(live[0].0, seen.last().unwrap().0 + 1, "{live:?}");
    wait_asleep(&served, &id, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_event_id_that_is_not_a_number_is_400_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path(), "off");
    let id = served
        .create(TOKEN, &json!({"agent": "answer", "input": "one"}))
        .await;
    for (query, header, field) in [
        ("", Some("seven"), "Last-Event-ID"),
        ("", Some("-1"), "Last-Event-ID"),
        ("?after=7", Some("x"), "Last-Event-ID"),
        ("?after=seven", None, "after"),
    ] {
        let reply = open(&served, &id, query, header).await;
        assert_eq!(reply.status().as_u16(), 400, "{query} {header:?}");
        let body: serde_json::Value = reply.json().await.unwrap();
        assert_eq!(body["error"]["field"], field, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{message}");
    }
    // Another tenant's run, or none, is 404 whatever the header says.
    let reply = open(&served, "no-such-run", "", Some("seven")).await;
    assert_eq!(reply.status().as_u16(), 404);
}

/// SIGKILL of the server while a client follows an event-driven run, asleep
/// (hibernated or not): after the restart a message is sent, and the client
/// reconnecting with the id of the last event it saw gets the restarted
/// run's events, every one (the same as the new log holds from its start),
/// numbered after it and gapless; then the live ones, numbered on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_resumed_with_last_event_id_after_a_restart_gets_the_new_events() {
    for hibernate_after in ["off", "300ms"] {
        let dir = tempfile::tempdir().unwrap();
        let served = start(dir.path(), hibernate_after);
        let id = served
            .create(TOKEN, &json!({"agent": "answer", "input": "one"}))
            .await;
        let (before, _) = first_step_then_drop(&served, &id).await;
        let last = before.last().unwrap().0;
        wait_asleep(&served, &id, 1).await;
        if hibernate_after != "off" {
            wait_hibernated(&served, &id, 1).await;
        }
        served.kill();

        let again = start(dir.path(), hibernate_after);
        message(&again, &id, "two").await;
        let mut stream = open(&again, &id, "", Some(&last.to_string())).await;
        assert_eq!(stream.status().as_u16(), 200);
        let mut buffer = String::new();
        let note = first_block(&mut stream, &mut buffer).await;
        assert!(
            note.starts_with(&format!(": resuming after event {last}")),
            "{note}"
        );
        let mut seen = read_until(&mut stream, &mut buffer, "input_applied", 1).await;
        seen.extend(read_until(&mut stream, &mut buffer, "budget_spent", 1).await);
        let first = seen[0].0;
        assert!(
            first > last,
            "{hibernate_after}: {first} <= {last}: {seen:?}"
        );
        let ids: Vec<u64> = seen.iter().map(|(n, _)| *n).collect();
        let expected: Vec<u64> = (first..first + ids.len() as u64).collect();
        assert_eq!(ids, expected, "{hibernate_after}: a gap: {seen:?}");
        // None skipped: the restarted run's log from its start is the same.
        let mut whole = open(&again, &id, "", None).await;
        let mut whole_buffer = String::new();
        let mut all = read_until(&mut whole, &mut whole_buffer, "input_applied", 1).await;
        all.extend(read_until(&mut whole, &mut whole_buffer, "budget_spent", 1).await);
        assert_eq!(all, seen, "{hibernate_after}");
        // The next step's events come live on the same stream, numbered on.
        message(&again, &id, "three").await;
        let live = read_until(&mut stream, &mut buffer, "budget_spent", 1).await;
        assert_eq!(
            live[0].0,
            ids[ids.len() - 1] + 1,
            "{hibernate_after}: {live:?}"
        );
        assert!(live.iter().any(|(_, e)| e == "input_applied"), "{live:?}");
        wait_asleep(&again, &id, 3).await;
    }
}
