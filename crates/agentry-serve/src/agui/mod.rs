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
//! `stream.rs` the segment, `source.rs` where it reads the run, `input.rs`
//! the body. Same guard, tenancy and stream bounds as the native stream.
//!
//! On a cluster's nodes both routes work whichever node a client reaches: a
//! run this node does not hold is read from the events the nodes keep, and
//! looked at and sent its messages and answers through the native routes of
//! the node that holds it (`remote.rs`, as A2A does); a new thread's run is
//! placed as `POST /runs` places it (on another node when it has more
//! room), and a thread this node does not know is found when its id is the
//! run's.
//!
//! A `threadId` the service has not seen starts a run of the agent with the
//! last user message as its input, and maps to that run for as long as the
//! process lives (the newest 10 000 threads). The run's id is also a thread
//! id (the `agentry.run` CUSTOM event names it), which is how a client goes
//! on with a thread after a restart.

mod input;
mod remote;
mod source;
mod stream;
pub(crate) mod threads;
mod translate;
mod wire;

pub(crate) use self::wire::wanted;

use agentry::RunStatus;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use self::input::RunAgentInput;
use self::remote::{Remote, failure};
use self::source::Source;
use self::stream::{Segment, stream};
use crate::body::body_bytes;
use crate::cluster::answer_of;
use crate::error::ApiError;
use crate::node::Forward;
use crate::table::{App, RunEntry, live};
use crate::tenants::Tenant;

/// The path of the `RunAgentInput` route.
pub const RUN_AGENT_PATH: &str = "/agents/{name}/ag-ui";

/// The run's goal and status before a segment.
type AtStart = (Option<String>, Option<RunStatus>);

fn respond(app: &App, source: Source, segment: Segment, at_start: AtStart) -> Response {
    let slot = app.streams.admit(&segment.agentry_run);
    // Comments every 15 s keep idle connections open through proxies; AG-UI's
    // client reads only `data:` lines.
    Sse::new(stream(source, segment, at_start, slot))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Run `id` of `tenant` where it is: this node's table, else (on a cluster)
/// wherever the cluster finds it; 404 for a run it has not.
async fn source_of(app: &App, tenant: &Tenant, id: &str) -> Result<Source, ApiError> {
    let remote = Remote::of(app, tenant, id).filter(|_| !app.holds(id));
    match remote {
        Some(remote) => {
            remote.view().await?;
            Ok(Source::Elsewhere(remote))
        }
        None => Ok(Source::Here(app.run(tenant, id)?)),
    }
}

/// `GET /runs/{id}/events?format=ag-ui`: the run as one AG-UI run (thread
/// and run id: the run's), from its first kept event.
pub(crate) async fn stream_run(app: &App, tenant: &Tenant, id: &str) -> Result<Response, ApiError> {
    let source = source_of(app, tenant, id).await?;
    let at_start = source.now().await;
    let segment = Segment {
        thread_id: id.to_string(),
        run_id: id.to_string(),
        agentry_run: id.to_string(),
        after: 0,
        awaits_input: false,
    };
    Ok(respond(app, source, segment, at_start))
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
    let input = RunAgentInput::parse(&body_bytes(body)?)?;
    if !app.config.agents.as_ref().is_some_and(|a| a.has(&name)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no agent named {name:?} is configured"),
        ));
    }
    let started = match thread_run(&app, &tenant, &input.thread_id).await? {
        Some((run_id, source)) => go_on(&app, source, &run_id, &name, &input).await?,
        None => start(&app, &tenant, &name, &input, &headers).await?,
    };
    let segment = Segment {
        thread_id: input.thread_id,
        run_id: input.run_id,
        agentry_run: started.run_id,
        after: started.after,
        awaits_input: started.awaits_input,
    };
    Ok(respond(&app, started.source, segment, started.at_start))
}

