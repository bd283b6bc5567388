//! AG-UI 1.0 (the Agent-User Interaction protocol): a run's events as AG-UI
//! events over SSE, and runs started or continued by AG-UI's `RunAgentInput`.
//!
//! ```text
//! GET  /runs/{id}/events?format=ag-ui   the run as one AG-UI run, from its first kept event
//! POST /agents/{name}/ag-ui             RunAgentInput → start or continue a run of agent NAME;
//!                                       the answer is the AG-UI stream of that segment
//! ```
//!
//! An AG-UI run is a segment of an agentry run: it ends when the run stops
//! (`RUN_FINISHED`, or `RUN_ERROR` with the stop reason), parks calls for a
//! human (`RUN_FINISHED` with an `interrupt` outcome, answered by the next
//! `RunAgentInput`'s `resume`), or, an event-driven run, falls asleep.
//! `wire.rs` has the events, `translate.rs` the mapping and the state,
//! `stream.rs` the segment, `input.rs` the body. Same guard, tenancy and
//! stream bounds as the native stream; not on a cluster's nodes (501).
//!
//! A `threadId` the service has not seen starts a run of the agent with the
//! last user message as its input, and maps to that run for as long as the
//! process lives (the newest 10 000 threads). The run's id is also a thread
//! id (the `agentry.run` CUSTOM event names it), which is how a client goes
//! on with a thread after a restart.

mod input;
mod stream;
pub(crate) mod threads;
mod translate;
mod wire;

use std::sync::Arc;

use agentry::RunStatus;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use self::input::RunAgentInput;
use self::stream::{Segment, last_seq, stream};
use crate::body::body_bytes;
use crate::error::ApiError;
use crate::table::{App, Run, RunEntry, live};
use crate::tenants::Tenant;

/// The query parameter of `GET /runs/{id}/events` that picks the format.
pub const FORMAT_PARAM: &str = "format";

/// Its value for AG-UI.
pub const AG_UI: &str = "ag-ui";

/// The path of the `RunAgentInput` route.
pub const RUN_AGENT_PATH: &str = "/agents/{name}/ag-ui";

/// Whether `?format=ag-ui` asks for AG-UI; another format is 400.
pub(crate) fn wanted(query: Option<&str>) -> Result<bool, ApiError> {
    for pair in query.unwrap_or("").split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name == FORMAT_PARAM {
            if value != AG_UI {
                return Err(ApiError::bad_field(
                    FORMAT_PARAM,
                    format!(
                        "{value:?}: the only format is {AG_UI:?} (leave it out for agentry's events)"
                    ),
                ));
            }
            return Ok(true);
        }
    }
    Ok(false)
}

fn not_on_a_cluster(app: &App) -> Result<(), ApiError> {
    match app.cluster.get() {
        Some(_) => Err(ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "AG-UI is not served by a cluster's nodes yet",
        )),
        None => Ok(()),
    }
}

/// The run's goal and status now, for the state.
async fn now(entry: &RunEntry) -> (Option<String>, Option<RunStatus>) {
    match entry.current() {
        Run::Live(handle) => match handle.snapshot().await {
            Some(s) => (Some(s.task.goal), Some(s.status)),
            None => (None, None),
        },
        Run::Stopped(outcome) => (Some(outcome.state.task.goal.clone()), None),
        Run::Queued => (None, None),
    }
}

