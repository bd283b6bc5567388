//! The inputs a live run takes over HTTP: messages, events, interrupts, and a
//! human's decisions on parked or crash-interrupted calls.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::body::{body_bytes, object, string_field};
use super::error::ApiError;
use super::table::{App, RunEntry, live};
use super::tenants::Tenant;

fn accepted(id: &str) -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({ "run_id": id, "accepted": true })),
    )
        .into_response()
}

/// An input's answer from the run; a busy run's refusal gives its bytes back
/// (429 with `Retry-After`).
fn refused(
    run: &RunEntry,
    bytes: usize,
    sent: Result<(), agentry::RuntimeError>,
) -> Result<(), ApiError> {
    if let Err(agentry::RuntimeError::InboxFull { .. }) = &sent {
        run.give_back_input(bytes);
    }
    sent.map_err(ApiError::from_runtime)
}

pub(super) async fn send_message(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&tenant, &id)?;
    let bytes = body_bytes(body)?;
    let fields = object(&bytes, &["text"])?;
    let text = string_field(&fields, "text", true)?.unwrap_or_default();
    let handle = live(&id, run.current())?;
    run.take_input(&id, bytes.len(), app.config.limits.run_input_bytes)?;
    let sent = handle.send_message(text);
    refused(&run, bytes.len(), sent)?;
    Ok(accepted(&id))
}

pub(super) async fn inject_event(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&tenant, &id)?;
    let bytes = body_bytes(body)?;
    let mut fields = object(&bytes, &["name", "payload"])?;
    let name = string_field(&fields, "name", true)?.unwrap_or_default();
    let payload = fields.remove("payload").unwrap_or(Value::Null);
    let handle = live(&id, run.current())?;
    run.take_input(&id, bytes.len(), app.config.limits.run_input_bytes)?;
    let sent = handle.inject(name, payload);
    refused(&run, bytes.len(), sent)?;
    Ok(accepted(&id))
}

/// What `POST /runs/{id}/interrupt` asks of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Pause,
    Resume,
    Abort,
    /// Cut the step in progress and tell the agent the body's `message`.
    Redirect,
}

impl Action {
    fn parse(name: &str) -> Result<Action, ApiError> {
        match name {
            "pause" => Ok(Action::Pause),
            "resume" => Ok(Action::Resume),
            "abort" => Ok(Action::Abort),
            "redirect" => Ok(Action::Redirect),
            other => Err(ApiError::bad_request(format!(
                "action: expected \"pause\", \"resume\", \"abort\" or \"redirect\", found {other:?}"
            ))),
        }
    }
}

/// `{"action": "pause" | "resume" | "abort"}`, or `{"action": "redirect",
/// "message": "..."}`: cut the step in progress and tell the agent `message`
/// (an input like a message, so it counts against the run's input limit).
pub(super) async fn interrupt(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&tenant, &id)?;
    let bytes = body_bytes(body)?;
    let fields = object(&bytes, &["action", "message"])?;
    let name = string_field(&fields, "action", true)?.unwrap_or_default();
    let action = Action::parse(&name)?;
    // Only a redirect says something; a message on another action would be lost.
    let message = string_field(&fields, "message", action == Action::Redirect)?;
    if action != Action::Redirect && message.is_some() {
        return Err(ApiError::bad_request(format!(
            "message: only the \"redirect\" action takes a message, not {name:?}"
        )));
    }
    if action == Action::Abort && app.cancel_queued(&id).await {
        return Ok(accepted(&id));
    }
    let handle = live(&id, run.current());
    match action {
        Action::Redirect => {
            let handle = handle?;
            run.take_input(&id, bytes.len(), app.config.limits.run_input_bytes)?;
            let sent = handle.interrupt(message.unwrap_or_default());
            refused(&run, bytes.len(), sent)?;
            return Ok(accepted(&id));
        }
        Action::Pause => handle?.pause(),
        Action::Resume => handle?.resume(),
        Action::Abort => {
            // `abort` accepts a stopped run silently; `live` says so instead.
            handle?.abort();
            Ok(())
        }
    }
    .map_err(ApiError::from_runtime)?;
    Ok(accepted(&id))
}

/// A human's word on a call parked for approval, as the A2A and AG-UI
/// faces read it: applied through the run's handle here, or sent as the
/// native route's body to the node that holds the run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Approve,
    Deny(Option<String>),
    /// The text for a remote agent's question (`RunHandle::answer`).
    Answer(String),
}

impl Verdict {
    /// Applies it to `call_id` of the run `handle` drives.
    pub(crate) async fn apply(
        self,
        handle: &agentry::RunHandle,
        call_id: &str,
    ) -> Result<u64, agentry::RuntimeError> {
        match self {
            Verdict::Approve => handle.approve(call_id).await,
            Verdict::Deny(reason) => handle.deny(call_id, reason).await,
            Verdict::Answer(answer) => handle.answer(call_id, &answer).await,
        }
    }

    /// The body of `POST /runs/{id}/approvals/{call_id}` that says it.
    pub(crate) fn body(&self) -> Value {
        match self {
            Verdict::Approve => json!({"decision": "approve"}),
            Verdict::Deny(None) => json!({"decision": "deny"}),
            Verdict::Deny(Some(reason)) => json!({"decision": "deny", "reason": reason}),
            Verdict::Answer(answer) => json!({"decision": "answer", "answer": answer}),
        }
    }
}

pub(super) async fn decide(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path((id, call_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&tenant, &id)?;
    let fields = object(&body_bytes(body)?, &["decision", "reason", "answer"])?;
    let decision = string_field(&fields, "decision", true)?.unwrap_or_default();
    let reason = string_field(&fields, "reason", false)?;
    let answer = string_field(&fields, "answer", decision == "answer")?;
    let handle = live(&id, run.current())?;
    let seq = match (decision.as_str(), answer) {
        ("approve", None) => handle.approve(&call_id).await,
        ("deny", None) => handle.deny(&call_id, reason).await,
        // A question a running call put to a human (a remote A2A agent's
        // INPUT_REQUIRED): the text goes on to the remote agent.
        ("answer", Some(answer)) => handle.answer(&call_id, &answer).await,
        ("approve" | "deny", Some(_)) => {
            return Err(ApiError::bad_request(
                "answer: only with \"decision\": \"answer\"".to_string(),
            ));
        }
        (other, _) => {
            return Err(ApiError::bad_request(format!(
                "decision: expected \"approve\" or \"deny\" (or \"answer\" with an answer), found {other:?}"
            )));
        }
    }
    .map_err(ApiError::from_runtime)?;
    Ok(decided(&id, &call_id, &decision, seq))
}

/// The answer to a human's decision on a parked call.
fn decided(id: &str, call_id: &str, decision: &str, seq: u64) -> Response {
    axum::Json(json!({
        "run_id": id,
        "tool_call_id": call_id,
        "decision": decision,
        "seq": seq,
    }))
    .into_response()
}

/// A human settles a call a crash interrupted: `{"decision": "happened" |
/// "retry" | "skip"}`.
pub(super) async fn settle(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path((id, call_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&tenant, &id)?;
    let fields = object(&body_bytes(body)?, &["decision"])?;
    let decision = string_field(&fields, "decision", true)?.unwrap_or_default();
    let settlement: agentry::Settlement = decision
        .parse()
        .map_err(|m: String| ApiError::bad_request(format!("decision: {m}")))?;
    let seq = live(&id, run.current())?
        .settle(&call_id, settlement)
        .await
        .map_err(ApiError::from_runtime)?;
    Ok(decided(&id, &call_id, &decision, seq))
}
