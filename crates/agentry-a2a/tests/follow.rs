//! A call's remote task on record: the tool records the task it started
//! (`ToolContext::remote`) before it waits, with a message id made from the
//! call's operation id, and a call run again after a crash with that record
//! follows the same task (subscribing to it, the agent streams) instead of
//! sending again. The agent is
//! tests/peers/echo_agent.py (see tests/remote.rs).

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;

use agentry_a2a::{REMOTE_KIND, SendRequest, TaskState};
use agentry_protocol::RemoteRef;
use agentry_tools::{RemoteLog, Tool};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::{Agent, Remotes, str_of};

#[tokio::test]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn a_call_records_its_remote_task_and_its_message_id_names_the_operation() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let remotes = Arc::new(Remotes::default());
    let mut ctx = agent.ctx(CancellationToken::new());
    ctx.remote = Some(Arc::clone(&remotes) as Arc<dyn RemoteLog>);
    let out = tool.call(json!({"message": "hello"}), &ctx).await.unwrap();
    let task_id = str_of(&out.data, "task_id");
    let started = remotes.started.lock().unwrap().clone();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0].kind, REMOTE_KIND);
    assert_eq!(started[0].id, task_id);
    assert_eq!(
        started[0].context.as_deref(),
        Some(str_of(&out.data, "context_id"))
    );
    assert_eq!(agent.seen("message "), ["agentry-op-1-call-1-1"]);
}

#[tokio::test]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn a_call_with_a_recorded_task_follows_it_and_sends_nothing() {
    let agent = Agent::start().await;
    // The task an earlier attempt started before its process died.
    let client = agent.client().await;
    let started = client
        .send_message(&SendRequest {
            text: "slow 2".into(),
            return_immediately: true,
            ..SendRequest::default()
        })
        .await
        .unwrap();
    let agentry_a2a::SendResult::Task(task) = started else {
        panic!("no task: {started:?}");
    };
    assert_ne!(task.status.state, TaskState::Completed);

    let tool = agent.tool().await;
    let remotes = Arc::new(Remotes {
        follow: Some(RemoteRef {
            kind: REMOTE_KIND.into(),
            id: task.id.clone(),
            context: Some(task.context_id.clone()),
        }),
        ..Remotes::default()
    });
    let mut ctx = agent.ctx(CancellationToken::new());
    ctx.remote = Some(Arc::clone(&remotes) as Arc<dyn RemoteLog>);
    // The arguments are the call's own; the message is not sent again.
    let out = tool.call(json!({"message": "slow 2"}), &ctx).await.unwrap();
    assert_eq!(str_of(&out.data, "task_id"), task.id);
    assert_eq!(str_of(&out.data, "text"), "echo: slow 2");
    assert_eq!(agent.seen("task "), std::slice::from_ref(&task.id));
    assert_eq!(agent.seen("message ").len(), 1);
    // The agent streams: the running task is subscribed to, not sent to.
    let methods = agent.seen("method ");
    assert!(
        methods.contains(&"SubscribeToTask".to_string()),
        "{methods:?}"
    );
    assert_eq!(
        methods.iter().filter(|m| m.starts_with("Send")).count(),
        1,
        "only the earlier attempt's send: {methods:?}"
    );
    // Recorded again: a second crash follows it too.
    assert_eq!(remotes.started.lock().unwrap()[0].id, task.id);
}
