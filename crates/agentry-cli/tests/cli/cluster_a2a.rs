//! A2A calls on a cluster: a task (a run) that node A holds is got,
//! answered, streamed and cancelled through node B, which sends each step
//! as the native request it stands for through the cluster's routing.

use serde_json::json;

use super::cluster::Place;
use super::serve_a2a::{rpc, rpc_stream};
use crate::*;

/// Publishes `gated` and `chat` over A2A (Place's serve.toml names them).
fn published(place: &Place) {
    let path = place.dir.path().join("serve.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text
        .replace(
            "[agents.gated]\ntask = \"tasks/gated\"\n",
            "[agents.gated]\ntask = \"tasks/gated\"\na2a = true\n",
        )
        .replace(
            "[agents.chat]\ntask = \"tasks/chat\"\n",
            "[agents.chat]\ntask = \"tasks/chat\"\na2a = true\n",
        );
    std::fs::write(&path, text).unwrap();
}

fn send(text: Option<&str>, data: Option<Value>, task: Option<&str>) -> Value {
    let part = match (text, data) {
        (Some(text), _) => json!({"text": text}),
        (None, Some(data)) => json!({"data": data}),
        (None, None) => panic!("a part"),
    };
    let mut message = json!({"messageId": "m", "role": "ROLE_USER", "parts": [part]});
    if let Some(task) = task {
        message["taskId"] = json!(task);
        message["contextId"] = json!(task);
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
}

async fn call(base: &str, agent: &str, body: Value) -> Value {
    let (status, reply) = rpc(base, &format!("/a2a/{agent}"), "none", true, body).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.get("error").is_none(), "{reply}");
    reply["result"].clone()
}

fn get(id: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": id}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn a_task_node_a_holds_is_got_answered_and_completed_through_node_b() {
    let place = Place::new("");
    published(&place);
    let a = place.node("10s");
    let b = place.node("10s");

    // Started on A: it waits for a human's approval of its one call.
    let asked = call(&a.base, "gated", send(Some("go"), None, None)).await;
    let task = &asked["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let id = task["id"].as_str().unwrap().to_string();

    // Got through B: the same task, naming the call.
    let got = call(&b.base, "gated", get(&id)).await;
    assert_eq!(got["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{got}");
    let calls = &got["status"]["message"]["parts"][1]["data"]["calls"];
    assert_eq!(calls[0]["call_id"], "a1", "{got}");
    assert_eq!(calls[0]["tool"], "append");
    // Listed through B (the store lists every node's runs).
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "ListTasks", "params": {}});
    let listed = call(&b.base, "gated", list).await;
    assert_eq!(listed["tasks"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(
        listed["tasks"][0]["status"]["state"],
        "TASK_STATE_INPUT_REQUIRED"
    );
    // Another agent's endpoint does not find it.
    let (_, other) = rpc(&b.base, "/a2a/chat", "none", true, get(&id)).await;
    assert_eq!(other["error"]["code"], -32001, "{other}");

    // An approval of a call that waits for none is the holder's refusal.
    let wrong = json!({"approval": {"call_id": "nope", "approve": true}});
    let (_, refused) = rpc(
        &b.base,
        "/a2a/gated",
        "none",
        true,
        send(None, Some(wrong), Some(&id)),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // Approved through B (a data part): the run on A goes on, and B's
    // SendMessage answers once the task completed.
    let approval = json!({"approval": {"call_id": "a1", "approve": true}});
    let done = call(&b.base, "gated", send(None, Some(approval), Some(&id))).await;
    let task = &done["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(task["id"], id.as_str());
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "done", "{done}");
    let line = format!("{id} a1");
    assert_eq!(place.ledger().get(&line), Some(&1), "{:?}", place.ledger());
    for node in [&a, &b] {
        let got = call(&node.base, "gated", get(&id)).await;
        assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED", "{got}");
    }
    let cancel = json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": id}});
    let (_, again) = rpc(&b.base, "/a2a/gated", "none", true, cancel).await;
    assert_eq!(again["error"]["code"], -32002, "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
async fn an_event_driven_task_on_node_a_takes_messages_streams_and_is_cancelled_through_node_b() {
    let place = Place::new("");
    published(&place);
    let a = place.node("10s");
    let b = place.node("10s");

    let first = call(&a.base, "chat", send(Some("hi"), None, None)).await;
    assert_eq!(
        first["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{first}"
    );
    let id = first["task"]["id"].as_str().unwrap().to_string();

    // A message through B: the same task, asleep again after it.
    let second = call(&b.base, "chat", send(Some("again"), None, Some(&id))).await;
    let task = &second["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{second}"
    );
    assert_eq!(
        task["status"]["message"]["parts"][0]["text"], "ok",
        "{second}"
    );
    let run = a.send("GET", &format!("/runs/{id}"), None, None).await;
    assert_eq!(run.body["inputs"], 2, "{:?}", run.body);

    // A stream through B: a task first, the message applied, asleep again.
    let mut stream = send(Some("third"), None, Some(&id));
    stream["method"] = json!("SendStreamingMessage");
    let (text, events) = rpc_stream(&b.base, "/a2a/chat", None, &stream).await;
    assert!(events[0].get("task").is_some(), "{text}");
    // (The task itself, when the message was applied by the stream's first look.)
    let last = events.last().unwrap();
    let state = last["statusUpdate"]["status"]["state"]
        .as_str()
        .or(last["task"]["status"]["state"].as_str());
    assert_eq!(state, Some("TASK_STATE_INPUT_REQUIRED"), "{text}");
    let run = a.send("GET", &format!("/runs/{id}"), None, None).await;
    assert_eq!(run.body["inputs"], 3, "{:?}", run.body);

    // Cancelled through B: the run on A stops user_abort.
    let cancel = json!({"jsonrpc": "2.0", "id": 3, "method": "CancelTask", "params": {"id": id}});
    let cancelled = call(&b.base, "chat", cancel).await;
    assert_eq!(
        cancelled["status"]["state"], "TASK_STATE_CANCELED",
        "{cancelled}"
    );
    let run = a.send("GET", &format!("/runs/{id}"), None, None).await;
    assert_eq!(
        run.body["outcome"]["stop_reason"], "user_abort",
        "{:?}",
        run.body
    );
}
