//! Answer bodies more than one route gives: a started run's 201, the
//! agent and model a named agent's run shows, and a run's view (from its
//! handle, or from the store on a node of a cluster that does not hold it).

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use agentry::protocol::state::RunSnapshot;
use agentry::{RunOutcome, RunStatus};

use super::agents::RunMeta;

/// 201 with the new run's id and trace.
pub(super) fn created(run_id: &str, traceparent: &str) -> Response {
    let location = format!("/runs/{run_id}");
    (
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        axum::Json(json!({ "run_id": run_id, "traceparent": traceparent })),
    )
        .into_response()
}

/// A named agent's run shows its agent and model.
pub(super) fn meta_fields(view: &mut Value, meta: &RunMeta) {
    if let Some(agent) = &meta.agent {
        view["agent"] = json!(agent);
    }
    if let Some(model) = &meta.model {
        view["model"] = json!(model);
    }
}

/// A run's view from its last stored checkpoint, as `GET /runs/{id}` shows
/// it on a node that does not hold it (with its outcome once it stopped).
pub(super) fn stored_view(id: &str, snapshot: &RunSnapshot) -> Value {
    let mut view = run_view(id, snapshot, None);
    if snapshot.status != RunStatus::Stopped {
        return view;
    }
    view["outcome"] = json!({
        "stop_reason": snapshot.control.stop_reason,
        "answer": snapshot.task.answer,
        "detail": Value::Null,
        "steps": snapshot.control.spent.steps,
        "tool_calls": snapshot.control.spent.tool_calls,
    });
    view
}

pub(super) fn run_view(id: &str, snapshot: &RunSnapshot, outcome: Option<&RunOutcome>) -> Value {
    let mut view = json!({
        "run_id": id,
        "status": snapshot.status,
        "steps": snapshot.control.spent.steps,
        "tool_calls": snapshot.control.spent.tool_calls,
        "tokens_in": snapshot.control.spent.tokens_in,
        "tokens_out": snapshot.control.spent.tokens_out,
        "cost_micros": snapshot.control.spent.cost_micros,
        "inputs": snapshot.inputs,
        "pending_approvals": snapshot.pending_approvals,
    });
    if snapshot.status != RunStatus::Stopped
        && let Some(answer) = &snapshot.task.answer
    {
        // The answer so far (an event-driven agent's between inputs); a
        // stopped run's is its outcome's.
        view["answer"] = json!(answer);
    }
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
