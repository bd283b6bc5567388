//! `agentry serve`'s hibernation (`[serve] hibernate_after`): a named
//! event-driven agent's run asleep that long lets its actors go; an event
//! stream held open on it stays open, and the next message wakes it with the
//! stream's numbering going on.

use std::time::Duration;

use serde_json::json;

use super::serve::Served;
use crate::*;

const TOKEN: &str = "hibernation-token-5e1f";

/// An event-driven task that answers "ok" to every message.
pub(super) fn answering_task(dir: &Path) {
    let task = dir.join("tasks/answer");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"answer the user\"\n\
         [budget]\nmax_steps = 10\ndeadline = \"60s\"\n\
         [driver]\nmode = \"events\"\n\
         [progress]\nwindow = 0\n",
    )
    .unwrap();
    std::fs::write(
        task.join("script.json"),
        json!({"turns": [{"final": "ok"}], "then": "repeat_last"}).to_string(),
    )
    .unwrap();
}

/// Reads SSE blocks from `response` until `count` events named `name` came,
/// as (id, event name).
pub(super) async fn read_until(
    response: &mut reqwest::Response,
    buffer: &mut String,
    name: &str,
    count: usize,
) -> Vec<(u64, String)> {
    let mut seen = Vec::new();
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let id = block.lines().find_map(|l| l.strip_prefix("id: "));
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            if let (Some(id), Some(event)) = (id, event) {
                seen.push((id.parse().unwrap(), event.to_string()));
                if seen.iter().filter(|(_, e)| e == name).count() == count {
                    return seen;
                }
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(10), response.chunk())
            .await
            .expect("the stream went quiet")
            .expect("the stream failed");
        let Some(chunk) = chunk else {
            panic!("the stream ended: {seen:?}");
        };
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_stream_stays_open_across_hibernation() {
    let dir = tempfile::tempdir().unwrap();
    answering_task(dir.path());
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        "[serve]\nhibernate_after = \"100ms\"\n[agents.answer]\ntask = \"tasks/answer\"\n",
    )
    .unwrap();
    let store = dir.path().join("runs.db");
    let served = Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[
            ("AGENTRY_TOKEN", TOKEN),
            (
                "RUST_LOG",
                "warn,agentry_runtime::conductor::hibernate=debug",
            ),
        ],
    );
    let id = served
        .create(TOKEN, &json!({"agent": "answer", "input": "one"}))
        .await;
    let mut stream = reqwest::Client::new()
        .get(format!("{}/runs/{id}/events", served.base))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let mut buffer = String::new();
    let mut seen = read_until(&mut stream, &mut buffer, "budget_spent", 1).await;

    // Asleep past hibernate_after: the run hibernates (its log says so).
    let hibernated = format!("run hibernated run_id={id}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !served.log.lock().unwrap().contains(&hibernated) {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never hibernated"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reply = served
        .send(
            "POST",
            &format!("/runs/{id}/messages"),
            Some(TOKEN),
            Some(&json!({"text": "two"})),
        )
        .await;
    assert_eq!(reply.status / 100, 2, "{:?}", reply.body);
    // The same stream goes on with the woken run's events.
    seen.extend(read_until(&mut stream, &mut buffer, "budget_spent", 1).await);
    let ids: Vec<u64> = seen.iter().map(|(id, _)| *id).collect();
    let expected: Vec<u64> = (ids[0]..ids[0] + ids.len() as u64).collect();
    assert_eq!(ids, expected, "a gap in the stream's numbering: {seen:?}");
    let applied = seen.iter().filter(|(_, e)| e == "input_applied").count();
    assert_eq!(applied, 2, "{seen:?}");
    let run = served.wait_status(TOKEN, &id, "sleeping").await;
    assert_eq!(run["agent"], "answer", "{run:?}");
}

/// `dir/tasks/work`: an event-driven task whose first step calls `work`, a
/// command tool that holds until `release` exists (idempotent: a resume runs
/// it again), then answers "ok" to every message. `release` is outside
/// `dir`: the store's directory is hidden from the tool's sandbox.
fn held_task(dir: &Path, release: &Path) {
    let task = dir.join("tasks/work");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "goal = \"work when asked\"\n\
             [budget]\nmax_steps = 10\ndeadline = \"120s\"\n\
             [tools]\ngrant = [\"work\"]\n\
             [driver]\nmode = \"events\"\n\
             [progress]\nwindow = 0\n\
             [[tools.command]]\nname = \"work\"\ndescription = \"held work\"\n\
             argv = [\"sh\", \"-c\", \"while [ ! -e {release} ]; do sleep 0.05; done\"]\n\
             idempotency = \"idempotent\"\ntimeout = \"60s\"\n",
            release = release.display(),
        ),
    )
    .unwrap();
    std::fs::write(
        task.join("script.json"),
        json!({"turns": [
            {"tool_calls": [{"id": "w1", "name": "work", "arguments": {}}]},
            {"final": "ok"}
        ], "then": "repeat_last"})
        .to_string(),
    )
    .unwrap();
}

