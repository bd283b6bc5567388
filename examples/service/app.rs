//! The HTTP service: routes, the table of runs, and JSON errors.
//!
//! Kept apart from `main.rs` (arguments, logging, signals) so the integration test
//! (`tests/suite/service/`) runs this very router on a real TCP listener.
//! Every request first passes `guard.rs` (who may call, what it may send);
//! connections are accepted and bounded by `serve.rs`; a stopped run keeps its
//! outcome and a bounded history (`events.rs`) only.
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
#[path = "guard.rs"]
mod guard;
#[path = "serve.rs"]
mod serve;

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use agentry::protocol::event::EventRecord;
use agentry::protocol::state::RunSnapshot;
use agentry::{RunHandle, RunOutcome, RunStatus, Runtime, RuntimeError};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::broadcast;

use events::EventLog;
pub use events::ReplayLimits;
pub use guard::{AllowedHost, AllowedOrigin};

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Who may call the service, and how much it takes in. The default suits a
/// service on localhost; `main.rs` sets the fields from its flags.
#[derive(Debug, Clone, Default)]
pub struct ServiceConfig {
    /// Host names answered besides the bound address (`--allow-host`).
    pub allow_hosts: Vec<AllowedHost>,
    /// Origins whose pages may call the service (`--allow-origin`); none by default.
    pub allow_origins: Vec<AllowedOrigin>,
    /// Sizes, counts and timeouts.
    pub limits: Limits,
}

/// What the service holds for its clients, at most (each has a flag, see `main.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Body of a message, event, interrupt or decision, in bytes.
    pub message_bytes: usize,
    /// Body of `POST /runs` (the task, its script and its files), in bytes.
    pub create_bytes: usize,
    /// Message and event bodies one run takes in over its life, in bytes: a
    /// paused run keeps every message it is sent.
    pub run_input_bytes: u64,
    /// For a request's body to arrive, from its head.
    pub body_timeout: Duration,
    /// For a request's head to arrive, and for a connection idle between requests.
    pub header_timeout: Duration,
    /// Open connections.
    pub max_connections: usize,
    /// Each run's event history kept for late clients, in bytes.
    pub replay: ReplayLimits,
    /// Stopped runs kept; past this, the oldest is forgotten (404 afterwards,
    /// and its working directory removed).
    pub keep_stopped: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            message_bytes: MIB,
            create_bytes: 64 * MIB,
            run_input_bytes: 64 * MIB as u64,
            body_timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            max_connections: serve::default_max_connections(),
            replay: ReplayLimits {
                live_bytes: 8 * MIB,
                stopped_bytes: 256 * KIB,
            },
            keep_stopped: 1000,
        }
    }
}

/// The service's state: one runtime, and every run it started. Cheap to clone.
#[derive(Debug, Clone)]
pub struct App {
    runtime: Runtime,
    config: Arc<ServiceConfig>,
    runs: Arc<RwLock<HashMap<String, Arc<RunEntry>>>>,
    /// Ids of stopped runs, in the order they stopped (see `Limits::keep_stopped`).
    stopped: Arc<Mutex<VecDeque<String>>>,
}

/// One run: its handle while it runs, its event log, and the working directory
/// it runs in.
#[derive(Debug)]
struct RunEntry {
    run: Mutex<Run>,
    log: Arc<EventLog>,
    /// Bytes of messages and events taken in (see `Limits::run_input_bytes`).
    input_bytes: AtomicU64,
    /// Held only so the directory outlives the run (dropping it deletes it).
    /// `None` for a durable run: its directory must outlive the process too.
    _workdir: Option<TempDir>,
}

/// A run as the table holds it.
#[derive(Debug, Clone)]
enum Run {
    /// Running: its handle takes input and answers snapshots.
    Live(Box<RunHandle>),
    /// Stopped: only the outcome is kept. The handle went, and with it the
    /// run's event channel and everything the runtime kept for it.
    Stopped(Arc<RunOutcome>),
}

