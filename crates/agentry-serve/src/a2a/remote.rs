//! A task whose run this node does not hold: another node of the cluster
//! holds it, or only the store does now (it stopped before a restart).
//! Each step is the native request it stands for, sent as the native
//! routes' own cluster routing sends it (`Cluster::elsewhere`: to the
//! run's node through the inbox, or answered by the store), so the holder
//! applies it through its own routes and the answer is the one it gives:
//!
//! ```text
//! look at the task           GET  /runs/{id}
//! a text                     POST /runs/{id}/messages        {"text"}
//! an approval                POST /runs/{id}/approvals/{call} {"decision": "approve"|"deny", "reason"?}
//!                                                           or {"decision": "answer", "answer"}
//! a crash decision           POST /runs/{id}/decisions/{call} {"decision": SETTLE}
//! CancelTask                 POST /runs/{id}/interrupt       {"action": "abort"}
//! ```
//!
//! Without a cluster, a look is answered from the store alone.

use agentry::RunStatus;
use agentry::protocol::state::PendingApproval;
use agentry::protocol::stop::StopReason;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::super::agents::RunMeta;
use super::super::error::ApiError;
use super::super::node::{Answer, Forward, segment};
use super::super::table::App;
use super::task::{Files, Going, Observed, State, TaskRef, ended, going, queued};
use super::wire::{Approval, Decision, Failure, RpcError};

/// The answer of a native request for `task`'s run, from wherever the run is.
async fn native(task: TaskRef<'_>, method: &str, path: String, body: Option<Value>) -> Answer {
    let app = task.app;
    let forward = Forward::made(task.id, task.tenant, method, path, body.as_ref());
    if let Some(cluster) = app.cluster.get().cloned() {
        return super::super::cluster::answer_of(cluster.elsewhere(forward).await).await;
    }
    match app.answer_from_store(&forward, true).await {
        Some(answer) => answer,
        None => Answer {
            status: StatusCode::NOT_FOUND.as_u16(),
            body: Vec::new(),
        },
    }
}

/// The error message of a native answer.
fn message_of(answer: &Answer) -> String {
    serde_json::from_slice::<Value>(&answer.body)
        .ok()
        .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&answer.body).into_owned())
}

/// A native answer that is not a success, as the local path would fail.
fn failure(answer: &Answer) -> Failure {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut error = ApiError::new(status, message_of(answer));
    if status == StatusCode::TOO_MANY_REQUESTS {
        error = error.retry_after(1);
    }
    Failure::from(error)
}

/// `task`, from its view (`GET /runs/{id}`) where it is; its declared files
/// read (as `files` says) from its working directory, which this node
/// reaches when the nodes share their `workdir_root`.
pub(super) async fn observe(task: TaskRef<'_>, files: Files) -> Result<Observed, RpcError> {
    let id = task.id;
    let answer = native(task, "GET", format!("/runs/{}", segment(id)), None).await;
    if answer.status == StatusCode::NOT_FOUND.as_u16() {
        return Err(RpcError::task_not_found(id));
    }
    if answer.status != StatusCode::OK.as_u16() {
        return Err(RpcError::internal(format!(
            "task {id}: its node answered {}: {}",
            answer.status,
            message_of(&answer)
        )));
    }
    let view: Value = serde_json::from_slice(&answer.body)
        .map_err(|e| RpcError::internal(format!("task {id}: its view is not JSON: {e}")))?;
    if view["agent"].as_str() != Some(task.agent) {
        return Err(RpcError::task_not_found(id));
    }
    let mut now = of_view(id, &view)?;
    if files == Files::Read && now.state == State::Completed {
        now.files = stored_files(task.app, id).await;
    }
    Ok(now)
}

/// A run's view (`GET /runs/{id}`) as a task.
pub(super) fn of_view(id: &str, view: &Value) -> Result<Observed, RpcError> {
    let unreadable = |what: &str| RpcError::internal(format!("task {id}: its view has no {what}"));
    let status = view["status"]
        .as_str()
        .ok_or_else(|| unreadable("status"))?;
    if status == "queued" {
        return Ok(queued(id));
    }
    let status: RunStatus =
        serde_json::from_value(json!(status)).map_err(|_| unreadable("known status"))?;
    let inputs = view["inputs"].as_u64().unwrap_or(0);
    let outcome = &view["outcome"];
    if status == RunStatus::Stopped || outcome.is_object() {
        let reason: StopReason = serde_json::from_value(outcome["stop_reason"].clone())
            .map_err(|_| unreadable("stop reason"))?;
        let detail = outcome["detail"].as_str().unwrap_or_default();
        let answer = outcome["answer"].as_str().map(str::to_string);
        return Ok(ended(id, reason, detail, answer, inputs));
    }
    let pending = |field: &str| -> Vec<PendingApproval> {
        serde_json::from_value(view[field].clone()).unwrap_or_default()
    };
    let (approvals, decisions) = (pending("pending_approvals"), pending("pending_decisions"));
    Ok(going(
        id,
        Going {
            status,
            approvals: &approvals,
            decisions: &decisions,
            answer: view["answer"].as_str().map(str::to_string),
            inputs,
        },
    ))
}

