//! The A2A 1.0 server side (JSON-RPC binding): each `[agents.NAME]` with
//! `a2a = true` publishes an agent card and a JSON-RPC endpoint, and a
//! task is a run of that agent.
//!
//! ```text
//! GET  /a2a/NAME/.well-known/agent-card.json   the card (no token needed)
//! GET  /.well-known/agent-card.json            the default agent's card
//! POST /a2a/NAME  (and /a2a/NAME/)             JSON-RPC, `A2A-Version: 1.0`
//! ```
//!
//! Task id = context id = run id. States, both ways:
//!
//! ```text
//! queued                                   TASK_STATE_SUBMITTED
//! running, paused                          TASK_STATE_WORKING
//! awaiting_approval / awaiting_decision    TASK_STATE_INPUT_REQUIRED (the calls in a data part)
//! sleeping (event-driven, between inputs)  TASK_STATE_INPUT_REQUIRED (the answer so far)
//! stopped done                             TASK_STATE_COMPLETED (the answer as artifact "answer", then the declared files)
//! stopped user_abort                       TASK_STATE_CANCELED
//! stopped, any other reason                TASK_STATE_FAILED (stop reason and detail)
//! ```
//!
//! The bearer token is the native routes' (the guard checks it; 401
//! without), and a task is found for the tenant that created it only.

mod call;
mod files;
mod follow;
mod list;
mod look;
mod push;
mod remote;
mod send;
mod task;
mod wire;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::error::ApiError;
use super::table::App;
use super::tenants::Tenant;
use call::Call;
use push::Pushes;
use wire::{Failure, RpcError, reply};

/// The well-known path of an agent card (the guard lets it through
/// without a token).
const CARD: &str = super::guard::A2A_CARD_PATH;

/// The A2A routes.
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route(CARD, get(default_card))
        .route("/a2a/{name}/.well-known/agent-card.json", get(card))
        .route("/a2a/{name}", post(rpc))
        .route("/a2a/{name}/", post(rpc))
        .layer(Extension(Arc::new(Pushes::default())))
}

/// An agent published over A2A, with its goal.
fn published(app: &App, name: &str) -> Option<super::agents::AgentInfo> {
    let agents = app.config.agents.as_ref()?;
    agents.list().into_iter().find(|a| a.a2a && a.name == name)
}

fn no_agent(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no agent {name:?} is published over A2A (a2a = true in its [agents.NAME])"),
    )
}

/// `[serve] a2a_default`, else the only agent with `a2a = true`.
fn default_agent(app: &App) -> Option<String> {
    let agents = app.config.agents.as_ref()?;
    if let Some(name) = agents.a2a_default() {
        return Some(name);
    }
    let mut published = agents.list().into_iter().filter(|a| a.a2a);
    match (published.next(), published.next()) {
        (Some(only), None) => Some(only.name),
        (Some(_), Some(_)) | (None, _) => None,
    }
}

async fn default_card(State(app): State<App>, headers: HeaderMap) -> Result<Response, ApiError> {
    let name = default_agent(&app).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "no default A2A agent: set [serve] a2a_default, or publish one agent with a2a = true",
        )
    })?;
    card(State(app), Path(name), headers).await
}

async fn card(
    State(app): State<App>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let agent = published(&app, &name).ok_or_else(|| no_agent(&name))?;
    // The guard let this Host through: it names this service.
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let description = if agent.goal.trim().is_empty() {
        format!("the agentry agent {name}")
    } else {
        agent.goal.clone()
    };
    let mut card = json!({
        "name": name,
        "description": description,
        "supportedInterfaces": [{
            "url": format!("http://{host}/a2a/{name}"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": wire::VERSION,
        }],
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {
            "streaming": true,
            "pushNotifications": app.config.webhooks.is_some(),
        },
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain", "application/json"],
        "skills": [{
            "id": name,
            "name": name,
            "description": description,
            "tags": ["agentry"],
        }],
    });
    if app.config.tokens.is_some() {
        card["securitySchemes"] =
            json!({"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}});
        card["securityRequirements"] = json!([{"schemes": {"bearer": {}}}]);
    }
    Ok(Json(card).into_response())
}

async fn rpc(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Extension(pushes): Extension<Arc<Pushes>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if published(&app, &name).is_none() {
        return Err(no_agent(&name));
    }
    let bytes = super::body::body_bytes(body)?;
    let (id, method, params) = match request(&bytes) {
        Ok(request) => request,
        Err((id, error)) => return Ok(reply(&id, Err(Failure::Rpc(error)))),
    };
    let version = headers
        .get("A2A-Version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("0.3")
        .trim()
        .to_string();
    if version.split('.').next() != Some("1") {
        return Ok(reply(&id, Err(Failure::Rpc(RpcError::version(&version)))));
    }
    let call = Call {
        app,
        tenant,
        agent: name,
        id,
        params,
        headers,
        pushes,
    };
    Ok(dispatch(call, &method).await)
}

/// The request's id, method and params, or the error (with the id, if read).
fn request(bytes: &[u8]) -> Result<(Value, String, Value), (Value, RpcError)> {
    let body: Value = serde_json::from_slice(bytes)
        .map_err(|e| (Value::Null, RpcError::parse(format!("not JSON: {e}"))))?;
    let id = body.get("id").cloned().unwrap_or(Value::Null);
    if !body.is_object() || body.get("jsonrpc") != Some(&json!("2.0")) {
        return Err((
            id,
            RpcError::invalid_request("expected a JSON-RPC 2.0 request object"),
        ));
    }
    let Some(method) = body.get("method").and_then(Value::as_str) else {
        return Err((id, RpcError::invalid_request("method: expected a string")));
    };
    let params = body.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return Err((id, RpcError::invalid_params("params: expected an object")));
    }
    Ok((id, method.to_string(), params))
}

async fn dispatch(call: Call, method: &str) -> Response {
    let id = call.id.clone();
    let result = match method {
        "SendMessage" => send::send(&call).await,
        "SendStreamingMessage" => return send::stream(call).await,
        "SubscribeToTask" => return send::subscribe(call).await,
        "GetTask" => send::get(&call).await,
        "ListTasks" => list::list(&call).await,
        "CancelTask" => send::cancel(&call).await,
        "CreateTaskPushNotificationConfig" => send::create_push(&call).await,
        "GetTaskPushNotificationConfig" => send::get_push(&call).await,
        "ListTaskPushNotificationConfigs" => send::list_push(&call).await,
        "DeleteTaskPushNotificationConfig" => send::delete_push(&call).await,
        "GetExtendedAgentCard" => Err(Failure::Rpc(RpcError::unsupported(
            "this agent has no extended card",
        ))),
        other => Err(Failure::Rpc(RpcError::method_not_found(other))),
    };
    reply(&id, result)
}
