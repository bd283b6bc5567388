//! Completion webhooks: a run created with `"webhook": URL` (a host of
//! `[serve] webhook_hosts`) gets one POST when it stops, signed per Standard
//! Webhooks and retried for up to an hour (`agentry-webhooks`).
//!
//! The webhook is a row of the outbox beside the store's tables (its SQLite
//! file, or its Postgres database, where every service on it delivers and
//! each attempt is claimed by one) under an id derived
//! from the run's (`msg_<run_id>`): reserved when the run enters the table,
//! given its body when it stops. So a run that stops after a restart gets it
//! (its meta keeps the URL; the row is reserved again, idempotently, when it
//! resumes), and so does one that stopped while nobody made its row ready
//! (the server was killed in between): `App::ready_stopped_webhooks` at
//! start (`hooks.rs`). The deliverer ([`Webhooks::deliver`]) runs inside the
//! service.
//!
//! The body (`data` is what `GET /runs/{id}` shows of the outcome):
//!
//! ```json
//! {"type": "run.stopped", "timestamp": "2026-01-02T03:04:05.678Z",
//!  "data": {"run_id": "…", "agent": "support", "model": "local",
//!           "status": "stopped", "stop_reason": "done", "answer": "…",
//!           "detail": "…", "steps": 3, "tool_calls": 2}}
//! ```

use std::sync::Arc;

use agentry::RunOutcome;
use agentry::protocol::state::RunSnapshot;
use agentry_webhooks::{Deliverer, Outbox, Schedule, Secret, WebhookError, WebhookHosts};
use serde_json::{Value, json};

use super::agents::RunMeta;
use super::error::ApiError;

/// The field of a `POST /runs` body naming the webhook.
pub(super) const FIELD: &str = "webhook";

/// The service's webhooks: where they may go, the outbox and its deliverer.
#[derive(Debug)]
pub struct Webhooks {
    hosts: WebhookHosts,
    pub(super) outbox: Arc<Outbox>,
    pub(super) deliverer: Deliverer,
}

impl Webhooks {
    /// Webhooks to `hosts`, kept in the outbox of `store_file` (the store's
    /// SQLite file), signed with `secret`, retried on `schedule`.
    pub fn new(
        store_file: &std::path::Path,
        hosts: WebhookHosts,
        secret: Secret,
        schedule: Schedule,
    ) -> Result<Webhooks, WebhookError> {
        Webhooks::with_outbox(Outbox::open(store_file)?, hosts, secret, schedule)
    }

    /// Webhooks to `hosts`, kept in `outbox` (e.g. a Postgres store's,
    /// `Outbox::in_database`), signed with `secret`, retried on `schedule`.
    pub fn with_outbox(
        outbox: Outbox,
        hosts: WebhookHosts,
        secret: Secret,
        schedule: Schedule,
    ) -> Result<Webhooks, WebhookError> {
        let outbox = Arc::new(outbox);
        let deliverer = Deliverer::new(Arc::clone(&outbox), secret, schedule)?;
        Ok(Webhooks {
            hosts,
            outbox,
            deliverer,
        })
    }

    /// What serve.toml configures: webhooks to `hosts` signed with the
    /// secret text `secret` (`whsec_…`), retried on the default schedule.
    pub fn configure(
        store_file: &std::path::Path,
        hosts: &[String],
        secret: &str,
    ) -> Result<Webhooks, WebhookError> {
        Webhooks::configure_outbox(Outbox::open(store_file)?, hosts, secret)
    }

    /// As [`Webhooks::configure`], kept in a Postgres store's `database`
    /// (shared with every service on it).
    #[cfg(feature = "postgres")]
    pub fn configure_in_database(
        database: Arc<agentry::store::Database>,
        hosts: &[String],
        secret: &str,
    ) -> Result<Webhooks, WebhookError> {
        Webhooks::configure_outbox(Outbox::in_database(database)?, hosts, secret)
    }