/// The run of a thread the service knows, or whose id is a run's: here,
/// or (on a cluster) on another node. `None`: a new thread.
async fn thread_run(
    app: &App,
    tenant: &Tenant,
    thread_id: &str,
) -> Result<Option<(String, Source)>, ApiError> {
    let remembered = app.agui.find(tenant, thread_id);
    let run_id = remembered.clone().unwrap_or_else(|| thread_id.to_string());
    let remote = Remote::of(app, tenant, &run_id).filter(|_| !app.holds(&run_id));
    let Some(remote) = remote else {
        return match (remembered, app.run(tenant, &run_id)) {
            (_, Ok(entry)) => Ok(Some((run_id, Source::Here(entry)))),
            (Some(_), Err(e)) => Err(e),
            (None, Err(_)) => Ok(None),
        };
    };
    match remote.view().await {
        Ok(_) => Ok(Some((run_id, Source::Elsewhere(remote)))),
        Err(e) if e.status() == StatusCode::NOT_FOUND && remembered.is_none() => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a segment is of: its run, where it is read, the last event before
/// it, whether it waits for the run to take a message, and the run's goal
/// and status before it.
struct Started {
    source: Source,
    run_id: String,
    after: u64,
    awaits_input: bool,
    at_start: AtStart,
}

/// A new thread: a run of `name` through `POST /runs`'s placement (on a
/// cluster) and admission (limits, queue, the tenant's day), its input the
/// last user message.
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
    let placed = match app.cluster.get().cloned() {
        Some(cluster) => {
            let forward = Forward {
                run_id: String::new(),
                tenant: tenant.name().map(str::to_string),
                method: "POST".into(),
                path: "/runs".into(),
                body: bytes.to_vec(),
            };
            cluster.place(forward).await
        }
        None => None,
    };
    let here = placed.is_none();
    let created = match placed {
        Some(placed) => placed,
        None => {
            let traceparent = crate::create::traceparent(headers);
            let request = app.request_of(tenant, bytes.clone(), traceparent).await?;
            app.admit(tenant.clone(), request, bytes).await?
        }
    };
    let answer = answer_of(created).await;
    if !(200..=299).contains(&answer.status) {
        return Err(failure(&answer));
    }
    let run_id = serde_json::from_slice::<serde_json::Value>(&answer.body)
        .ok()
        .and_then(|v| v["run_id"].as_str().map(str::to_string))
        .ok_or_else(|| ApiError::internal("the new run has no id"))?;
    app.agui.remember(tenant, &input.thread_id, &run_id);
    // A run placed on another node may not be in the store yet (its first
    // commit is on its way): it is not looked up there, only followed.
    let source = match Remote::of(app, tenant, &run_id).filter(|_| !here) {
        Some(remote) => Source::Elsewhere(remote),
        None => Source::Here(app.run(tenant, &run_id)?),
    };
    let at_start = source.now().await;
    Ok(Started {
        source,
        run_id,
        after: 0,
        awaits_input: true,
        at_start,
    })
}

/// A known thread: answers its run's parked calls (`resume`), or sends it
/// the last user message.
async fn go_on(
    app: &App,
    source: Source,
    run_id: &str,
    name: &str,
    input: &RunAgentInput,
) -> Result<Started, ApiError> {
    let not_the_agents = || {
        ApiError::bad_field(
            "threadId",
            format!(
                "thread {:?} is not a run of agent {name:?}",
                input.thread_id
            ),
        )
    };
    let awaits_input = input.resume.is_empty();
    let (after, at_start) = match &source {
        Source::Here(entry) => {
            if entry.meta.agent.as_deref() != Some(name) {
                return Err(not_the_agents());
            }
            // Read before the input goes in: what the segment starts from.
            let (after, at_start) = (source.last_seq().await?, source.now().await);
            go_on_here(app, entry, run_id, input).await?;
            (after, at_start)
        }
        Source::Elsewhere(remote) => {
            let viewed = remote.view().await?;
            if viewed.agent.as_deref() != Some(name) {
                return Err(not_the_agents());
            }
            let (after, at_start) = (source.last_seq().await?, source.now().await);
            match (awaits_input, input.last_user_text.clone()) {
                (false, _) => remote.resume(&viewed, input).await?,
                (true, Some(text)) => remote.message(text).await?,
                (true, None) => return Err(no_message()),
            }
            (after, at_start)
        }
    };
    Ok(Started {
        source,
        run_id: run_id.to_string(),
        after,
        awaits_input,
        at_start,
    })
}

fn no_message() -> ApiError {
    ApiError::bad_field("messages", "no user message for the run")
}

/// `go_on` for a run of this node's table, through its handle.
async fn go_on_here(
    app: &App,
    entry: &RunEntry,
    run_id: &str,
    input: &RunAgentInput,
) -> Result<(), ApiError> {
    let handle = live(run_id, entry.current())?;
    if !input.resume.is_empty() {
        let crashed = match handle.snapshot().await {
            Some(s) => s.pending_decisions.into_iter().map(|p| p.call.id).collect(),
            None => Vec::new(),
        };
        for answer in &input.resume {
            let call = answer.interrupt_id.as_str();
            let done = if crashed.iter().any(|c| c == call) {
                handle.settle(call, answer.settlement()?).await
            } else {
                answer.verdict().apply(&handle, call).await
            };
            done.map_err(ApiError::from_runtime)?;
        }
        return Ok(());
    }
    let Some(text) = input.last_user_text.clone() else {
        return Err(no_message());
    };
    let bytes = text.len();
    entry.take_input(run_id, bytes, app.config.limits.run_input_bytes)?;
    if let Err(e) = handle.send_message(text) {
        if let agentry::RuntimeError::InboxFull { .. } = e {
            entry.give_back_input(bytes);
        }
        return Err(ApiError::from_runtime(e));
    }
    Ok(())
}
