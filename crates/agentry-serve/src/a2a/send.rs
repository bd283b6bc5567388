//! The JSON-RPC methods: a message starts a run of the agent or continues
//! its task (a text is a user message; a data part answers an approval or a
//! crash decision), and the task is then waited for, streamed, got, listed,
//! cancelled, or told to a push receiver.

use std::time::Duration;

use axum::body::Bytes;
use axum::response::Response;
use serde_json::{Value, json};

use super::super::error::ApiError;
use super::super::table::live;
use super::call::Call;
use super::follow::{Follower, Until, sse};
use super::look::observe;
use super::push;
use super::remote::{self, Input};
use super::task::Files;
use super::wire::{Failure, Incoming, RpcError, id_param, incoming, reply};

/// How long CancelTask waits for the run to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The task a message went to, and the inputs its run must have applied to
/// have seen the message.
async fn start_or_continue(call: &Call) -> Result<(String, u64), Failure> {
    let message = incoming(&call.params)?;
    if let Some(config) = call
        .params
        .pointer("/configuration/taskPushNotificationConfig")
        .filter(|c| c.is_object())
    {
        // Checked before anything starts.
        push::parse(&call.app, "", config)?;
    }
    let Some(id) = message.task_id.clone() else {
        if message.approval.is_some() || message.decision.is_some() {
            return Err(RpcError::invalid_params(
                "an approval or a decision answers a task: set message.taskId",
            )
            .into());
        }
        return Ok((start(call, message.text).await?, 1));
    };
    if !call.app.holds(&id) {
        return continue_elsewhere(call, id, message).await;
    }
    let entry = call
        .app
        .run(&call.tenant, &id)
        .ok()
        .filter(|e| e.meta.agent.as_deref() == Some(call.agent.as_str()))
        .ok_or_else(|| RpcError::task_not_found(&id))?;
    let handle = live(&id, entry.current()).map_err(|e| {
        RpcError::unsupported(format!("task {id} takes no message now: {}", e.message()))
    })?;
    let runtime = |e| Failure::from(ApiError::from_runtime(e));
    if let Some(approval) = message.approval {
        approval
            .verdict
            .apply(&handle, &approval.call_id)
            .await
            .map_err(runtime)?;
        return Ok((id, 0));
    }
    if let Some(decision) = message.decision {
        let settlement: agentry::Settlement = decision
            .settle
            .parse()
            .map_err(|m: String| RpcError::invalid_params(format!("data.decision.settle: {m}")))?;
        handle
            .settle(&decision.call_id, settlement)
            .await
            .map_err(runtime)?;
        return Ok((id, 0));
    }
    let text = message.text.unwrap_or_default();
    let before = handle.snapshot().await.map_or(0, |s| s.inputs);
    let limit = call.app.config.limits.run_input_bytes;
    entry.take_input(&id, text.len(), limit)?;
    if let Err(e) = handle.send_message(text.clone()) {
        if let agentry::RuntimeError::InboxFull { .. } = &e {
            entry.give_back_input(text.len());
        }
        return Err(runtime(e));
    }
    Ok((id, before + 1))
}

/// A message to a task another node holds (or only the store does): its
/// native request, sent where the run is (`remote.rs`).
async fn continue_elsewhere(
    call: &Call,
    id: String,
    message: Incoming,
) -> Result<(String, u64), Failure> {
    let task = call.task(&id);
    let now = observe(task, Files::Skip).await?;
    let (input, min_inputs) = match (message.approval, message.decision) {
        (Some(approval), _) => (Input::Approval(approval), 0),
        (None, Some(decision)) => {
            decision
                .settle
                .parse::<agentry::Settlement>()
                .map_err(|m: String| {
                    RpcError::invalid_params(format!("data.decision.settle: {m}"))
                })?;
            (Input::Decision(decision), 0)
        }
        (None, None) => (
            Input::Text(message.text.unwrap_or_default()),
            now.inputs + 1,
        ),
    };
    remote::send(task, input).await?;
    Ok((id, min_inputs))
}