async fn respond(
    app: &App,
    entry: Arc<RunEntry>,
    segment: Segment,
    at_start: (Option<String>, Option<RunStatus>),
) -> Response {
    let slot = app.streams.admit(&segment.agentry_run);
    // Comments every 15 s keep idle connections open through proxies; AG-UI's
    // client reads only `data:` lines.
    Sse::new(stream(entry, segment, at_start, slot))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /runs/{id}/events?format=ag-ui`: the run as one AG-UI run (thread
/// and run id: the run's), from its first kept event.
pub(crate) async fn stream_run(app: &App, tenant: &Tenant, id: &str) -> Result<Response, ApiError> {
    not_on_a_cluster(app)?;
    let entry = app.run(tenant, id)?;
    let at_start = now(&entry).await;
    let segment = Segment {
        thread_id: id.to_string(),
        run_id: id.to_string(),
        agentry_run: id.to_string(),
        after: 0,
        awaits_input: false,
    };
    Ok(respond(app, entry, segment, at_start).await)
}

/// `POST /agents/{name}/ag-ui`: a `RunAgentInput` starts a run of the agent
/// (a new thread) or goes on with the thread's run (a message, or `resume`),
/// answered by the AG-UI stream of what the run does until it stops, parks
/// or sleeps.
pub(crate) async fn run_agent(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    not_on_a_cluster(&app)?;
    let input = RunAgentInput::parse(&body_bytes(body)?)?;
    if !app.config.agents.as_ref().is_some_and(|a| a.has(&name)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no agent named {name:?} is configured"),
        ));
    }
    let known = app.agui.find(&tenant, &input.thread_id).or_else(|| {
        let run = app.run(&tenant, &input.thread_id).ok();
        run.map(|_| input.thread_id.clone())
    });
    let (run_id, after, awaits_input, at_start) = match known {
        Some(run_id) => go_on(&app, &tenant, &run_id, &name, &input).await?,
        None => start(&app, &tenant, &name, &input, &headers).await?,
    };
    let entry = app.run(&tenant, &run_id)?;
    let segment = Segment {
        thread_id: input.thread_id,
        run_id: input.run_id,
        agentry_run: run_id,
        after,
        awaits_input,
    };
    Ok(respond(&app, entry, segment, at_start).await)
}

/// The run a segment is of, the last event before it, whether it waits for
/// the run to take a message, and the run's goal and status before it.
type Started = (String, u64, bool, (Option<String>, Option<RunStatus>));

/// A new thread: a run of `name` through `POST /runs`'s admission (limits,
/// queue, the tenant's day), its input the last user message.
async fn start(
    app: &App,
    tenant: &Tenant,
    name: &str,
    input: &RunAgentInput,
    headers: &HeaderMap,
) -> Result<Started, ApiError> {
    if !input.resume.is_empty() {
        return Err(ApiError::bad_field(
            "resume",
            format!("thread {:?} has no run whose calls wait", input.thread_id),
        ));
    }
    let Some(text) = &input.last_user_text else {
        return Err(ApiError::bad_field(
            "messages",
            "no user message to start a run with",
        ));
    };
    let bytes = Bytes::from(json!({ "agent": name, "input": text }).to_string());
    let traceparent = crate::create::traceparent(headers);
    let request = app.request_of(tenant, bytes.clone(), traceparent).await?;
    let created = app.admit(tenant.clone(), request, bytes).await?;
    let body = axum::body::to_bytes(created.into_body(), 1 << 16)
        .await
        .map_err(|e| ApiError::internal(format!("reading the new run's id: {e}")))?;
    let run_id = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["run_id"].as_str().map(str::to_string))
        .ok_or_else(|| ApiError::internal("the new run has no id"))?;
    app.agui.remember(tenant, &input.thread_id, &run_id);
    let entry = app.run(tenant, &run_id)?;
    let at_start = now(&entry).await;
    Ok((run_id, 0, true, at_start))
}

/// A known thread: answers its run's parked calls (`resume`), or sends it
/// the last user message.
async fn go_on(
    app: &App,
    tenant: &Tenant,
    run_id: &str,
    name: &str,
    input: &RunAgentInput,
) -> Result<Started, ApiError> {
    let entry = app.run(tenant, run_id)?;
    if entry.meta.agent.as_deref() != Some(name) {
        return Err(ApiError::bad_field(
            "threadId",
            format!(
                "thread {:?} is not a run of agent {name:?}",
                input.thread_id
            ),
        ));
    }
    let handle = live(run_id, entry.current())?;
    // Read before the input goes in: what the segment starts from.
    let after = last_seq(&entry);
    let at_start = now(&entry).await;
    if !input.resume.is_empty() {
        let crashed = match handle.snapshot().await {
            Some(s) => s.pending_decisions.into_iter().map(|p| p.call.id).collect(),
            None => Vec::new(),
        };
        for answer in &input.resume {
            let call = answer.interrupt_id.as_str();
            let done = if crashed.iter().any(|c| c == call) {
                handle.settle(call, answer.settlement()?).await
            } else if answer.approves() {
                handle.approve(call).await
            } else {
                handle.deny(call, answer.reason()).await
            };
            done.map_err(ApiError::from_runtime)?;
        }
        return Ok((run_id.to_string(), after, false, at_start));
    }
    let Some(text) = input.last_user_text.clone() else {
        return Err(ApiError::bad_field(
            "messages",
            "no user message for the run",
        ));
    };
    let bytes = text.len();
    entry.take_input(run_id, bytes, app.config.limits.run_input_bytes)?;
    if let Err(e) = handle.send_message(text) {
        if let agentry::RuntimeError::InboxFull { .. } = e {
            entry.give_back_input(bytes);
        }
        return Err(ApiError::from_runtime(e));
    }
    Ok((run_id.to_string(), after, true, at_start))
}
