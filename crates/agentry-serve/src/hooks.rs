//! The table's side of completion webhooks (`webhooks.rs`): a request's URL
//! checked, a run's row reserved when it enters the table and made ready when
//! it stops, and at start the rows of runs that stopped while no server held
//! them.

use agentry_webhooks::{Webhook, WebhookError};

use super::agents::RunMeta;
use super::error::ApiError;
use super::table::App;
use super::webhooks::{FIELD, Stopped, webhook_id};

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
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::*;
    use crate::config::ServiceConfig;
    use crate::webhooks::Webhooks;
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
            crate::create::prepare(body.to_string().as_bytes(), None)
                .map_err(|e| format!("{e:?}"))?
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
