//! An event-driven agent's A2A task over raw JSON-RPC: each message is
//! answered before the task is INPUT_REQUIRED again (agent `turns` of
//! `serve_a2a::place`, whose script answers "one", "two", "three").

use serde_json::{Value, json};

use super::serve_a2a::{ACME, place, rpc, rpc_stream, serve};

/// The answer artifact's text of a `Task`.
fn answer_of(task: &Value) -> Option<&str> {
    task["artifacts"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == "answer")?["parts"][0]["text"]
        .as_str()
}

/// Each message to an event-driven agent's task is answered before the task
/// is INPUT_REQUIRED again: the reply carries that message's answer, not
/// the one before (the run's status stays `sleeping` while the step a
/// message woke runs), by SendMessage and by SendStreamingMessage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_to_an_event_driven_task_gets_its_own_answer() {
    let dir = place();
    let served = serve(dir.path());
    let message = |n: u32, text: &str, task: Option<&str>| {
        let mut message = json!({"messageId": format!("t{n}"), "role": "ROLE_USER",
            "parts": [{"text": text}]});
        if let Some(task) = task {
            message["taskId"] = json!(task);
        }
        message
    };
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message(1, "hi", None)}});
    let (_, body) = rpc(&served.base, "/a2a/turns", ACME, true, send).await;
    let task = &body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{body}"
    );
    assert_eq!(answer_of(task), Some("one"), "{body}");
    let id = task["id"].as_str().unwrap().to_string();

    let send = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
        "params": {"message": message(2, "again", Some(&id))}});
    let (_, body) = rpc(&served.base, "/a2a/turns", ACME, true, send).await;
    let task = &body["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{body}"
    );
    assert_eq!(answer_of(task), Some("two"), "{body}");

    // Streamed: the answer comes as an artifactUpdate before the stream
    // ends at INPUT_REQUIRED.
    let stream = json!({"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage",
        "params": {"message": message(3, "third", Some(&id))}});
    let (text, told) = rpc_stream(&served.base, "/a2a/turns", Some(ACME), &stream).await;
    let answers: Vec<&str> = told
        .iter()
        .filter_map(|t| t["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str())
        .collect();
    assert_eq!(answers.last(), Some(&"three"), "{text}");
    let last = told.last().unwrap();
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{text}"
    );
}
