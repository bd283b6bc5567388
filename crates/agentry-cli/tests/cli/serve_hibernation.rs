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
