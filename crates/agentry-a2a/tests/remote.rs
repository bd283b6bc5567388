//! `agentry-a2a` against a real A2A 1.0 agent: tests/peers/echo_agent.py on
//! the official Python SDK (a2a-sdk), started per test on 127.0.0.1 with the
//! interpreter `A2A_PYTHON` names (.ci/run makes its venv and sets it).

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use agentry_a2a::{A2aError, A2aOptions, A2aTool, RpcErrorKind, TaskState, discover};
use agentry_protocol::ErrorCode;
use agentry_protocol::tool::Effect;
use agentry_tools::Tool;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use support::{Agent, Progress, eventually, str_of, until_terminal};

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_discovered_agent_is_a_tool_whose_call_completes_with_its_text() {
    let agent = Agent::start().await;
    // The base URL and the card's own URL find the same agent.
    let by_card = discover(
        &format!("{}/.well-known/agent-card.json", agent.base),
        &agent.options(),
    )
    .await
    .unwrap();
    assert_eq!(by_card.card.name, "echo");
    assert_eq!(by_card.client.url(), format!("{}/", agent.base));

    let tool = agent.tool().await;
    let contract = tool.contract();
    assert_eq!(contract.name, "echo.ask");
    assert_eq!(contract.effect, Effect::IrreversibleExternal);
    assert!(
        contract.description.contains("echoes"),
        "{}",
        contract.description
    );
    let out = tool
        .call(
            json!({"message": "hello"}),
            &agent.ctx(CancellationToken::new()),
        )
        .await
        .unwrap();
    assert_eq!(str_of(&out.data, "text"), "echo: hello", "{}", out.data);
    assert_eq!(str_of(&out.data, "state"), "TASK_STATE_COMPLETED");
    let task = agent
        .client()
        .await
        .get_task(str_of(&out.data, "task_id"))
        .await
        .unwrap();
    assert_eq!(task.status.state, TaskState::Completed);
    assert_eq!(task.artifact_text(), "echo: hello");

    // Parts other than text: data as it is, a file by its URL, bytes by size.
    let out = tool
        .call(
            json!({"message": "parts"}),
            &agent.ctx(CancellationToken::new()),
        )
        .await
        .unwrap();
    assert_eq!(str_of(&out.data, "text"), "three parts");
    assert_eq!(
        out.data["parts"],
        json!([
            {"data": {"n": 1.0}},
            {"url": "https://files.invalid/f.txt", "filename": "f.txt", "media_type": "text/plain"},
            {"raw_bytes": 5, "media_type": "application/octet-stream"},
        ]),
        "{}",
        out.data
    );

    // An overridden effect is the contract's.
    let read_only = agent.tool().await.effect(Effect::ReadOnly);
    assert_eq!(read_only.contract().effect, Effect::ReadOnly);
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_wrong_bearer_token_is_a_typed_401() {
    let agent = Agent::start().await;
    let wrong = A2aOptions::default().bearer("not-the-token");
    // The card is public; the RPC is not.
    let found = discover(&agent.base, &wrong).await.unwrap();
    let err = found
        .client
        .get_task("any")
        .await
        .expect_err("a wrong token must be refused");
    assert!(
        matches!(err, A2aError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("401"), "{err}");
    let tool = A2aTool::discover("echo", &agent.base, &wrong)
        .await
        .unwrap();
    let err = tool
        .call(
            json!({"message": "hello"}),
            &agent.ctx(CancellationToken::new()),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eperm, "{err}");
    assert!(err.message.contains("401"), "{err}");
    // No credentials at all: the same.
    let none = discover(&agent.base, &A2aOptions::default()).await.unwrap();
    let err = none.client.get_task("any").await.unwrap_err();
    assert!(
        matches!(err, A2aError::HttpStatus { status: 401, .. }),
        "{err:?}"
    );
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_question_is_a_result_and_the_answer_continues_the_same_task() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let ctx = agent.ctx(CancellationToken::new());
    let asked = tool.call(json!({"message": "ask"}), &ctx).await.unwrap();
    assert_eq!(str_of(&asked.data, "state"), "TASK_STATE_INPUT_REQUIRED");
    assert_eq!(asked.data["input_required"], json!(true));
    assert_eq!(str_of(&asked.data, "text"), "which one?");
    let task_id = str_of(&asked.data, "task_id").to_string();
    assert!(str_of(&asked.data, "next").contains(&task_id));

    let answered = tool
        .call(json!({"message": "the red one", "task_id": task_id}), &ctx)
        .await
        .unwrap();
    assert_eq!(str_of(&answered.data, "state"), "TASK_STATE_COMPLETED");
    assert_eq!(str_of(&answered.data, "task_id"), task_id);
    assert_eq!(str_of(&answered.data, "text"), "echo: the red one");

    // An unknown task is the model's mistake, named.
    let err = tool
        .call(json!({"message": "x", "task_id": "no-such-task"}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval, "{err}");
    let err = agent
        .client()
        .await
        .get_task("no-such-task")
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            A2aError::Rpc {
                kind: RpcErrorKind::TaskNotFound,
                code: -32001,
                ..
            }
        ),
        "{err:?}"
    );
    // A completed task cannot be cancelled.
    let err = agent
        .client()
        .await
        .cancel_task(&task_id)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            A2aError::Rpc {
                kind: RpcErrorKind::TaskNotCancelable,
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_cancelled_call_cancels_its_remote_task() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let client = agent.client().await;

    // Cancelled by its token (the executor at a deadline or an abort), once
    // the remote task runs (its first progress report names it).
    let token = CancellationToken::new();
    let progress = Arc::new(Progress::default());
    let ctx = agent.ctx_with(token.clone(), Some(progress.clone()));
    let mut call = Box::pin(tool.call(json!({"message": "slow"}), &ctx));
    running(call.as_mut(), &progress).await;
    token.cancel();
    let err = call.await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled, "{err}");
    let cancels = agent.cancels();
    assert_eq!(cancels.len(), 1, "the agent saw {cancels:?}");
    assert!(err.message.contains(&cancels[0]), "{err}");
    assert!(progress.messages()[0].contains(&cancels[0]));
    let task = client.get_task(&cancels[0]).await.unwrap();
    assert_eq!(task.status.state, TaskState::Canceled);

    // Dropped (the executor drops a call past its grace).
    let progress = Arc::new(Progress::default());
    let ctx = agent.ctx_with(CancellationToken::new(), Some(progress.clone()));
    let mut call = Box::pin(tool.call(json!({"message": "slow"}), &ctx));
    running(call.as_mut(), &progress).await;
    drop(call);
    eventually(Duration::from_secs(10), "a second CancelTask", || {
        agent.cancels().len() == 2
    })
    .await;
    let second = agent.cancels()[1].clone();
    assert!(progress.messages()[0].contains(&second));
    assert_eq!(until_terminal(&client, &second).await, TaskState::Canceled);
}

/// Drives `call` until it has reported its remote task (it must not end).
async fn running<F>(call: std::pin::Pin<&mut F>, progress: &Progress)
where
    F: std::future::Future<
            Output = Result<agentry_tools::ToolOutput, agentry_protocol::envelope::ToolError>,
        >,
{
    tokio::select! {
        out = call => panic!("the slow call ended: {out:?}"),
        () = eventually(Duration::from_secs(10), "a progress report", || {
            !progress.messages().is_empty()
        }) => {}
    }
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_failed_or_rejected_task_is_an_error_naming_its_state_and_message() {
    let agent = Agent::start().await;
    let tool = agent.tool().await;
    let ctx = agent.ctx(CancellationToken::new());
    let err = tool
        .call(json!({"message": "fail"}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eunavail, "{err}");
    assert!(!err.retryable, "{err:?}");
    assert!(
        err.message.contains("TASK_STATE_FAILED") && err.message.contains("the disk is full"),
        "{err}"
    );
    let err = tool
        .call(json!({"message": "reject"}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eperm, "{err}");
    assert!(
        err.message.contains("TASK_STATE_REJECTED") && err.message.contains("not my job"),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_card_without_a_1_0_jsonrpc_interface_is_a_typed_error() {
    let agent = Agent::start().await;
    let err = discover(&format!("{}/old", agent.base), &agent.options())
        .await
        .unwrap_err();
    assert!(matches!(err, A2aError::NoJsonRpc10 { .. }), "{err:?}");
    assert!(err.to_string().contains("JSONRPC 0.3.0"), "{err}");
    let err = discover(&format!("{}/nothing", agent.base), &agent.options())
        .await
        .unwrap_err();
    assert!(
        matches!(err, A2aError::CardStatus { status: 404, .. }),
        "{err:?}"
    );
}