    /// As [`Webhooks::configure`], kept in `outbox`.
    pub fn configure_outbox(
        outbox: Outbox,
        hosts: &[String],
        secret: &str,
    ) -> Result<Webhooks, WebhookError> {
        let hosts = WebhookHosts::new(hosts).map_err(|refused| WebhookError::Hosts {
            reason: refused.to_string(),
        })?;
        Webhooks::with_outbox(outbox, hosts, Secret::parse(secret)?, Schedule::default())
    }

    /// A POST signed as the completion webhooks are (A2A push
    /// notifications go through it): see [`Deliverer::signed_post`].
    pub(super) fn signed_post(&self, url: &str, id: &str, body: &str) -> reqwest::RequestBuilder {
        self.deliverer.signed_post(url, id, body)
    }

    /// The outbox (to see where a webhook stands).
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Delivers until `stop` resolves (spawn it beside the service).
    pub async fn deliver(self: Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        self.deliverer.clone().run(stop).await;
    }

    /// A request's webhook URL, as it will be POSTed to: 400 naming the field
    /// when its host is not allowed.
    pub(super) fn check(&self, url: &str) -> Result<String, ApiError> {
        self.hosts
            .check(url)
            .map_err(|refused| ApiError::bad_field(FIELD, refused.to_string()))
    }
}

/// A body's `webhook` field: absent, or a non-empty string (400 naming the
/// field otherwise).
pub(super) fn field(body: &serde_json::Map<String, Value>) -> Result<Option<String>, ApiError> {
    match body.get(FIELD) {
        None => Ok(None),
        Some(Value::String(url)) if !url.is_empty() => Ok(Some(url.clone())),
        Some(other) => Err(ApiError::bad_field(
            FIELD,
            format!("expected the URL to POST to when the run stops, found {other}"),
        )),
    }
}

/// The `webhook-id` of a run's completion webhook: the same on every
/// attempt and every restart.
pub fn webhook_id(run_id: &str) -> String {
    format!("msg_{run_id}")
}

/// What a stopped run's webhook says of it.
pub(super) struct Stopped<'a> {
    pub(super) run_id: &'a str,
    pub(super) meta: &'a RunMeta,
    pub(super) stop_reason: Option<Value>,
    pub(super) answer: Option<&'a str>,
    pub(super) detail: Option<&'a str>,
    pub(super) steps: u64,
    pub(super) tool_calls: u64,
}

impl<'a> Stopped<'a> {
    /// From the outcome the run published.
    pub(super) fn of_outcome(meta: &'a RunMeta, outcome: &'a RunOutcome) -> Stopped<'a> {
        Stopped {
            run_id: &outcome.run_id,
            meta,
            stop_reason: serde_json::to_value(outcome.stop_reason).ok(),
            answer: outcome.answer.as_deref(),
            detail: Some(&outcome.detail),
            steps: outcome.steps,
            tool_calls: outcome.tool_calls,
        }
    }

    /// From the run's last stored state (a run that stopped before a restart).
    pub(super) fn of_snapshot(
        run_id: &'a str,
        meta: &'a RunMeta,
        snapshot: &'a RunSnapshot,
    ) -> Stopped<'a> {
        Stopped {
            run_id,
            meta,
            stop_reason: snapshot
                .control
                .stop_reason
                .and_then(|r| serde_json::to_value(r).ok()),
            answer: snapshot.task.answer.as_deref(),
            detail: None,
            steps: snapshot.control.spent.steps,
            tool_calls: snapshot.control.spent.tool_calls,
        }
    }

    /// The webhook's JSON body.
    pub(super) fn body(&self) -> String {
        let mut data = json!({
            "run_id": self.run_id,
            "status": "stopped",
            "stop_reason": self.stop_reason,
            "steps": self.steps,
            "tool_calls": self.tool_calls,
        });
        for (key, value) in [
            ("agent", self.meta.agent.as_deref()),
            ("model", self.meta.model.as_deref()),
            ("answer", self.answer),
            ("detail", self.detail),
        ] {
            if let Some(value) = value {
                data[key] = json!(value);
            }
        }
        let timestamp = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        json!({ "type": "run.stopped", "timestamp": timestamp.to_string(), "data": data })
            .to_string()
    }
}