/// A run of the agent with the message as its input, through `POST /runs`'s
/// checks and limits (tenant, queue, cost); its id.
async fn start(call: &Call, text: Option<String>) -> Result<String, Failure> {
    let bytes = Bytes::from(json!({"agent": call.agent, "input": text}).to_string());
    let traceparent = super::super::create::traceparent(&call.headers);
    let app = &call.app;
    let request = app
        .request_of(&call.tenant, bytes.clone(), traceparent)
        .await?;
    let response = app.admit(call.tenant.clone(), request, bytes).await?;
    let body = axum::body::to_bytes(response.into_body(), 64 * 1024)
        .await
        .map_err(|e| RpcError::internal(format!("reading the started run: {e}")))?;
    let created: Value = serde_json::from_slice(&body).unwrap_or_default();
    created["run_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| RpcError::internal("the run started without an id").into())
}

/// A push config given inline, for the task the message went to.
async fn inline_push(call: &Call, task_id: &str, min_inputs: u64) -> Result<(), Failure> {
    if let Some(config) = call
        .params
        .pointer("/configuration/taskPushNotificationConfig")
        .filter(|c| c.is_object())
    {
        call.pushes
            .create(call.task(task_id), config, min_inputs)
            .await?;
    }
    Ok(())
}

/// SendMessage: `{"task": …}` once the task is terminal or needs input
/// (at once with `configuration.returnImmediately`).
pub(super) async fn send(call: &Call) -> Result<Value, Failure> {
    let (id, min_inputs) = start_or_continue(call).await?;
    inline_push(call, &id, min_inputs).await?;
    let immediately = call
        .params
        .pointer("/configuration/returnImmediately")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if immediately {
        let now = observe(call.task(&id), Files::Read).await?;
        return Ok(json!({"task": now.task(true)}));
    }
    let until = Until {
        input_required: true,
        min_inputs,
    };
    let last = Follower::new(call.task(&id), until)
        .finish()
        .await
        .ok_or_else(|| RpcError::task_not_found(&id))?;
    Ok(json!({"task": last.task(true)}))
}

/// SendStreamingMessage: the task's StreamResponses over SSE.
pub(super) async fn stream(call: Call) -> Response {
    let (id, min_inputs) = match start_or_continue(&call).await {
        Ok(started) => started,
        Err(e) => return reply(&call.id, Err(e)),
    };
    if let Err(e) = inline_push(&call, &id, min_inputs).await {
        return reply(&call.id, Err(e));
    }
    let until = Until {
        input_required: true,
        min_inputs,
    };
    let follower = Follower::new(call.task(&id), until).with_slot();
    sse(follower, call.id)
}

/// SubscribeToTask: as a stream, from the task's state now (-32004 for a
/// terminal task).
pub(super) async fn subscribe(call: Call) -> Response {
    let now = match id_param(&call.params, "id") {
        Ok(id) => observe(call.task(&id), Files::Read).await,
        Err(e) => Err(e),
    };
    let now = match now {
        Ok(now) if now.state.terminal() => Err(RpcError::unsupported(format!(
            "Task {} is in terminal state: {}",
            now.id,
            now.state.name()
        ))),
        other => other,
    };
    let now = match now {
        Ok(now) => now,
        Err(e) => return reply(&call.id, Err(e.into())),
    };
    let until = Until {
        input_required: true,
        min_inputs: 0,
    };
    let follower = Follower::new(call.task(&now.id), until).with_slot();
    sse(follower, call.id)
}

/// GetTask.
pub(super) async fn get(call: &Call) -> Result<Value, Failure> {
    let id = id_param(&call.params, "id")?;
    let now = observe(call.task(&id), Files::Read).await?;
    Ok(now.task(true))
}

/// CancelTask: the native abort (`user_abort`); -32002 for a terminal task.
pub(super) async fn cancel(call: &Call) -> Result<Value, Failure> {
    let id = id_param(&call.params, "id")?;
    let task = call.task(&id);
    let now = observe(task, Files::Read).await?;
    if now.state.terminal() {
        return Err(RpcError::not_cancelable(&id, now.state.name()).into());
    }
    if !call.app.holds(&id) {
        remote::abort(task).await;
    } else if !call.app.cancel_queued(&id).await
        && let Ok(entry) = call.app.run(&call.tenant, &id)
        && let Ok(handle) = live(&id, entry.current())
    {
        handle.abort();
    }
    let until = Until {
        input_required: false,
        min_inputs: 0,
    };
    let follower = Follower::new(task, until);
    let last = match tokio::time::timeout(CANCEL_WAIT, follower.finish()).await {
        Ok(Some(last)) => last,
        Ok(None) | Err(_) => observe(task, Files::Read).await?,
    };
    Ok(last.task(true))
}

/// CreateTaskPushNotificationConfig.
pub(super) async fn create_push(call: &Call) -> Result<Value, Failure> {
    let id = id_param(&call.params, "taskId")?;
    let task = call.task(&id);
    // The task must be the caller's; its files are not needed.
    observe(task, Files::Skip).await?;
    let config = call.pushes.create(task, &call.params, 0).await?;
    Ok(config.json())
}

/// GetTaskPushNotificationConfig.
pub(super) async fn get_push(call: &Call) -> Result<Value, Failure> {
    let id = id_param(&call.params, "taskId")?;
    observe(call.task(&id), Files::Skip).await?;
    let config = id_param(&call.params, "id")?;
    Ok(call.pushes.find(&id, &config)?.json())
}

/// ListTaskPushNotificationConfigs (one page: all of them).
pub(super) async fn list_push(call: &Call) -> Result<Value, Failure> {
    let id = id_param(&call.params, "taskId")?;
    observe(call.task(&id), Files::Skip).await?;
    let configs: Vec<Value> = call.pushes.list(&id).iter().map(|c| c.json()).collect();
    Ok(json!({"configs": configs, "nextPageToken": ""}))
}

/// DeleteTaskPushNotificationConfig.
pub(super) async fn delete_push(call: &Call) -> Result<Value, Failure> {
    let id = id_param(&call.params, "taskId")?;
    observe(call.task(&id), Files::Skip).await?;
    let config = id_param(&call.params, "id")?;
    call.pushes.delete(&id, &config);
    Ok(Value::Null)
}