impl RunEntry {
    fn current(&self) -> Run {
        // Replaced whole: a poisoned lock still holds a valid value.
        self.run
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Counts `bytes` of input against the run's limit, or refuses them (413).
    fn take_input(&self, id: &str, bytes: usize, limit: u64) -> Result<(), ApiError> {
        let bytes = bytes as u64;
        self.input_bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |taken| {
                taken.checked_add(bytes).filter(|total| *total <= limit)
            })
            .map(|_| ())
            .map_err(|taken| {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!(
                        "run {id} has taken {taken} bytes of messages and events; {bytes} more would pass its limit of {limit} (--max-run-input-bytes)"
                    ),
                )
            })
    }
}

/// The run's handle, or 409 once it has stopped.
fn live(id: &str, run: Run) -> Result<RunHandle, ApiError> {
    match run {
        Run::Live(handle) if handle.outcome().is_none() => Ok(*handle),
        Run::Live(_) | Run::Stopped(_) => Err(ApiError::from_runtime(RuntimeError::Stopped {
            run_id: id.to_string(),
        })),
    }
}

impl App {
    /// A service starting runs on `runtime`, with the default [`ServiceConfig`].
    #[allow(dead_code)] // main.rs always passes its flags; the tests use this
    pub fn new(runtime: Runtime) -> Self {
        App::with_config(runtime, ServiceConfig::default())
    }

    /// A service starting runs on `runtime`, taking what `config` allows.
    pub fn with_config(runtime: Runtime, config: ServiceConfig) -> Self {
        App {
            runtime,
            config: Arc::new(config),
            runs: Arc::default(),
            stopped: Arc::default(),
        }
    }

    /// Serves the routes on `listener` until `shutdown` completes (see `serve.rs`).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let router = self.router(listener.local_addr()?);
        let limits = serve::ConnectionLimits {
            max_connections: self.config.limits.max_connections,
            header_timeout: self.config.limits.header_timeout,
        };
        serve::serve(listener, router, limits, shutdown).await;
        Ok(())
    }

    /// The routes, with this app as their state, for a service bound to `bound`
    /// (the `Host` it answers to).
    pub fn router(&self, bound: SocketAddr) -> Router {
        let guard = guard::Guard::new(
            bound,
            self.config.allow_hosts.clone(),
            self.config.allow_origins.clone(),
            self.config.limits,
        );
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
            // The guard reads every body within its route's limit; the
            // extractor's own default (2 MB) would cut a large create short.
            .layer(DefaultBodyLimit::disable())
            .layer(middleware::from_fn_with_state(guard, guard::check))
            .layer(middleware::map_response(guard::json_errors))
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
            tracing::info!(run_id = %run.run_id, "run resumed");
            self.follow(handle, None);
            resumed.push(run.run_id);
        }
        Ok(resumed)
    }

    /// Enters a just-started run in the table and copies its events into its log
    /// until it stops; then only its outcome is kept.
    fn follow(&self, handle: RunHandle, workdir: Option<TempDir>) {
        // The first subscription sees every event from the start of the run.
        let events = handle.subscribe();
        let log = EventLog::new(self.config.limits.replay);
        let id = handle.run_id().to_string();
        let entry = RunEntry {
            run: Mutex::new(Run::Live(Box::new(handle.clone()))),
            log: Arc::clone(&log),
            input_bytes: AtomicU64::new(0),
            _workdir: workdir,
        };
        self.runs
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::new(entry));
        tokio::spawn(self.clone().copy_events(handle, events, log));
    }

    async fn copy_events(
        self,
        handle: RunHandle,
        events: broadcast::Receiver<EventRecord>,
        log: Arc<EventLog>,
    ) {
        events::forward(&handle, events, &log).await;
        match handle.wait().await {
            Ok(outcome) => self.retire(handle.run_id(), outcome),
            Err(e) => {
                tracing::warn!(run_id = handle.run_id(), error = %e, "run lost; its handle is kept")
            }
        }
    }

    /// The run stopped: keep its outcome, drop its handle; forget the oldest
    /// stopped runs past `keep_stopped`.
    fn retire(&self, id: &str, outcome: RunOutcome) {
        let Ok(entry) = self.run(id) else {
            return;
        };
        *entry.run.lock().unwrap_or_else(PoisonError::into_inner) = Run::Stopped(Arc::new(outcome));
        drop(entry);
        let forgotten: Vec<String> = {
            let mut stopped = self.stopped.lock().unwrap_or_else(PoisonError::into_inner);
            stopped.push_back(id.to_string());
            let excess = stopped
                .len()
                .saturating_sub(self.config.limits.keep_stopped);
            stopped.drain(..excess).collect()
        };
        for id in forgotten {
            let removed = self
                .runs
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&id);
            // Removing a working directory blocks: not on an async worker.
            tokio::task::spawn_blocking(move || drop(removed));
        }
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
/// (not `Json<T>`) so that every failure gets a JSON error naming it.
fn object(body: &[u8], allowed: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(fields) = parse_json(body)? else {
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

/// The body the guard read (it refused what does not fit, so this only fails
/// if a route is reached without it).
fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| ApiError::new(r.status(), r.body_text()))
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))
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
    let bytes = body_bytes(body)?;
    // Parsing, creating the directory and writing the files all block.
    let run = tokio::task::spawn_blocking(move || create::prepare(&bytes))
        .await
        .map_err(|e| ApiError::internal(format!("preparing the run failed: {e}")))??;
    let create::NewRun {
        config,
        script,
        workdir,
    } = run;
    let handle = match app.runtime.start(config, script.into_policy()).await {
        Ok(handle) => handle,
        Err(e) => {
            tokio::task::spawn_blocking(move || drop(workdir));
            return Err(ApiError::internal(e.to_string()));
        }
    };
    let run_id = handle.run_id().to_string();
    tracing::info!(run_id, workdir = %workdir.path().display(), "run started");
    // A durable run's directory must survive the process: it is kept.
    let workdir = match app.runtime.store() {
        Some(_) => {
            let _ = workdir.keep();
            None
        }
        None => Some(workdir),
    };
    app.follow(handle, workdir);
    let location = format!("/runs/{run_id}");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(json!({ "run_id": run_id })),
    )
        .into_response())
}

