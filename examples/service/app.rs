//! The HTTP service: routes, the table of runs, and JSON errors.
//!
//! Kept apart from `main.rs` (arguments, logging, signals) so the integration test
//! (`tests/suite/service.rs`) runs this very router on a real TCP listener.
//!
//! ```text
//! POST /runs                          task fields + script + files → 201 {"run_id"}
//! GET  /runs/{id}                     status, steps, pending approvals, outcome
//! POST /runs/{id}/messages            {"text"}                     → 202
//! POST /runs/{id}/events              {"name", "payload"}          → 202
//! GET  /runs/{id}/events              Server-Sent Events, from the run's first event
//! POST /runs/{id}/interrupt           {"action": pause|resume|abort} → 202
//! POST /runs/{id}/approvals/{call_id} {"decision": approve|deny, "reason"} → 200 {"seq"}
//! ```

// Paths relative to this file, so the test can include it with `#[path]` too.
#[path = "create.rs"]
mod create;
#[path = "events.rs"]
mod events;

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use agentry::protocol::state::RunSnapshot;
use agentry::{RunHandle, RunStatus, Runtime, RuntimeError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tempfile::TempDir;

use events::EventLog;

/// The service's state: one runtime, and every run it started. Cheap to clone.
#[derive(Debug, Clone)]
pub struct App {
    runtime: Runtime,
    runs: Arc<RwLock<HashMap<String, Arc<RunEntry>>>>,
}

/// One run: its handle, its event log, and the working directory it runs in.
#[derive(Debug)]
struct RunEntry {
    handle: RunHandle,
    log: Arc<EventLog>,
    /// Held only so the directory outlives the run (dropping it deletes it).
    /// `None` for a durable run: its directory must outlive the process too.
    _workdir: Option<TempDir>,
}

impl App {
    /// A service starting runs on `runtime`.
    pub fn new(runtime: Runtime) -> Self {
        App {
            runtime,
            runs: Arc::default(),
        }
    }

    /// The routes, with this app as their state.
    pub fn router(&self) -> Router {
        Router::new()
            .route("/runs", post(create_run))
            .route("/runs/{id}", get(show_run))
            .route("/runs/{id}/messages", post(send_message))
            .route("/runs/{id}/events", post(inject_event).get(stream_events))
            .route("/runs/{id}/interrupt", post(interrupt))
            .route("/runs/{id}/approvals/{call_id}", post(decide))
            .route("/runs/{id}/decisions/{call_id}", post(settle))
            .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
            .method_not_allowed_fallback(|| async {
                ApiError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method not allowed on this route",
                )
            })
            .with_state(self.clone())
    }

    /// A service with a store: resumes every unfinished run of it (their policy
    /// is the inline script each was created with). Returns the resumed ids.
    pub async fn resume_unfinished(&self) -> Result<Vec<String>, agentry::RuntimeError> {
        let mut resumed = Vec::new();
        for run in self.runtime.unfinished_runs().await? {
            let config = self.runtime.stored_config(&run.run_id).await?;
            let script = config
                .policy_spec
                .as_deref()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
                .and_then(|v| agentry::Script::from_value(&v["script"]).ok());
            let Some(script) = script else {
                tracing::warn!(run_id = %run.run_id, "not resumed: no script stored with it");
                continue;
            };
            let handle = match self.runtime.resume(&run.run_id, script.into_policy()).await {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(run_id = %run.run_id, error = %e, "not resumed");
                    continue;
                }
            };
            let log = EventLog::follow(handle.clone(), handle.subscribe());
            tracing::info!(run_id = %run.run_id, "run resumed");
            self.insert(RunEntry {
                handle,
                log,
                _workdir: None,
            });
            resumed.push(run.run_id);
        }
        Ok(resumed)
    }

    fn insert(&self, entry: RunEntry) {
        let id = entry.handle.run_id().to_string();
        self.runs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::new(entry));
    }

    fn run(&self, id: &str) -> Result<Arc<RunEntry>, ApiError> {
        // Entries are only ever inserted whole, so a poisoned table is still consistent.
        let runs = self.runs.read().unwrap_or_else(PoisonError::into_inner);
        runs.get(id)
            .cloned()
            .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no run with id {id:?}")))
    }
}

/// An error answer: a status and `{"error": "..."}` naming the problem.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    /// 400 with this message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 500 with this message.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// An input refused by the runtime: 409 when the run has stopped.
    fn from_runtime(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Stopped { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            RuntimeError::NoPendingApproval { .. } | RuntimeError::NoPendingDecision { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, e.to_string())
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}

/// The body as a JSON object, refusing fields not in `allowed`. Read as bytes
/// (not `Json<T>`) so that every failure, a missing content type included, gets
/// a JSON error naming it.
fn object(
    body: Result<Bytes, BytesRejection>,
    allowed: &[&str],
) -> Result<Map<String, Value>, ApiError> {
    let value = json_body(body)?;
    let Value::Object(fields) = value else {
        return Err(ApiError::bad_request(format!(
            "the body must be a JSON object with {}",
            allowed.join(", ")
        )));
    };
    if let Some(unknown) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown field {unknown:?}, expected one of {}",
            allowed.join(", ")
        )));
    }
    Ok(fields)
}

fn json_body(body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
    let bytes = body.map_err(|r| ApiError::new(r.status(), r.body_text()))?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))
}

