//! Answer bodies more than one route gives: a started run's 201, and the
//! agent and model a named agent's run shows.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

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
