//! The adapter behind the real runtime: the seed's sum task, model turns served
//! by the scripted server, tools run by the built-in executor.

use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::RunEvent;
use agentry::{Runtime, StopReason};
use agentry_models::OpenAiPolicy;
use agentry_test_support::TestTask;
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError};
use super::sse::{chunk, config, finish, one_call, two_calls, usage};

#[tokio::test]
async fn the_openai_adapter_finishes_the_sum_task_through_the_runtime() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(one_call("read", "fs_read", "{\"path\":\"numbers.txt\"}")),
        Reply::sse(one_call(
            "write",
            "fs_write",
            "{\"path\":\"sum.txt\",\"content\":\"23\"}",
        )),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"sum=23\"}")),
    ])
    .await?;
    let task = TestTask::sum()?;
    let policy = OpenAiPolicy::new(config(&server.base_url))?;

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 3);
    assert_eq!(outcome.answer.as_deref(), Some("sum=23"));
    assert_eq!(task.read_file("sum.txt")?, "23");

    // The second request carries the read's result, keyed by the model's call id,
    // and the tools under their wire names.
    let sent = server.received();
    assert_eq!(sent.len(), 3);
    let messages = sent[1].body["messages"].as_array().ok_or("no messages")?;
    let last = messages.last().ok_or("empty")?;
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "read");
    let envelope: Value = serde_json::from_str(last["content"].as_str().ok_or("content")?)?;
    assert_eq!(envelope["tool"], "fs.read");
    assert_eq!(envelope["ok"], true);
    let wire: Vec<&str> = sent[0].body["tools"]
        .as_array()
        .ok_or("no tools")?
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        wire.contains(&"fs_read") && wire.contains(&"task_finish"),
        "{wire:?}"
    );
    Ok(())
}

/// Broken arguments and an unknown tool become observations the model sees in the
/// next request (EINVAL, ENOTOOL, keyed by its call ids in request order); the
/// model then corrects itself and the run still finishes.
#[tokio::test]
async fn broken_arguments_and_unknown_tools_come_back_as_observations() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(two_calls(
            ("bad", "fs_read", "{\"path\": \"numb"),
            ("ghost", "no_such_tool", "{}"),
        )),
        Reply::sse(one_call(
            "write",
            "fs_write",
            "{\"path\":\"sum.txt\",\"content\":\"23\"}",
        )),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"sum=23\"}")),
    ])
    .await?;
    let task = TestTask::sum()?;
    let policy = OpenAiPolicy::new(config(&server.base_url))?;

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    let sent = server.received();
    let messages = sent[1].body["messages"].as_array().ok_or("no messages")?;
    let observations: Vec<(String, String)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| -> Result<(String, String), TestError> {
            let envelope: Value = serde_json::from_str(m["content"].as_str().ok_or("content")?)?;
            Ok((
                m["tool_call_id"].as_str().unwrap_or("").to_string(),
                envelope["error"]["code"].as_str().unwrap_or("").to_string(),
            ))
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(
        observations,
        [
            ("bad".to_string(), "EINVAL".to_string()),
            ("ghost".to_string(), "ENOTOOL".to_string())
        ]
    );
    // The broken text went back to the model verbatim, under the wire name.
    let call = &messages[2]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "fs_read");
    assert_eq!(call["arguments"], "{\"path\": \"numb");
    Ok(())
}

/// Streamed text reaches subscribers as `token_delta` events while the model
/// writes it; the whole text is the answer. Each event ends at a word
/// boundary: the last word of what came so far is held until the next piece
/// shows it is not the start of a secret (see `StepDeltas`), and the rest is
/// published when the turn ends.
#[tokio::test]
async fn streamed_text_is_published_as_token_deltas() -> Result<(), TestError> {
    let pieces = ["all", " done", ", and", " checked"];
    let mut payloads = vec![chunk(json!({"role": "assistant", "content": ""}))];
    payloads.extend(pieces.iter().map(|p| chunk(json!({"content": p}))));
    payloads.extend([finish("stop"), usage(3, 4), "[DONE]".into()]);
    // One SSE event per chunk; the server holds the stream after the second
    // piece until the test has seen the first pieces as events.
    let events_sent: Vec<String> = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    let go = Arc::new(tokio::sync::Notify::new());
    let server =
        MockServer::start(vec![Reply::sse(events_sent).hold_after(3, Arc::clone(&go))]).await?;
    let task = TestTask::new("say you are done", &[])?;
    let policy = OpenAiPolicy::new(config(&server.base_url))?;

    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let mut events = handle.subscribe();
    let mut early = String::new();
    while early != "all " {
        assert!(early.len() < 4, "{early:?}");
        let record = tokio::time::timeout(Duration::from_secs(10), events.recv()).await??;
        if let RunEvent::TokenDelta { text, .. } = &record.event {
            early.push_str(text);
        }
    }
    // Seen while the rest of the reply is still unsent ("done" is held: the
    // next piece might have continued it).
    assert!(handle.outcome().is_none());
    go.notify_one();
    let rest = agentry_test_support::collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let late: Vec<&str> = rest
        .iter()
        .filter_map(|e| {
            if let RunEvent::TokenDelta { step: 1, text } = &e.event {
                Some(text.as_str())
            } else {
                None
            }
        })
        .collect();
    assert_eq!(late, ["done, ", "and ", "checked"]);
    assert_eq!(outcome.answer.as_deref(), Some("all done, and checked"));
    Ok(())
}