/// `agentry serve` on `dir`'s serve.toml and store, logging hibernation.
fn serve_logging_hibernation(dir: &Path) -> Served {
    let (config, store) = (dir.join("serve.toml"), dir.join("runs.db"));
    Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[
            ("AGENTRY_TOKEN", TOKEN),
            (
                "RUST_LOG",
                "warn,agentry_runtime::conductor::hibernate=debug,agentry_runtime::runtime::hibernate=debug",
            ),
        ],
    )
}

/// Waits (bounded) until the server's log has `line`.
async fn logged(served: &Served, line: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !served.log.lock().unwrap().contains(line) {
        assert!(
            std::time::Instant::now() < deadline,
            "never logged {line:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The text of the user message somewhere in an event's data.
pub(super) fn message_text(data: &Value) -> Option<String> {
    match data {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("message")
                && let Some(Value::String(text)) = map.get("text")
            {
                return Some(text.clone());
            }
            map.values().find_map(message_text)
        }
        Value::Array(items) => items.iter().find_map(message_text),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => None,
    }
}

/// The messages run `id`'s stream on this server shows applied, once it has
/// shown `count` of them.
async fn applied_messages(served: &Served, id: &str, count: usize) -> Vec<String> {
    let mut texts = Vec::new();
    let mut response = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/runs/{id}/events", served.base))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut buffer = String::new();
    while texts.len() < count {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let event = block.lines().find_map(|l| l.strip_prefix("event: "));
            let data = block.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some("input_applied"), Some(data)) = (event, data) {
                let data: Value = serde_json::from_str(data).unwrap();
                texts.push(message_text(&data).unwrap_or_else(|| panic!("{data}")));
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(20), response.chunk())
            .await
            .expect("the stream went quiet")
            .expect("the stream failed")
            .unwrap_or_else(|| panic!("the stream ended: {texts:?}"));
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    texts
}

/// Polls `GET /runs/{id}` until it is asleep with `inputs` applied.
async fn asleep_with(served: &Served, id: &str, inputs: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let run = served
            .send("GET", &format!("/runs/{id}"), Some(TOKEN), None)
            .await;
        if run.body["inputs"] == inputs && run.body["status"] == "sleeping" {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILL with one agent's run hibernated and another's mid-call: the
/// restart lists both and answers for both; the sleeping one comes back
/// hibernated (no actors), the other awake; each takes its messages once
/// and in order, and both hibernate again after `hibernate_after`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_brings_back_hibernated_runs_dormant_and_they_hibernate_again() {
    let dir = tempfile::tempdir().unwrap();
    answering_task(dir.path());
    let gate = tempfile::tempdir().unwrap();
    let release = gate.path().join("release");
    held_task(dir.path(), &release);
    std::fs::write(
        dir.path().join("serve.toml"),
        "[serve]\nhibernate_after = \"300ms\"\n\
         [agents.answer]\ntask = \"tasks/answer\"\n\
         [agents.work]\ntask = \"tasks/work\"\n",
    )
    .unwrap();
    let served = serve_logging_hibernation(dir.path());
    let asleep = served
        .create(TOKEN, &json!({"agent": "answer", "input": "one"}))
        .await;
    let busy = served
        .create(TOKEN, &json!({"agent": "work", "input": "one"}))
        .await;
    logged(&served, &format!("run hibernated run_id={asleep}")).await;
    served.events_until(TOKEN, &busy, "tool_call_started").await;
    served.kill();

    let again = serve_logging_hibernation(dir.path());
    let listed = again.send("GET", "/runs", Some(TOKEN), None).await;
    let ids: Vec<&str> = listed.body["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&asleep.as_str()), "{ids:?}");
    assert!(ids.contains(&busy.as_str()), "{ids:?}");
    // Asleep at rest when killed: back without actors.
    logged(&again, &format!("run resumed hibernated run_id={asleep}")).await;
    assert!(
        !again
            .log
            .lock()
            .unwrap()
            .contains(&format!("run resumed hibernated run_id={busy}")),
        "a run killed mid-call came back hibernated"
    );
    for id in [&asleep, &busy] {
        let run = again
            .send("GET", &format!("/runs/{id}"), Some(TOKEN), None)
            .await;
        assert_eq!(run.status, 200, "{:?}", run.body);
        for text in ["two", "three"] {
            let sent = again
                .send(
                    "POST",
                    &format!("/runs/{id}/messages"),
                    Some(TOKEN),
                    Some(&json!({ "text": text })),
                )
                .await;
            assert_eq!(sent.status, 202, "{:?}", sent.body);
        }
    }
    // The call resumed runs again and, released, ends; then the messages.
    std::fs::write(&release, "").unwrap();
    for id in [&asleep, &busy] {
        assert_eq!(applied_messages(&again, id, 2).await, ["two", "three"]);
        asleep_with(&again, id, 3).await;
        // Resumed runs hibernate after serve.toml's hibernate_after again.
        logged(&again, &format!("run hibernated run_id={id}")).await;
    }
}