async fn show_run(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let handle = match app.run(&id)?.current() {
        Run::Live(handle) => *handle,
        Run::Stopped(outcome) => {
            return Ok(axum::Json(run_view(&id, &outcome.state, Some(&outcome))).into_response());
        }
    };
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

fn run_view(id: &str, snapshot: &RunSnapshot, outcome: Option<&RunOutcome>) -> Value {
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
    let bytes = body_bytes(body)?;
    let fields = object(&bytes, &["text"])?;
    let text = string_field(&fields, "text", true)?.unwrap_or_default();
    let handle = live(&id, run.current())?;
    run.take_input(&id, bytes.len(), app.config.limits.run_input_bytes)?;
    handle.send_message(text).map_err(ApiError::from_runtime)?;
    Ok(accepted(&id))
}

async fn inject_event(
    State(app): State<App>,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let run = app.run(&id)?;
    let bytes = body_bytes(body)?;
    let mut fields = object(&bytes, &["name", "payload"])?;
    let name = string_field(&fields, "name", true)?.unwrap_or_default();
    let payload = fields.remove("payload").unwrap_or(Value::Null);
    let handle = live(&id, run.current())?;
    run.take_input(&id, bytes.len(), app.config.limits.run_input_bytes)?;
    handle
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
    let fields = object(&body_bytes(body)?, &["action"])?;
    let action = string_field(&fields, "action", true)?.unwrap_or_default();
    let handle = live(&id, run.current());
    match action.as_str() {
        "pause" => handle?.pause(),
        "resume" => handle?.resume(),
        "abort" => {
            // `abort` accepts a stopped run silently; `live` says so instead.
            handle?.abort();
            Ok(())
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
    let fields = object(&body_bytes(body)?, &["decision", "reason"])?;
    let decision = string_field(&fields, "decision", true)?.unwrap_or_default();
    let reason = string_field(&fields, "reason", false)?;
    let handle = live(&id, run.current())?;
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
