//! The outbox in a Postgres store's database (`agentry.webhook_outbox`),
//! shared by every service on it. A pass takes what is due with `FOR UPDATE
//! SKIP LOCKED` and claims it (its next attempt pushed [`CLAIM`] ahead) in
//! the same transaction, so two services never make the same attempt; the
//! attempt's record replaces the claim.

use std::sync::Arc;
use std::time::Duration;

use agentry_store::{Database, StoreError, pg};

use crate::error::WebhookError;
use crate::rows::{CLAIM, Pending, Status, Webhook, now_ms, recorded, state_of};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry.webhook_outbox (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    created_ms BIGINT NOT NULL,
    next_ms BIGINT NOT NULL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS webhook_outbox_due ON agentry.webhook_outbox (state, next_ms);
";

/// The outbox's table in one database.
#[derive(Debug)]
pub(crate) struct DatabaseOutbox {
    database: Arc<Database>,
}

fn failed(database: &Database, e: StoreError) -> WebhookError {
    WebhookError::OutboxDatabase {
        location: database.location().to_string(),
        message: e.to_string(),
    }
}

impl DatabaseOutbox {
    pub(crate) fn open(database: Arc<Database>) -> Result<DatabaseOutbox, WebhookError> {
        database.ensure(SCHEMA).map_err(|e| failed(&database, e))?;
        Ok(DatabaseOutbox { database })
    }

    /// One transaction (run again whole after a lost connection: every
    /// statement here may run twice).
    fn with<T: Send + 'static>(
        &self,
        op: impl FnMut(&mut pg::Transaction<'_>) -> Result<T, pg::Error> + Send + 'static,
    ) -> Result<T, WebhookError> {
        self.database
            .transaction(op)
            .map_err(|e| failed(&self.database, e))
    }

    pub(crate) fn enqueue(&self, webhook: &Webhook) -> Result<(), WebhookError> {
        let now = now_ms() as i64;
        let webhook = webhook.clone();
        self.with(move |tx| {
            tx.execute(
                "INSERT INTO agentry.webhook_outbox (id, url, body, created_ms, next_ms)
                 VALUES ($1, $2, $3, $4, $4) ON CONFLICT (id) DO NOTHING",
                &[&webhook.id, &webhook.url, &webhook.body, &now],
            )
            .map(|_| ())
        })
    }

    pub(crate) fn reserve(&self, id: &str, url: &str) -> Result<(), WebhookError> {
        let now = now_ms() as i64;
        let (id, url) = (id.to_string(), url.to_string());
        self.with(move |tx| {
            tx.execute(
                "INSERT INTO agentry.webhook_outbox (id, url, body, state, created_ms, next_ms)
                 VALUES ($1, $2, '', 'waiting', $3, $3) ON CONFLICT (id) DO NOTHING",
                &[&id, &url, &now],
            )
            .map(|_| ())
        })
    }

    pub(crate) fn ready(&self, webhook: &Webhook) -> Result<(), WebhookError> {
        let now = now_ms() as i64;
        let webhook = webhook.clone();
        self.with(move |tx| {
            tx.execute(
                "INSERT INTO agentry.webhook_outbox (id, url, body, created_ms, next_ms)
                 VALUES ($1, $2, $3, $4, $4)
                 ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, state = 'pending',
                     created_ms = EXCLUDED.created_ms, next_ms = EXCLUDED.next_ms
                 WHERE agentry.webhook_outbox.state = 'waiting'",
                &[&webhook.id, &webhook.url, &webhook.body, &now],
            )
            .map(|_| ())
        })
    }

    pub(crate) fn waiting(&self, limit: usize) -> Result<Vec<Webhook>, WebhookError> {
        let limit = limit as i64;
        self.with(move |tx| {
            let rows = tx.query(
                "SELECT id, url FROM agentry.webhook_outbox WHERE state = 'waiting' LIMIT $1",
                &[&limit],
            )?;
            Ok(rows
                .iter()
                .map(|row| Webhook {
                    id: row.get(0),
                    url: row.get(1),
                    body: String::new(),
                })
                .collect())
        })
    }

    pub(crate) fn remove_finished(&self, id: &str) -> Result<bool, WebhookError> {
        let id = id.to_string();
        self.with(move |tx| {
            tx.execute(
                "DELETE FROM agentry.webhook_outbox
                 WHERE id = $1 AND state IN ('delivered', 'gave_up')",
                &[&id],
            )
            .map(|removed| removed > 0)
        })
    }

    /// What is due, claimed (see the module docs).
    pub(crate) fn due(&self, limit: usize) -> Result<Vec<Pending>, WebhookError> {
        let now = now_ms() as i64;
        let claimed_until = now + CLAIM.as_millis() as i64;
        let limit = limit as i64;
        self.with(move |tx| {
            let rows = tx.query(
                "UPDATE agentry.webhook_outbox AS o SET next_ms = $2
                 FROM (SELECT id FROM agentry.webhook_outbox
                       WHERE state = 'pending' AND next_ms <= $1
                       ORDER BY next_ms LIMIT $3 FOR UPDATE SKIP LOCKED) AS due
                 WHERE o.id = due.id
                 RETURNING o.id, o.url, o.body, o.attempts, o.created_ms",
                &[&now, &claimed_until, &limit],
            )?;
            let mut due: Vec<Pending> = rows
                .iter()
                .map(|row| Pending {
                    webhook: Webhook {
                        id: row.get(0),
                        url: row.get(1),
                        body: row.get(2),
                    },
                    attempts: row.get::<_, i32>(3).max(0) as u32,
                    created_ms: row.get::<_, i64>(4).max(0) as u64,
                })
                .collect();
            due.sort_by_key(|p| p.created_ms);
            Ok(due)
        })
    }

    pub(crate) fn next_due_ms(&self) -> Result<Option<u64>, WebhookError> {
        self.with(|tx| {
            let row = tx.query_one(
                "SELECT MIN(next_ms) FROM agentry.webhook_outbox WHERE state = 'pending'",
                &[],
            )?;
            Ok(row.get::<_, Option<i64>>(0).map(|ms| ms.max(0) as u64))
        })
    }

    pub(crate) fn record(
        &self,
        id: &str,
        outcome: Result<(), &str>,
        retry_in: Option<Duration>,
    ) -> Result<(), WebhookError> {
        let (state, next, error) = recorded(outcome, retry_in);
        let (id, error) = (id.to_string(), error.map(str::to_string));
        let next = next as i64;
        self.with(move |tx| {
            tx.execute(
                "UPDATE agentry.webhook_outbox SET state = $2, attempts = attempts + 1,
                 next_ms = $3, last_error = $4 WHERE id = $1",
                &[&id, &state, &next, &error],
            )
            .map(|_| ())
        })
    }

    pub(crate) fn status(&self, id: &str) -> Result<Option<Status>, WebhookError> {
        let id = id.to_string();
        self.with(move |tx| {
            let row = tx.query_opt(
                "SELECT state, attempts FROM agentry.webhook_outbox WHERE id = $1",
                &[&id],
            )?;
            Ok(row.map(|row| Status {
                state: state_of(row.get(0)),
                attempts: row.get::<_, i32>(1).max(0) as u32,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::State;

    fn outbox(url: &str) -> Result<DatabaseOutbox, Box<dyn std::error::Error>> {
        Ok(DatabaseOutbox::open(Arc::new(Database::connect(url)?))?)
    }

    /// Two services on one database: a due webhook goes to the first that
    /// asks, not the second, until its attempt is recorded; a retry is due
    /// to either once its time comes; reserve and ready as in a file.
    #[test]
    #[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
    fn a_due_webhook_is_claimed_by_one_service_until_its_attempt_is_recorded()
    -> Result<(), Box<dyn std::error::Error>> {
        let url = agentry_test_postgres::PgServer::shared().database();
        let (a, b) = (outbox(&url)?, outbox(&url)?);
        a.reserve("msg_r1", "http://127.0.0.1:9/h")?;
        b.reserve("msg_r1", "http://elsewhere/")?;
        assert!(a.due(10)?.is_empty(), "a waiting webhook is never due");
        assert_eq!(b.waiting(10)?.len(), 1);
        let webhook = Webhook {
            id: "msg_r1".into(),
            url: "http://127.0.0.1:9/h".into(),
            body: "{}".into(),
        };
        b.ready(&webhook)?;
        a.ready(&Webhook {
            body: "{\"second\":true}".into(),
            ..webhook.clone()
        })?;
        let claimed = a.due(10)?;
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].webhook, webhook, "the first body stays");
        assert!(b.due(10)?.is_empty(), "claimed by a");
        assert!(a.due(10)?.is_empty(), "claimed once");
        a.record("msg_r1", Err("HTTP 500"), Some(Duration::ZERO))?;
        let retried = b.due(10)?;
        assert_eq!(retried.len(), 1, "due again once recorded");
        assert_eq!(retried[0].attempts, 1);
        b.record("msg_r1", Ok(()), None)?;
        let status = a.status("msg_r1")?.ok_or("no status")?;
        assert_eq!((status.state, status.attempts), (State::Delivered, 2));
        assert!(a.remove_finished("msg_r1")?);
        assert_eq!(b.status("msg_r1")?, None);
        Ok(())
    }
}
