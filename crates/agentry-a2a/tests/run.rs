//! An A2A agent's tool inside a real agentry run: parked for approval by
//! default, its remote task cancelled when the run's deadline cancels the
//! call, the deadlines sent as metadata, and (`input_required = human`) the
//! agent's question put to a human through the approval path, whose answer
//! continues the task and whose refusal cancels it; a timed-out call of a
//! `read_only` agent is not retried (one remote task, one `CancelTask`)
//! unless its `max_retries` says so; the tool's description carries the
//! card's description and skills. The agent is
//! tests/peers/echo_agent.py (see tests/remote.rs).

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use agentry::{RunStatus, StopReason};
use agentry_a2a::{InputRequired, TaskState};
use agentry_protocol::ErrorCode;
use agentry_test_support::{
    ScriptBuilder, TestError, TestTask, collect_until_stopped, runtime_with, tool_results,
};
use serde_json::json;

use support::{Agent, eventually, until_terminal};

async fn wait_for_pending(handle: &agentry::RunHandle) -> Result<String, TestError> {
    for _ in 0..1000 {
        if let Some(p) = handle.pending_approvals().await.first() {
            return Ok(p.call.id.clone());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("no call became pending".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn a_remote_agent_call_waits_for_approval_then_runs() -> Result<(), TestError> {
    let agent = Agent::start().await;
    let runtime = runtime_with(vec![Arc::new(agent.tool().await)])?;
    // The agent is granted by its name.
    let task = TestTask::new("ask the echo agent", &[])?.grant(&["echo"]);
    let policy = ScriptBuilder::new()
        .call("a1", "echo.ask", json!({"message": "hello"}))
        .finish("asked")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    let events = handle.subscribe();
    assert_eq!(wait_for_pending(&handle).await?, "a1");
    let snap = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(snap.status, RunStatus::AwaitingApproval);
    handle.approve("a1").await?;
    let events = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let env = &results.first().ok_or("no tool result")?.1;
    assert!(env.ok, "{env:?}");
    let data = env.data.as_ref().ok_or("no data")?;
    assert_eq!(data["text"], "echo: hello");
    assert_eq!(data["state"], "TASK_STATE_COMPLETED");
    assert!(
        data["task_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{data}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it); .ci/run runs it"]
async fn the_run_deadline_cancels_the_remote_task() -> Result<(), TestError> {
    let agent = Agent::start().await;
    let runtime = runtime_with(vec![Arc::new(agent.tool().await)])?;
    let task = TestTask::new("ask slowly", &[])?
        .grant(&["echo"])
        .deadline_ms(3_000);
    let mut config = task.config();
    // No human here: the call runs without approval.
    config.approval.irreversible = false;
    let policy = ScriptBuilder::new()
        .call("s1", "echo.ask", json!({"message": "slow"}))
        .finish("never reached")
        .policy();
    let handle = runtime.start(config, policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    let results = tool_results(&events);
    let env = &results.first().ok_or("no tool result")?.1;
    assert!(
        matches!(
            env.error_code(),
            Some(ErrorCode::Ecanceled | ErrorCode::Etimedout)
        ),
        "{env:?}"
    );
    eventually(Duration::from_secs(10), "the agent saw CancelTask", || {
        agent.cancels().len() == 1
    })
    .await;
    let id = agent.cancels()[0].clone();
    assert_eq!(
        until_terminal(&agent.client().await, &id).await,
        TaskState::Canceled
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn the_call_deadline_and_the_runs_time_left_go_as_metadata() -> Result<(), TestError> {
    let agent = Agent::start().await;
    let tool = agent.tool().await.timeout(Duration::from_secs(20));
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("ask for the metadata", &[])?
        .grant(&["echo"])
        .deadline_ms(60_000);
    let mut config = task.config();
    config.approval.irreversible = false;
    let policy = ScriptBuilder::new()
        .call("m1", "echo.ask", json!({"message": "meta"}))
        .finish("asked")
        .policy();
    let before = now_ms();
    let handle = runtime.start(config, policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let env = &results.first().ok_or("no tool result")?.1;
    let data = env.data.as_ref().ok_or("no data")?;
    let said: serde_json::Value = serde_json::from_str(data["text"].as_str().ok_or("no text")?)?;
    // The call's deadline: its 20 s timeout from when it started (earlier
    // than the run's 60 s), as Unix ms (JSON numbers through protobuf).
    let deadline = said["deadline_ms"].as_f64().ok_or("no deadline_ms")? as u64;
    assert!(
        deadline >= before + 19_000 && deadline <= now_ms() + 20_000,
        "{said}"
    );
    let left = said["run_remaining_ms"]
        .as_f64()
        .ok_or("no run_remaining_ms")? as u64;
    assert!(left > 50_000 && left <= 60_000, "{said}");
    assert_eq!(said["call_id"], "m1", "{said}");
    assert!(
        said["operation_id"]
            .as_str()
            .is_some_and(|o| o.starts_with("op-")),
        "{said}"
    );
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A run whose `echo.ask` puts the agent's questions to a human; the call
/// itself needs no approval.
async fn asking_a_human(agent: &Agent) -> Result<agentry::RunHandle, TestError> {
    let tool = agent.tool().await.input_required(InputRequired::Human);
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("ask the echo agent", &[])?.grant(&["echo"]);
    let mut config = task.config();
    config.approval.irreversible = false;
    let policy = ScriptBuilder::new()
        .call("q1", "echo.ask", json!({"message": "ask"}))
        .finish("asked")
        .policy();
    Ok(runtime.start(config, policy).await?)
}

/// The question the parked call shows its human.
async fn question(handle: &agentry::RunHandle) -> Result<String, TestError> {
    assert_eq!(wait_for_pending(handle).await?, "q1");
    let pending = handle.pending_approvals().await;
    let preview = pending[0].preview.clone().ok_or("no preview")?;
    assert_eq!(
        handle.snapshot().await.ok_or("no snapshot")?.status,
        RunStatus::AwaitingApproval
    );
    Ok(preview)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn a_remote_question_goes_to_a_human_whose_answer_continues_the_task() -> Result<(), TestError>
{
    let agent = Agent::start().await;
    let handle = asking_a_human(&agent).await?;
    let events = handle.subscribe();
    let preview = question(&handle).await?;
    assert!(preview.contains("which one?"), "{preview}");
    handle.answer("q1", "the blue one").await?;
    let events = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let env = &results.first().ok_or("no tool result")?.1;
    let data = env.data.as_ref().ok_or("no data")?;
    assert_eq!(data["text"], "echo: the blue one", "{data}");
    assert_eq!(data["state"], "TASK_STATE_COMPLETED", "{data}");
    // One task, two messages: the question and the human's answer.
    assert_eq!(agent.seen("task ").len(), 1);
    let messages = agent.seen("message ");
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert_eq!(messages[1], format!("{}-1", messages[0]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn a_human_refusing_the_question_cancels_the_remote_task() -> Result<(), TestError> {
    let agent = Agent::start().await;
    let handle = asking_a_human(&agent).await?;
    let events = handle.subscribe();
    question(&handle).await?;
    handle.deny("q1", Some("not ours to say".into())).await?;
    let events = collect_until_stopped(events).await?;
    handle.wait().await?;
    let results = tool_results(&events);
    let env = &results.first().ok_or("no tool result")?.1;
    assert_eq!(env.error_code(), Some(ErrorCode::Eperm), "{env:?}");
    let message = &env.error.as_ref().ok_or("no error")?.message;
    assert!(message.contains("not ours to say"), "{message}");
    eventually(Duration::from_secs(10), "the agent saw CancelTask", || {
        agent.cancels().len() == 1
    })
    .await;
    Ok(())
}

/// A run of one `echo.ask` call of a `read_only` agent with `max_retries`
/// that times out after 1 s on a task that works 30 s; the agent's record
/// once the run has stopped (every attempt is made before the call's result).
async fn timed_out_call(agent: &Agent, max_retries: Option<u32>) -> Result<(), TestError> {
    let tool = agent
        .tool()
        .await
        .effect(agentry_protocol::tool::Effect::ReadOnly)
        .timeout(Duration::from_secs(1));
    let tool = match max_retries {
        Some(n) => tool.max_retries(n),
        None => tool,
    };
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("ask slowly", &[])?
        .grant(&["echo"])
        .deadline_ms(60_000);
    let policy = ScriptBuilder::new()
        .call("t1", "echo.ask", json!({"message": "slow 30"}))
        .finish("gave up")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let env = &results.first().ok_or("no tool result")?.1;
    assert_eq!(env.error_code(), Some(ErrorCode::Etimedout), "{env:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn a_timed_out_read_only_call_is_one_remote_task_unless_max_retries_says_more()
-> Result<(), TestError> {
    // Before: the executor's default retries (2) sent the message three
    // times, three remote tasks and three CancelTasks.
    let agent = Agent::start().await;
    timed_out_call(&agent, None).await?;
    assert_eq!(agent.seen("task ").len(), 1, "one remote task");
    eventually(Duration::from_secs(10), "the agent saw CancelTask", || {
        agent.cancels().len() == 1
    })
    .await;
    assert_eq!(agent.seen("task ").len(), 1, "and no other after it");

    let agent = Agent::start().await;
    timed_out_call(&agent, Some(1)).await?;
    assert_eq!(
        agent.seen("task ").len(),
        2,
        "one retry: a second remote task"
    );
    eventually(
        Duration::from_secs(10),
        "the agent saw both CancelTasks",
        || agent.cancels().len() == 2,
    )
    .await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn the_tools_description_carries_the_cards_description_and_skills() -> Result<(), TestError> {
    use agentry_tools::Tool;
    let agent = Agent::start().await;
    let card =
        agentry_a2a::read_card(&agent.base, &agent.options(), Duration::from_secs(5)).await?;
    let described = agentry_a2a::card_description("echo", Some("Echoes text."), &card);
    let discovered = agent.tool().await.contract().description;
    for text in [&described, &discovered] {
        for part in [
            "echoes what it is told",
            "Echo (echoes; e.g. \"hello\")",
            "Question (asks which one before it answers; e.g. \"ask\")",
            "task_id",
        ] {
            assert!(text.contains(part), "{part:?} in {text:?}");
        }
    }
    assert!(
        described.starts_with("Echoes text. Its card: "),
        "{described}"
    );
    Ok(())
}
