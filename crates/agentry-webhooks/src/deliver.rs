//! The deliverer: POSTs what the outbox has due, signed, and records each
//! attempt; a failure is tried again on the schedule until an hour has
//! passed since the webhook was enqueued.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::error::WebhookError;
use crate::outbox::Outbox;
use crate::rows::{Pending, now_ms};
use crate::sign::Secret;

/// When a failed webhook is tried again: after each delay in turn, never
/// after `give_up_after` from its enqueueing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// The wait before attempt 2, 3, ...
    pub delays: Vec<Duration>,
    /// No attempt starts later than this after the webhook was enqueued.
    pub give_up_after: Duration,
}

impl Default for Schedule {
    /// 5 s, 30 s, 2 min, 5 min, 10 min, 15 min, 15 min: eight attempts
    /// within the hour.
    fn default() -> Self {
        let minutes = |m: u64| Duration::from_secs(60 * m);
        Schedule {
            delays: vec![
                Duration::from_secs(5),
                Duration::from_secs(30),
                minutes(2),
                minutes(5),
                minutes(10),
                minutes(15),
                minutes(15),
            ],
            give_up_after: minutes(60),
        }
    }
}

impl Schedule {
    /// The wait before the next attempt, after `attempts` failed ones of a
    /// webhook enqueued at `created_ms`; `None`: give up.
    fn retry_in(&self, attempts: u32, created_ms: u64) -> Option<Duration> {
        let delay = *self.delays.get(attempts.checked_sub(1)? as usize)?;
        let next = now_ms() + delay.as_millis() as u64;
        let last = created_ms + self.give_up_after.as_millis() as u64;
        (next <= last).then_some(delay)
    }
}

/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);

/// Webhooks taken per pass.
const BATCH: usize = 32;

/// Delivers the outbox's webhooks.
#[derive(Debug, Clone)]
pub struct Deliverer {
    outbox: Arc<Outbox>,
    secret: Secret,
    schedule: Schedule,
    client: reqwest::Client,
    wake: Arc<Notify>,
}

impl Deliverer {
    /// A deliverer for `outbox`, signing with `secret`. Redirects are not
    /// followed: a webhook goes to the URL that was allowed, nowhere else.
    pub fn new(
        outbox: Arc<Outbox>,
        secret: Secret,
        schedule: Schedule,
    ) -> Result<Deliverer, WebhookError> {
        agentry_tls::install_crypto_provider();
        let builder = || {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(10))
        };
        // A machine without system roots still reaches an http:// receiver.
        let client = builder()
            .build()
            .or_else(|_| builder().tls_certs_only(Vec::new()).build())
            .map_err(|error| WebhookError::Client {
                reason: agentry_tls::error_chain(&error),
            })?;
        Ok(Deliverer {
            outbox,
            secret,
            schedule,
            client,
            wake: Arc::new(Notify::new()),
        })
    }

    /// Enqueues a webhook and wakes the deliverer for it.
    pub fn enqueue(&self, webhook: &crate::Webhook) -> Result<(), WebhookError> {
        self.outbox.enqueue(webhook)?;
        self.wake.notify_one();
        Ok(())
    }

    /// Makes a reserved webhook ready ([`Outbox::ready`]) and wakes the
    /// deliverer for it.
    pub fn enqueue_ready(&self, webhook: &crate::Webhook) -> Result<(), WebhookError> {
        self.outbox.ready(webhook)?;
        self.wake.notify_one();
        Ok(())
    }

    /// Delivers until `stop` resolves: each pass takes what is due, then
    /// sleeps until the next one is due or something is enqueued.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let mut stop = std::pin::pin!(stop);
        loop {
            if let Err(error) = self.deliver_due().await {
                tracing::warn!(%error, "webhook delivery pass failed");
            }
            let pause = match self.off_workers(Outbox::next_due_ms).await {
                Ok(Some(next)) => Duration::from_millis(next.saturating_sub(now_ms())),
                Ok(None) | Err(_) => Duration::from_secs(60),
            };
            tokio::select! {
                () = &mut stop => return,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(pause.max(Duration::from_millis(10))) => {}
            }
        }
    }

    /// One pass over what is due now; how many webhooks were attempted.
    pub async fn deliver_due(&self) -> Result<usize, WebhookError> {
        let due = self.off_workers(|outbox| outbox.due(BATCH)).await?;
        for pending in &due {
            self.attempt(pending).await?;
        }
        Ok(due.len())
    }

    /// The client every delivery goes through (no redirects followed).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// A POST of JSON `body` to `url` as message `id` (the same on every
    /// attempt), signed now per Standard Webhooks; a sender may add headers
    /// of its own (A2A push notifications do).
    pub fn signed_post(&self, url: &str, id: &str, body: &str) -> reqwest::RequestBuilder {
        let timestamp = now_ms() / 1000;
        let signature = self.secret.sign(id, timestamp, body.as_bytes());
        self.client
            .post(url)
            .timeout(ATTEMPT_TIMEOUT)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_string())
    }

    async fn attempt(&self, pending: &Pending) -> Result<(), WebhookError> {
        let webhook = &pending.webhook;
        let sent = self
            .signed_post(&webhook.url, &webhook.id, &webhook.body)
            .send()
            .await;
        let outcome = match sent {
            Ok(response) if response.status().is_success() => Ok(()),
            Ok(response) => Err(format!("HTTP {}", response.status())),
            Err(error) => Err(agentry_tls::error_chain(&error)),
        };
        let attempts = pending.attempts + 1;
        let retry_in = self.schedule.retry_in(attempts, pending.created_ms);
        if let Err(error) = &outcome {
            tracing::warn!(webhook_id = %webhook.id, attempts, %error, retry = retry_in.is_some(), "webhook delivery failed");
        }
        let id = webhook.id.clone();
        self.off_workers(move |outbox| {
            outbox.record(
                &id,
                outcome.as_ref().map(|_| ()).map_err(String::as_str),
                retry_in,
            )
        })
        .await
    }

    /// Runs `work` on the outbox on the blocking pool: its table may be in
    /// a database that takes its time (or is away until it comes back).
    async fn off_workers<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Outbox) -> Result<T, WebhookError> + Send + 'static,
    ) -> Result<T, WebhookError> {
        let outbox = Arc::clone(&self.outbox);
        tokio::task::spawn_blocking(move || work(&outbox))
            .await
            .unwrap_or_else(|e| {
                Err(WebhookError::Client {
                    reason: format!("the outbox's task failed: {e}"),
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_stays_within_the_hour_then_gives_up() {
        let schedule = Schedule::default();
        let total: Duration = schedule.delays.iter().sum();
        assert!(total <= schedule.give_up_after, "{total:?}");
        let now = now_ms();
        assert_eq!(schedule.retry_in(1, now), Some(Duration::from_secs(5)));
        assert_eq!(schedule.retry_in(8, now), None, "eight attempts at most");
        let an_hour_ago = now - 3_600_000;
        assert_eq!(schedule.retry_in(1, an_hour_ago), None);
    }
}
