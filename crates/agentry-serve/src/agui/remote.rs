//! An AG-UI thread whose run another node of the cluster holds (or only the
//! store does now). Each step is the native request it stands for, sent as
//! the native routes' own cluster routing sends it (`Cluster::elsewhere`),
//! so the holder applies it through its own routes, as A2A's tasks do:
//!
//! ```text
//! look at the run        GET  /runs/{id}
//! a user message         POST /runs/{id}/messages          {"text"}
//! an approval            POST /runs/{id}/approvals/{call}  {"decision": "approve"|"deny", "reason"?}
//!                                                           or {"decision": "answer", "answer"}
//! a crash decision       POST /runs/{id}/decisions/{call}  {"decision": SETTLE}
//! ```
//!
//! The segment's events are those the nodes keep (`Cluster::events`).

use std::sync::Arc;

use agentry::RunStatus;
use agentry::protocol::state::PendingApproval;
use axum::http::StatusCode;
use serde_json::{Value, json};

use super::input::RunAgentInput;
use crate::cluster::answer_of;
use crate::error::ApiError;
use crate::node::{Answer, Cluster, Forward, segment};
use crate::table::App;
use crate::tenants::Tenant;

/// A run another node holds, as one tenant reaches it.
#[derive(Debug, Clone)]
pub(crate) struct Remote {
    pub app: App,
    pub cluster: Arc<dyn Cluster>,
    pub tenant: Tenant,
    pub run_id: String,
}

/// The run as its view tells it: its status (`None`: queued, or one this
/// build does not know) and the calls it parked.
#[derive(Debug, Clone)]
pub(crate) struct Viewed {
    pub agent: Option<String>,
    pub status: Option<RunStatus>,
    pub approvals: Vec<PendingApproval>,
    pub decisions: Vec<PendingApproval>,
    /// A stopped run's outcome detail.
    pub detail: Option<String>,
}

impl Viewed {
    fn of(view: &Value) -> Viewed {
        let pending = |field: &str| -> Vec<PendingApproval> {
            serde_json::from_value(view[field].clone()).unwrap_or_default()
        };
        Viewed {
            agent: view["agent"].as_str().map(str::to_string),
            status: serde_json::from_value(view["status"].clone()).ok(),
            approvals: pending("pending_approvals"),
            decisions: pending("pending_decisions"),
            detail: view["outcome"]["detail"].as_str().map(str::to_string),
        }
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
pub(crate) fn failure(answer: &Answer) -> ApiError {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let error = ApiError::new(status, message_of(answer));
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => error.retry_after(1),
        _ => error,
    }
}

impl Remote {
    /// Run `run_id` of `tenant` through `app`'s cluster; `None` without one.
    pub(crate) fn of(app: &App, tenant: &Tenant, run_id: &str) -> Option<Remote> {
        let cluster = app.cluster.get().cloned()?;
        Some(Remote {
            app: app.clone(),
            cluster,
            tenant: tenant.clone(),
            run_id: run_id.to_string(),
        })
    }

    /// The answer of a native request for the run, from wherever it is.
    async fn native(&self, method: &str, path: String, body: Option<Value>) -> Answer {
        let forward = Forward::made(&self.run_id, &self.tenant, method, path, body.as_ref());
        answer_of(self.cluster.elsewhere(forward).await).await
    }

    /// The run's view (`GET /runs/{id}`): 404 for a run this tenant has not.
    pub(crate) async fn view(&self) -> Result<Viewed, ApiError> {
        let path = format!("/runs/{}", segment(&self.run_id));
        let answer = self.native("GET", path, None).await;
        if answer.status != StatusCode::OK.as_u16() {
            return Err(failure(&answer));
        }
        let view: Value = serde_json::from_slice(&answer.body).map_err(|e| {
            ApiError::internal(format!("run {}: its view is not JSON: {e}", self.run_id))
        })?;
        Ok(Viewed::of(&view))
    }

    /// The run's goal, from the store every node shares (its view has none).
    pub(crate) async fn goal(&self) -> Option<String> {
        let config = self.app.runtime.stored_config(&self.run_id).await.ok()?;
        Some(config.goal)
    }

    /// Sends a native input (`tail` under `/runs/{id}/`); a refusal is the
    /// holder's answer.
    async fn send(&self, tail: String, body: Value) -> Result<(), ApiError> {
        let path = format!("/runs/{}/{tail}", segment(&self.run_id));
        let answer = self.native("POST", path, Some(body)).await;
        match answer.status {
            200..=299 => Ok(()),
            _ => Err(failure(&answer)),
        }
    }

    /// Answers the run's parked calls (`resume`), each as its native request.
    pub(crate) async fn resume(
        &self,
        viewed: &Viewed,
        input: &RunAgentInput,
    ) -> Result<(), ApiError> {
        for answer in &input.resume {
            let call = answer.interrupt_id.as_str();
            let crashed = viewed.decisions.iter().any(|p| p.call.id == call);
            let (tail, body) = if crashed {
                let settle = json!(answer.settlement()?);
                (
                    format!("decisions/{}", segment(call)),
                    json!({"decision": settle}),
                )
            } else {
                let body = answer.verdict().body();
                (format!("approvals/{}", segment(call)), body)
            };
            self.send(tail, body).await?;
        }
        Ok(())
    }

    /// Sends the run a user message.
    pub(crate) async fn message(&self, text: String) -> Result<(), ApiError> {
        self.send("messages".to_string(), json!({"text": text}))
            .await
    }
}
