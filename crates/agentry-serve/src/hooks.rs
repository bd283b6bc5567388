//! Completion webhooks: a run created with `"webhook": URL` (a host of
//! `[serve] webhook_hosts`) gets one POST when it stops, signed per Standard
//! Webhooks and retried for up to an hour (`agentry-webhooks`).
//!
//! The webhook is a row of the outbox in the store's file under an id derived
//! from the run's (`msg_<run_id>`): reserved when the run enters the table,
//! given its body when it stops. So a run that stops after a restart gets it
//! (its meta keeps the URL; the row is reserved again, idempotently, when it
//! resumes), and so does one that stopped while nobody made its row ready
//! (the server was killed in between): [`App::ready_stopped_webhooks`] at
//! start. The deliverer ([`Webhooks::deliver`]) runs inside the service.
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
use agentry_webhooks::{Deliverer, Outbox, Schedule, Secret, Webhook, WebhookError, WebhookHosts};
use serde_json::{Value, json};

use super::agents::RunMeta;
use super::error::ApiError;
use super::table::App;

/// The field of a `POST /runs` body naming the webhook.
pub(super) const FIELD: &str = "webhook";

/// The service's webhooks: where they may go, the outbox and its deliverer.
#[derive(Debug)]
pub struct Webhooks {
    hosts: WebhookHosts,
    outbox: Arc<Outbox>,
    deliverer: Deliverer,
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
        let outbox = Arc::new(Outbox::open(store_file)?);
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
        let hosts = WebhookHosts::new(hosts).map_err(|refused| WebhookError::Hosts {
            reason: refused.to_string(),
        })?;
        Webhooks::new(
            store_file,
            hosts,
            Secret::parse(secret)?,
            Schedule::default(),
        )
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
    fn check(&self, url: &str) -> Result<String, ApiError> {
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
    fn body(&self) -> String {
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

impl App {
    /// The request's `webhook` checked against the allowed hosts (400 naming
    /// the field, also when this service sends no webhooks).
    pub(super) fn check_webhook(&self, url: Option<String>) -> Result<Option<String>, ApiError> {
        let Some(url) = url else {
            return Ok(None);
        };
        match &self.config.webhooks {
            Some(hooks) => hooks.check(&url).map(Some),
            None => Err(ApiError::bad_field(
                FIELD,
                "this service sends no webhooks (its [serve] webhook_hosts is empty)",
            )),
        }
    }

    /// Reserves the webhook of a run entering the table (blocking).
    pub(super) fn reserve_webhook(&self, run_id: &str, meta: &RunMeta) {
        let (Some(hooks), Some(url)) = (&self.config.webhooks, &meta.webhook) else {
            return;
        };
        if let Err(error) = hooks.outbox.reserve(&webhook_id(run_id), url) {
            tracing::warn!(run_id, %error, "webhook not reserved; it is enqueued when the run stops");
        }
    }

    /// The run stopped: its webhook is due now (blocking).
    pub(super) fn webhook_ready(&self, stopped: &Stopped<'_>) {
        let (Some(hooks), Some(url)) = (&self.config.webhooks, &stopped.meta.webhook) else {
            return;
        };
        let webhook = Webhook {
            id: webhook_id(stopped.run_id),
            url: url.clone(),
            body: stopped.body(),
        };
        if let Err(error) = hooks.deliverer.enqueue_ready(&webhook) {
            tracing::warn!(run_id = stopped.run_id, %error, "webhook not enqueued; the next start retries");
        }
    }

    /// At start, after the unfinished runs resumed: every reserved webhook
    /// whose run is stopped in the store (it stopped, and the process died
    /// before its webhook was made ready) is made ready. Returns how many.
    pub async fn ready_stopped_webhooks(&self) -> Result<usize, WebhookError> {
        let Some(hooks) = self.config.webhooks.clone() else {
            return Ok(0);
        };
        let Some(store) = self.runtime.store().cloned() else {
            return Ok(0);
        };
        let app = self.clone();
        let ready = tokio::task::spawn_blocking(move || {
            let mut ready = 0;
            // Bounded per start: what a crash left waiting, not a backlog.
            for waiting in hooks.outbox.waiting(10_000)? {
                let Some(run_id) = waiting.id.strip_prefix("msg_") else {
                    continue;
                };
                if app.is_live(run_id) {
                    continue;
                }
                let stored = match store.load(run_id) {
                    Ok(Some(stored)) => stored,
                    Ok(None) | Err(_) => continue,
                };
                let Some(checkpoint) = stored.checkpoint else {
                    continue;
                };
                if checkpoint.snapshot.status != agentry::RunStatus::Stopped {
                    continue;
                }
                let meta = RunMeta {
                    webhook: Some(waiting.url.clone()),
                    ..RunMeta::of_policy(&stored.record.policy.clone().into())
                };
                app.webhook_ready(&Stopped::of_snapshot(run_id, &meta, &checkpoint.snapshot));
                ready += 1;
            }
            Ok::<_, WebhookError>(ready)
        })
        .await
        .unwrap_or(Ok(0))?;
        Ok(ready)
    }

    /// Removes the finished webhook of a run its retention removed.
    pub(super) fn forget_webhook(&self, run_id: &str) {
        if let Some(hooks) = &self.config.webhooks
            && let Err(error) = hooks.outbox.remove_finished(&webhook_id(run_id))
        {
            tracing::warn!(run_id, %error, "webhook row not removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ServiceConfig;
    use agentry::protocol::stored_policy::StoredPolicy;

    /// A run that stopped while its webhook was still only reserved (its
    /// server died in between) is found at the next start and made due,
    /// once, with what its stored state says.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_runs_waiting_webhook_is_made_ready_at_start()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("store.db");
        let store = Arc::new(agentry::SqliteStore::open(&file)?);
        let runtime =
            agentry::Runtime::with_builtins()?.with_store(store, agentry::Durability::Strict)?;
        let hooks = Webhooks::configure(
            &file,
            &["127.0.0.1".to_string()],
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )?;
        let hooks = Arc::new(hooks);
        let app = App::with_config(
            runtime,
            ServiceConfig {
                webhooks: Some(Arc::clone(&hooks)),
                ..ServiceConfig::default()
            },
        );
        let body = json!({"goal": "answer", "script": {"turns": [{"final": "42"}]}});
        let crate::create::Prepared::Inline(run) =
            crate::create::prepare(body.to_string().as_bytes()).map_err(|e| format!("{e:?}"))?
        else {
            return Err("not an inline task".into());
        };
        let crate::create::NewRun {
            mut config, script, ..
        } = *run;
        let url = "http://127.0.0.1:9/hook";
        let meta = RunMeta {
            webhook: Some(url.to_string()),
            ..RunMeta::default()
        };
        if let Some(StoredPolicy::Root(root)) = &mut config.policy_spec {
            meta.store_in(root);
        }
        // Started outside the table, as a server that died before following it.
        let handle = app.runtime().start(config, script.into_policy()).await?;
        let id = handle.run_id().to_string();
        hooks.outbox.reserve(&webhook_id(&id), url)?;
        handle.wait().await?;

        assert_eq!(app.ready_stopped_webhooks().await?, 1);
        assert_eq!(app.ready_stopped_webhooks().await?, 0, "made due once");
        let due = hooks.outbox.due(10)?;
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].webhook.id, format!("msg_{id}"));
        assert_eq!(due[0].webhook.url, url);
        let sent: Value = serde_json::from_str(&due[0].webhook.body)?;
        assert_eq!(sent["type"], "run.stopped");
        assert_eq!(sent["data"]["run_id"], json!(id));
        assert_eq!(sent["data"]["stop_reason"], "done");
        assert_eq!(sent["data"]["answer"], "42");
        Ok(())
    }
}
