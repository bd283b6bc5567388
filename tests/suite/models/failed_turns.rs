//! A failed model turn — an HTTP 400 the adapter gives up on, a stream that
//! stalls past its retries, a text reply under `TextReply::RequireFinish` — and
//! then the sum task to `done`, for both adapters, through the real runtime
//! against the strict mock server (which answers any request its provider would
//! refuse with that provider's 400). The failure must reach the model as a note
//! from the host in a request the provider accepts, and the runtime must record
//! no tool result for it.

use std::time::Duration;

use agentry::Runtime;
use agentry::StopReason;
use agentry::protocol::{Decision, RunEvent};
use agentry_models::{AnthropicPolicy, ModelConfig, OpenAiPolicy, RetryConfig, TextReply};
use agentry_test_support::TestTask;
use serde_json::Value;

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_call, anthropic_text, config, one_call, stalling, text_turn};

#[derive(Clone, Copy, Debug)]
enum Wire {
    OpenAi,
    Anthropic,
}

/// How the first turn fails.
#[derive(Clone, Copy, Debug)]
enum Failure {
    BadRequest,
    Stall,
    TextUnderRequireFinish,
}

impl Wire {
    fn call(self, id: &str, name: &str, args: &str) -> Reply {
        Reply::sse(match self {
            Wire::OpenAi => one_call(id, name, args),
            Wire::Anthropic => anthropic_call(id, name, args),
        })
    }

    fn text(self, text: &str) -> Reply {
        Reply::sse(match self {
            Wire::OpenAi => text_turn(text),
            Wire::Anthropic => anthropic_text(text),
        })
    }

    /// A 400 in the provider's own shape, for something the checker does not
    /// cover (as a real API refuses a request for reasons of its own).
    fn bad_request(self) -> Reply {
        Reply::status(
            400,
            match self {
                Wire::OpenAi => {
                    r#"{"error":{"message":"context_length_exceeded","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#
                }
                Wire::Anthropic => {
                    r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long"}}"#
                }
            },
        )
    }

    /// The messages of a request as (role, text) pairs, text blocks joined; an
    /// Anthropic tool block reads as its type.
    fn messages(self, body: &Value) -> Vec<(String, String)> {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        messages
            .iter()
            .map(|m| {
                let role = m["role"].as_str().unwrap_or_default().to_string();
                let text = match (&m["content"], self) {
                    (Value::Array(blocks), Wire::Anthropic) => blocks
                        .iter()
                        .map(|b| match b["text"].as_str() {
                            Some(t) => t.to_string(),
                            None => format!("<{}>", b["type"].as_str().unwrap_or_default()),
                        })
                        .collect::<Vec<_>>()
                        .join(" | "),
                    (c, _) => c.as_str().unwrap_or("<calls>").to_string(),
                };
                (role, text)
            })
            .collect()
    }
}

async fn failed_turn_then_done(wire: Wire, failure: Failure) -> Result<(), TestError> {
    let (first, base_config): (Reply, fn(&str) -> ModelConfig) = match failure {
        Failure::BadRequest => (wire.bad_request(), config),
        // The server holds the stream open without a byte for 20 s; the adapter
        // gives up at its stall timeout and has no retries left.
        Failure::Stall => (wire.call("never", "fs_read", "{}").stall_after(0), stalling),
        Failure::TextUnderRequireFinish => (wire.text("the sum is 23"), config),
    };
    let server = MockServer::start(vec![
        first,
        wire.call("read", "fs_read", r#"{"path":"numbers.txt"}"#),
        wire.call("write", "fs_write", r#"{"path":"sum.txt","content":"23"}"#),
        wire.call("fin", "task_finish", r#"{"answer":"sum=23"}"#),
    ])
    .await?;
    let model = base_config(&server.base_url)
        .retry(RetryConfig {
            max_retries: 0,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        })
        .text_reply(TextReply::RequireFinish);
    let task = TestTask::sum()?;
    let runtime = Runtime::with_builtins()?;
    let handle = match wire {
        Wire::OpenAi => {
            runtime
                .start(task.config(), OpenAiPolicy::new(model)?)
                .await?
        }
        Wire::Anthropic => {
            runtime
                .start(task.config(), AnthropicPolicy::new(model)?)
                .await?
        }
    };
    let events = agentry_test_support::collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(
        outcome.steps, 4,
        "one failed turn, then read, write, finish"
    );
    assert_eq!(task.read_file("sum.txt")?, "23");
    assert_eq!(
        server.rejected(),
        [],
        "every request met the provider's rules"
    );
    // The failed turn is on record as the step's decision, with no tool result.
    let failed = events.iter().any(|e| {
        matches!(&e.event, RunEvent::DecisionMade { step: 1, decision }
            if matches!(**decision, Decision::Failed { fatal: false, .. }))
    });
    assert!(failed, "step 1 failed");
    let results_of_step_1 = events
        .iter()
        .filter(|e| matches!(&e.event, RunEvent::ToolCallFinished { step: 1, .. }))
        .count();
    assert_eq!(results_of_step_1, 0, "a failed turn is no tool result");
    the_next_request_shows_one_note(wire, &server, failure)
}

/// The request after the failed turn shows the failure once, as a host note.
fn the_next_request_shows_one_note(
    wire: Wire,
    server: &MockServer,
    failure: Failure,
) -> Result<(), TestError> {
    let sent = server.received();
    assert_eq!(sent.len(), 4);
    let second = wire.messages(&sent[1].body);
    let notes: Vec<&(String, String)> = second
        .iter()
        .filter(|(_, text)| text.contains("[agentry]"))
        .collect();
    assert_eq!(notes.len(), 1, "{second:?}");
    assert!(
        notes[0].0 == "user" && notes[0].1.contains("your previous turn failed"),
        "{second:?}"
    );
    let expected = match failure {
        Failure::BadRequest => "HTTP 400",
        Failure::Stall => "stalled",
        Failure::TextUnderRequireFinish => "call task.finish",
    };
    assert!(notes[0].1.contains(expected), "{second:?}");
    Ok(())
}

#[tokio::test]
async fn openai_a_400_then_a_run_that_completes_done() -> Result<(), TestError> {
    failed_turn_then_done(Wire::OpenAi, Failure::BadRequest).await
}

#[tokio::test]
async fn openai_a_stall_then_a_run_that_completes_done() -> Result<(), TestError> {
    failed_turn_then_done(Wire::OpenAi, Failure::Stall).await
}

#[tokio::test]
async fn openai_a_text_reply_under_require_finish_then_a_run_that_completes_done()
-> Result<(), TestError> {
    failed_turn_then_done(Wire::OpenAi, Failure::TextUnderRequireFinish).await
}

#[tokio::test]
async fn anthropic_a_400_then_a_run_that_completes_done() -> Result<(), TestError> {
    failed_turn_then_done(Wire::Anthropic, Failure::BadRequest).await
}

#[tokio::test]
async fn anthropic_a_stall_then_a_run_that_completes_done() -> Result<(), TestError> {
    failed_turn_then_done(Wire::Anthropic, Failure::Stall).await
}

#[tokio::test]
async fn anthropic_a_text_reply_under_require_finish_then_a_run_that_completes_done()
-> Result<(), TestError> {
    failed_turn_then_done(Wire::Anthropic, Failure::TextUnderRequireFinish).await
}
