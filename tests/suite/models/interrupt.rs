//! User interrupts and messages against a real streaming adapter (OpenAI
//! wire format, served by the scripted server): what the model's next request
//! carries after a cut tool call, a dropped stream, and a message sent while
//! the model was still streaming its decision.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::protocol::RunEvent;
use agentry::tools::proc::reap_orphans_here;
use agentry::{Runtime, StopReason};
use agentry_models::OpenAiPolicy;
use agentry_test_support::procs::unique_secs;
use agentry_test_support::{TestTask, collect_until_stopped, next_event};
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError};
use super::sse::{chunk, config, finish, one_call, usage};

const REDIRECT: &str = "stop the build; use the cached artifacts instead";

/// The messages of the `n`th request the server received.
fn messages(server: &MockServer, n: usize) -> Result<Vec<Value>, TestError> {
    let sent = server.received();
    let request = sent.get(n).ok_or(format!("only {} requests", sent.len()))?;
    Ok(request.body["messages"]
        .as_array()
        .ok_or("no messages")?
        .clone())
}

/// A tool result's envelope, parsed from its message.
fn envelope(message: &Value) -> Result<Value, TestError> {
    Ok(serde_json::from_str(
        message["content"].as_str().ok_or("no content")?,
    )?)
}

/// A 30 s process tree interrupted at 0.5 s: the next request to the model
/// carries the cancelled call's result and then the user's message, and the
/// run finishes `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_interrupt_the_next_request_carries_the_cancelled_result_then_the_message()
-> Result<(), TestError> {
    reap_orphans_here()?;
    let secs = unique_secs(30);
    let argv = json!([
        "sh",
        "-c",
        format!("echo $$ > pgid; sleep {secs} & sleep {secs} & wait")
    ]);
    let server = MockServer::start(vec![
        Reply::sse(one_call(
            "b1",
            "proc_run",
            &json!({ "argv": argv }).to_string(),
        )),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"cached\"}")),
    ])
    .await?;
    let task = TestTask::new("build it", &[])?.grant(&["proc.run"]);
    let policy = OpenAiPolicy::new(config(&server.base_url))?;
    let started = Instant::now();
    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !task.workdir().join("pgid").exists() {
        assert!(Instant::now() < deadline, "the build never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(500).saturating_sub(started.elapsed())).await;
    handle.interrupt(REDIRECT)?;
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await??;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert!(started.elapsed() < Duration::from_secs(10));
    let messages = messages(&server, 1)?;
    let n = messages.len();
    assert_eq!(messages[n - 3]["tool_calls"][0]["id"], "b1");
    assert_eq!(messages[n - 2]["role"], "tool");
    assert_eq!(messages[n - 2]["tool_call_id"], "b1");
    let result = envelope(&messages[n - 2])?;
    assert_eq!(result["ok"], false);
    assert_eq!(result["error"]["code"], "ECANCELED");
    assert_eq!(result["error"]["retryable"], false);
    assert_eq!(
        messages[n - 1],
        json!({"role": "user", "content": REDIRECT})
    );
    Ok(())
}

/// A streamed answer cut mid-stream: the stream is dropped (the step ends
/// while the server still holds the rest), the turn is recorded as cut off,
/// and the next request tells the model so, then carries the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_drops_a_streaming_answer_and_the_next_request_carries_the_message()
-> Result<(), TestError> {
    let mut payloads = vec![chunk(json!({"role": "assistant", "content": ""}))];
    payloads.extend(
        ["Here is", " a very", " long essay"]
            .iter()
            .map(|p| chunk(json!({"content": p}))),
    );
    payloads.extend([finish("stop"), usage(3, 4), "[DONE]".into()]);
    let events_sent: Vec<String> = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    // Never notified: the rest of the answer is never sent.
    let never = Arc::new(tokio::sync::Notify::new());
    let server = MockServer::start(vec![
        Reply::sse(events_sent).hold_after(3, Arc::clone(&never)),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"short\"}")),
    ])
    .await?;
    let task = TestTask::new("write an essay", &[])?;
    let policy = OpenAiPolicy::new(config(&server.base_url))?;
    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let mut events = handle.subscribe();
    next_event(&mut events, Duration::from_secs(10), |e| {
        matches!(e, RunEvent::TokenDelta { step: 1, .. }).then_some(())
    })
    .await?;
    handle.interrupt("make it one line")?;
    let cut = next_event(&mut events, Duration::from_secs(10), |e| {
        if let RunEvent::StepInterrupted { step, interrupted } = e {
            Some((*step, interrupted.clone()))
        } else {
            None
        }
    })
    .await?;
    let rest = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(cut.0, 1);
    assert!(cut.1.decision && cut.1.calls.is_empty(), "{cut:?}");
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("short"));
    assert_eq!(outcome.steps, 2, "the cut turn counts as a step");
    assert!(
        !rest.iter().any(
            |e| matches!(&e.event, RunEvent::TokenDelta { step: 1, text } if text.contains("essay"))
        ),
        "the held rest of the stream was never read"
    );
    let messages = messages(&server, 1)?;
    let n = messages.len();
    let note = messages[n - 2]["content"].as_str().unwrap_or_default();
    assert!(note.contains("interrupted"), "{:?}", messages[n - 2]);
    assert_eq!(
        messages[n - 1],
        json!({"role": "user", "content": "make it one line"})
    );
    Ok(())
}

/// Steering without interrupting: a message sent while the model streams a
/// decision with a call is held until that step ends — the next request has
/// the call, its result, then the message (never between them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_the_model_streams_waits_for_the_step() -> Result<(), TestError> {
    let go = Arc::new(tokio::sync::Notify::new());
    let server = MockServer::start(vec![
        Reply::sse(one_call("r1", "fs_read", "{\"path\":\"numbers.txt\"}"))
            .hold_after(2, Arc::clone(&go)),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"sum=23\"}")),
    ])
    .await?;
    let task = TestTask::new("add the numbers", &[("numbers.txt", "20 3")])?;
    let policy = OpenAiPolicy::new(config(&server.base_url))?;
    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.received().is_empty() {
        assert!(Instant::now() < deadline, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.send_message("also say which numbers you added")?;
    go.notify_one();
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await??;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let messages = messages(&server, 1)?;
    let n = messages.len();
    assert_eq!(messages[n - 3]["tool_calls"][0]["id"], "r1");
    assert_eq!(messages[n - 2]["tool_call_id"], "r1");
    assert_eq!(envelope(&messages[n - 2])?["ok"], true);
    assert_eq!(
        messages[n - 1],
        json!({"role": "user", "content": "also say which numbers you added"})
    );
    Ok(())
}
