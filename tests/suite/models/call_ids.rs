//! Call ids the host can trust, through the real runtime and the strict mock
//! server, for both adapters: calls the model sent without an id run under
//! host-made ids that the next request carries on the call and its result
//! alike; a call repeating an id of its turn is `EINVAL` naming the id and
//! never runs (its file is never written).

use agentry::protocol::ResultEnvelope;
use agentry::{ErrorCode, Runtime, StopReason};
use agentry_models::{AnthropicPolicy, OpenAiPolicy};
use agentry_test_support::{TestTask, run_with_events, tool_results};
use serde_json::Value;

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_call, anthropic_calls, calls_turn, config, one_call};

/// Two calls without an id, then two under the id "w": the second "w" writes
/// `d.txt`, which must never exist.
const CALLS: [(&str, &str, &str); 4] = [
    ("", "fs_write", r#"{"path":"a.txt","content":"1"}"#),
    ("", "fs_write", r#"{"path":"b.txt","content":"2"}"#),
    ("w", "fs_write", r#"{"path":"sum.txt","content":"23"}"#),
    ("w", "fs_write", r#"{"path":"d.txt","content":"4"}"#),
];
const FINISH: (&str, &str, &str) = ("fin", "task_finish", r#"{"answer":"sum=23"}"#);

#[tokio::test]
async fn openai_blank_ids_run_under_host_ids_and_a_repeated_id_is_einval() -> Result<(), TestError>
{
    let server = MockServer::start(vec![
        Reply::sse(calls_turn(&CALLS)),
        Reply::sse(one_call(FINISH.0, FINISH.1, FINISH.2)),
    ])
    .await?;
    let task = TestTask::sum()?;
    let policy = OpenAiPolicy::new(config(&server.base_url))?;
    let (outcome, events) =
        run_with_events(&Runtime::with_builtins()?, task.config(), policy).await?;
    check_run(&task, &outcome, &tool_results(&events))?;
    assert!(server.rejected().is_empty(), "{:?}", server.rejected());
    let sent = server.received();
    assert_eq!(sent.len(), 2, "one request per turn, none refused");
    let messages = sent[1].body["messages"].as_array().ok_or("no messages")?;
    let asked: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .filter_map(|c| c["id"].as_str())
        .collect();
    let answered: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    check_wire_ids(&asked, &answered);
    Ok(())
}

#[tokio::test]
async fn anthropic_blank_ids_run_under_host_ids_and_a_repeated_id_is_einval()
-> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(anthropic_calls(&CALLS)),
        Reply::sse(anthropic_call(FINISH.0, FINISH.1, FINISH.2)),
    ])
    .await?;
    let task = TestTask::sum()?;
    let policy = AnthropicPolicy::new(config(&server.base_url))?;
    let (outcome, events) =
        run_with_events(&Runtime::with_builtins()?, task.config(), policy).await?;
    check_run(&task, &outcome, &tool_results(&events))?;
    assert!(server.rejected().is_empty(), "{:?}", server.rejected());
    let sent = server.received();
    assert_eq!(sent.len(), 2, "one request per turn, none refused");
    let blocks: Vec<&Value> = sent[1].body["messages"]
        .as_array()
        .ok_or("no messages")?
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .collect();
    let asked: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .filter_map(|b| b["id"].as_str())
        .collect();
    let answered: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .filter_map(|b| b["tool_use_id"].as_str())
        .collect();
    check_wire_ids(&asked, &answered);
    Ok(())
}

/// The run: done; a, b and sum.txt written, d.txt not; the step's results in
/// call order under host ids, "w", and "w" refused.
fn check_run(
    task: &TestTask,
    outcome: &agentry::RunOutcome,
    results: &[(u64, ResultEnvelope)],
) -> Result<(), TestError> {
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(task.read_file("a.txt")?, "1");
    assert_eq!(task.read_file("b.txt")?, "2");
    assert_eq!(task.read_file("sum.txt")?, "23");
    assert!(
        !task.workdir().join("d.txt").exists(),
        "the call under a repeated id ran"
    );
    let step1: Vec<(&str, Option<ErrorCode>)> = results
        .iter()
        .filter(|(step, _)| *step == 1)
        .map(|(_, r)| (r.tool_call_id.as_str(), r.error_code()))
        .collect();
    assert_eq!(
        step1,
        [
            ("call_1_0", None),
            ("call_1_1", None),
            ("w", None),
            ("w", Some(ErrorCode::Einval)),
        ]
    );
    let refusal = &results[3].1;
    let message = refusal.error.as_ref().map(|e| e.message.as_str());
    assert!(
        message.is_some_and(|m| m.contains("\"w\"")),
        "the refusal names the id: {message:?}"
    );
    Ok(())
}

/// The calls go back under the host ids, the repeated one under a stand-in;
/// each answered once, in order.
fn check_wire_ids(asked: &[&str], answered: &[&str]) {
    assert_eq!(&asked[..3], ["call_1_0", "call_1_1", "w"], "{asked:?}");
    assert!(!asked[3].is_empty() && asked[3] != "w", "{asked:?}");
    assert_eq!(asked, answered);
}
