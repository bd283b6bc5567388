//! An agent whose card says `capabilities.streaming` is followed over its
//! stream (`SendStreamingMessage`; `SubscribeToTask` for a recorded task):
//! each status and artifact a progress report, no polling; with streaming
//! off the same call polls `GetTask`. The agent is tests/peers/echo_agent.py
//! (see tests/remote.rs), which records each JSON-RPC method it is sent.

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use agentry_tools::Tool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::{Agent, Progress, str_of};

fn count(methods: &[String], name: &str) -> usize {
    methods.iter().filter(|m| *m == name).count()
}

#[tokio::test]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn a_streaming_agent_is_followed_over_its_stream_with_progress() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let progress = Arc::new(Progress::default());
    let ctx = agent.ctx_with(CancellationToken::new(), Some(Arc::clone(&progress)));
    let out = tool.call(json!({"message": "slow 1"}), &ctx).await.unwrap();
    assert_eq!(str_of(&out.data, "text"), "echo: slow 1", "{}", out.data);
    assert_eq!(str_of(&out.data, "state"), "TASK_STATE_COMPLETED");
    let methods = agent.seen("method ");
    assert_eq!(count(&methods, "SendStreamingMessage"), 1, "{methods:?}");
    assert_eq!(count(&methods, "SendMessage"), 0, "{methods:?}");
    // One read of the whole task at the end, no polling during the second.
    assert_eq!(count(&methods, "GetTask"), 1, "{methods:?}");
    let id = str_of(&out.data, "task_id");
    let said = progress.messages();
    for expected in [
        format!("remote task {id}: TASK_STATE_SUBMITTED"),
        format!("remote task {id}: TASK_STATE_WORKING"),
        // The same state with a message of its own is reported too.
        format!("remote task {id}: TASK_STATE_WORKING: half way"),
        format!("remote task {id}: artifact result"),
        format!("remote task {id}: TASK_STATE_COMPLETED"),
    ] {
        assert!(said.contains(&expected), "{expected} in {said:?}");
    }
}

#[tokio::test]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn with_streaming_off_a_call_polls_get_task() {
    let agent = Agent::start().await;
    let tool = agent.tool().await.streaming(false);
    let out = tool
        .call(
            json!({"message": "slow 1"}),
            &agent.ctx(CancellationToken::new()),
        )
        .await
        .unwrap();
    assert_eq!(str_of(&out.data, "text"), "echo: slow 1", "{}", out.data);
    let methods = agent.seen("method ");
    assert_eq!(count(&methods, "SendMessage"), 1, "{methods:?}");
    assert_eq!(count(&methods, "SendStreamingMessage"), 0, "{methods:?}");
    // Polled every 50 ms for a second.
    assert!(count(&methods, "GetTask") > 5, "{methods:?}");
}