/// The declared files of a completed run the store holds (its stored
/// config names its working directory and its meta the files).
async fn stored_files(app: &App, id: &str) -> Vec<Value> {
    let Ok(config) = app.runtime.stored_config(id).await else {
        return Vec::new();
    };
    let declared = RunMeta::stored(&config).artifacts;
    if declared.is_empty() {
        return Vec::new();
    }
    let (id, workdir) = (id.to_string(), config.workdir);
    tokio::task::spawn_blocking(move || super::files::read(&id, &workdir, &declared))
        .await
        .unwrap_or_default()
}

/// What a message asks of a task another node holds.
pub(super) enum Input {
    Text(String),
    Approval(Approval),
    Decision(Decision),
}

/// Sends `input` to `task` as its native request.
pub(super) async fn send(task: TaskRef<'_>, input: Input) -> Result<(), Failure> {
    let id = task.id;
    let seg = segment(id);
    let (path, body) = match input {
        Input::Text(text) => (format!("/runs/{seg}/messages"), json!({"text": text})),
        Input::Approval(approval) => (
            format!("/runs/{seg}/approvals/{}", segment(&approval.call_id)),
            approval.verdict.body(),
        ),
        Input::Decision(decision) => (
            format!("/runs/{seg}/decisions/{}", segment(&decision.call_id)),
            json!({"decision": decision.settle}),
        ),
    };
    let answer = native(task, "POST", path, Some(body)).await;
    match answer.status {
        200..=299 => Ok(()),
        409 => Err(RpcError::unsupported(format!(
            "task {id} takes no message now: {}",
            message_of(&answer)
        ))
        .into()),
        _ => Err(failure(&answer)),
    }
}

/// CancelTask's abort, for a task another node holds.
pub(super) async fn abort(task: TaskRef<'_>) {
    let body = json!({"action": "abort"});
    let path = format!("/runs/{}/interrupt", segment(task.id));
    let answer = native(task, "POST", path, Some(body)).await;
    if !(200..=299).contains(&answer.status) {
        tracing::warn!(
            run_id = task.id,
            status = answer.status,
            "A2A cancel: the run's node refused the abort"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_view_reads_as_the_task_its_run_is() {
        let stopped = json!({"run_id": "r", "status": "stopped", "inputs": 2, "agent": "a",
            "outcome": {"stop_reason": "done", "answer": "42", "detail": null}});
        let now = of_view("r", &stopped).unwrap();
        assert_eq!(
            (now.state, now.answer.as_deref()),
            (State::Completed, Some("42"))
        );
        let failed = json!({"status": "stopped",
            "outcome": {"stop_reason": "max_steps", "answer": null, "detail": "10 steps"}});
        let now = of_view("r", &failed).unwrap();
        assert_eq!(now.state, State::Failed);
        assert_eq!(now.parts[1]["data"]["stop_reason"], "max_steps");
        let asleep = json!({"status": "sleeping", "inputs": 1, "answer": "ok",
            "pending_approvals": []});
        let now = of_view("r", &asleep).unwrap();
        assert_eq!(
            (now.state, now.asleep, now.inputs),
            (State::InputRequired, true, 1)
        );
        assert_eq!(now.parts[0]["text"], "ok");
        assert_eq!(
            of_view("r", &json!({"status": "queued"})).unwrap().state,
            State::Submitted
        );
        assert!(of_view("r", &json!({"status": "dancing"})).is_err());
        // A remote agent's question says so, and that it takes an answer.
        let asked = json!({"status": "awaiting_approval", "pending_approvals": [{"step": 1,
            "call": {"id": "q1", "name": "billing.ask", "arguments": {}}, "requested_at": 0,
            "preview": "question from the remote agent: Which account?"}]});
        let now = of_view("r", &asked).unwrap();
        assert_eq!(now.state, State::InputRequired);
        assert_eq!(
            now.parts[1]["data"]["calls"][0]["question"],
            "Which account?"
        );
        let text = now.parts[0]["text"].as_str().unwrap();
        assert!(
            text.contains(r#""Which account?""#) && text.contains(r#""answer": TEXT"#),
            "{text}"
        );
    }
}