/// A required string field (`required`), or an optional one.
fn string_field(
    fields: &Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<String>, ApiError> {
    match fields.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        None if !required => Ok(None),
        None => Err(ApiError::bad_request(format!("{name}: missing"))),
        Some(other) => Err(ApiError::bad_request(format!(
            "{name}: expected a non-empty string, found {other}"
        ))),
    }
}

async fn create_run(
    State(app): State<App>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = create::prepare(json_body(body)?)?;
    let handle = app
        .runtime
        .start(run.config, run.script.into_policy())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    // The first subscription sees every event from the start of the run.
    let log = EventLog::follow(handle.clone(), handle.subscribe());
    let run_id = handle.run_id().to_string();
    tracing::info!(run_id, workdir = %run.workdir.path().display(), "run started");
    // A durable run's directory must survive the process: it is kept.
    let workdir = match app.runtime.store() {
        Some(_) => {
            let _ = run.workdir.keep();
            None
        }
        None => Some(run.workdir),
    };
    app.insert(RunEntry {
        handle,
        log,
        _workdir: workdir,
    });
    let location = format!("/runs/{run_id}");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(json!({ "run_id": run_id })),
    )
        .into_response())
}

async fn show_run(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let handle = &app.run(&id)?.handle;
    let snapshot = handle
        .snapshot()
        .await
        .ok_or_else(|| ApiError::internal("the run's state is unavailable"))?;
    let mut outcome = handle.outcome();
    if outcome.is_none() && snapshot.status == RunStatus::Stopped {
        // The state keeper records the stop just before the conductor publishes
        // the outcome; wait that moment so a stopped run always shows one.
        outcome = tokio::time::timeout(Duration::from_secs(1), handle.wait())
            .await
            .ok()
            .and_then(Result::ok);
    }
    Ok(axum::Json(run_view(&id, &snapshot, outcome.as_ref())).into_response())
}

fn run_view(id: &str, snapshot: &RunSnapshot, outcome: Option<&agentry::RunOutcome>) -> Value {
    let mut view = json!({
        "run_id": id,
        "status": snapshot.status,
        "steps": snapshot.control.spent.steps,
        "tool_calls": snapshot.control.spent.tool_calls,
        "inputs": snapshot.inputs,
        "pending_approvals": snapshot.pending_approvals,
    });
    if !snapshot.pending_decisions.is_empty() {
        // Only durable runs resumed after a crash have these.
        view["pending_decisions"] = json!(snapshot.pending_decisions);
    }
    if let Some(o) = outcome {
        view["outcome"] = json!({
            "stop_reason": o.stop_reason,
            "answer": o.answer,
            "detail": o.detail,
            "steps": o.steps,
            "tool_calls": o.tool_calls,
        });
    }
    view
}

fn accepted(id: &str) -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({ "run_id": id, "accepted": true })),
    )
        .into_response()
}

async fn send_message(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let fields = object(body, &["text"])?;
    let text = string_field(&fields, "text", true)?.unwrap_or_default();
    run.handle
        .send_message(text)
        .map_err(ApiError::from_runtime)?;
    Ok(accepted(&id))
}

async fn inject_event(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let mut fields = object(body, &["name", "payload"])?;
    let name = string_field(&fields, "name", true)?.unwrap_or_default();
    let payload = fields.remove("payload").unwrap_or(Value::Null);
    run.handle
        .inject(name, payload)
        .map_err(ApiError::from_runtime)?;
    Ok(accepted(&id))
}

async fn interrupt(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let fields = object(body, &["action"])?;
    let action = string_field(&fields, "action", true)?.unwrap_or_default();
    let handle = &run.handle;
    match action.as_str() {
        "pause" => handle.pause(),
        "resume" => handle.resume(),
        "abort" => {
            // `abort` accepts a stopped run silently; say so instead.
            if handle.outcome().is_some() {
                Err(RuntimeError::Stopped { run_id: id.clone() })
            } else {
                handle.abort();
                Ok(())
            }
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "action: expected \"pause\", \"resume\" or \"abort\", found {other:?}"
            )));
        }
    }
    .map_err(ApiError::from_runtime)?;
    Ok(accepted(&id))
}

async fn decide(
    State(app): State<App>,
    Path((id, call_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let fields = object(body, &["decision", "reason"])?;
    let decision = string_field(&fields, "decision", true)?.unwrap_or_default();
    let reason = string_field(&fields, "reason", false)?;
    let handle = &run.handle;
    if handle.outcome().is_some() {
        return Err(ApiError::from_runtime(RuntimeError::Stopped { run_id: id }));
    }
    let seq = match decision.as_str() {
        "approve" => handle.approve(&call_id).await,
        "deny" => handle.deny(&call_id, reason).await,
        other => {
            return Err(ApiError::bad_request(format!(
                "decision: expected \"approve\" or \"deny\", found {other:?}"
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
async fn settle(
    State(app): State<App>,
    Path((id, call_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let fields = object(body, &["decision"])?;
    let decision = string_field(&fields, "decision", true)?.unwrap_or_default();
    let settlement: agentry::Settlement = decision
        .parse()
        .map_err(|m: String| ApiError::bad_request(format!("decision: {m}")))?;
    let seq = run
        .handle
        .settle(&call_id, settlement)
        .await
        .map_err(ApiError::from_runtime)?;
    Ok(decided(&id, &call_id, &decision, seq))
}

async fn stream_events(
    State(app): State<App>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let stream = Arc::clone(&run.log).stream();
    // Comments every 15 s keep idle connections open through proxies.
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}
