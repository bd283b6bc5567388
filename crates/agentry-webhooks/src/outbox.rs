//! The durable outbox: one row per webhook, in the store's SQLite file (its
//! own table, beside the store's), so a delivery survives a restart; with a
//! Postgres store, in the store's database (`outbox_pg.rs`), shared by every
//! node of a cluster.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::WebhookError;
use crate::rows::{Pending, Status, Webhook, now_ms, recorded, state_of};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry_webhooks (
    id TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    created_ms INTEGER NOT NULL,
    next_ms INTEGER NOT NULL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS agentry_webhooks_due ON agentry_webhooks (state, next_ms);
";

/// The outbox: its table in the store's SQLite file, or (feature
/// `postgres`) in the store's Postgres database. Blocking: call it off the
/// async workers.
#[derive(Debug)]
pub struct Outbox {
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    File(FileOutbox),
    #[cfg(feature = "postgres")]
    Database(crate::outbox_pg::DatabaseOutbox),
}

/// Calls `$method` on whichever backend holds the outbox.
macro_rules! each {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match &$self.backend {
            Backend::File(file) => file.$method($($arg),*),
            #[cfg(feature = "postgres")]
            Backend::Database(db) => db.$method($($arg),*),
        }
    };
}

impl Outbox {
    /// Opens (and if needed makes) the outbox in `path`, typically the store's file.
    pub fn open(path: &Path) -> Result<Outbox, WebhookError> {
        Ok(Outbox {
            backend: Backend::File(FileOutbox::open(path)?),
        })
    }

    /// Makes (if needed) the outbox in a Postgres store's database
    /// (`agentry.webhook_outbox`), shared by every service on it: each
    /// attempt is claimed by one of them (see [`Outbox::due`]).
    #[cfg(feature = "postgres")]
    pub fn in_database(
        database: std::sync::Arc<agentry_store::Database>,
    ) -> Result<Outbox, WebhookError> {
        Ok(Outbox {
            backend: Backend::Database(crate::outbox_pg::DatabaseOutbox::open(database)?),
        })
    }

    /// Enqueues `webhook` for an attempt now; one already enqueued under the
    /// same id is left as it is (at least once, never twice for one id).
    pub fn enqueue(&self, webhook: &Webhook) -> Result<(), WebhookError> {
        each!(self.enqueue(webhook))
    }

    /// Reserves webhook `id` to `url` for a run that has not stopped: kept
    /// across restarts, never attempted until [`Outbox::ready`]. Reserving
    /// an id again changes nothing.
    pub fn reserve(&self, id: &str, url: &str) -> Result<(), WebhookError> {
        each!(self.reserve(id, url))
    }

    /// Gives a reserved webhook its body and makes it due now (its hour of
    /// retries starts here); one never reserved is enqueued. A webhook
    /// already due, delivered or given up is left as it is: one run, one
    /// delivery.
    pub fn ready(&self, webhook: &Webhook) -> Result<(), WebhookError> {
        each!(self.ready(webhook))
    }

    /// The reserved webhooks (their body empty), at most `limit`: after a
    /// restart, those whose run stopped meanwhile are made [`Outbox::ready`].
    pub fn waiting(&self, limit: usize) -> Result<Vec<Webhook>, WebhookError> {
        each!(self.waiting(limit))
    }

    /// Removes webhook `id` if it is finished (delivered or given up), as
    /// its run's records go; true if it was removed.
    pub fn remove_finished(&self, id: &str) -> Result<bool, WebhookError> {
        each!(self.remove_finished(id))
    }

    /// The pending webhooks due by now, oldest first, at most `limit`. In a
    /// Postgres database they are claimed: no other caller gets them until
    /// [`Outbox::record`] says how their attempt went, or the claim lapses
    /// (its taker died) after [`CLAIM`](crate::CLAIM).
    pub fn due(&self, limit: usize) -> Result<Vec<Pending>, WebhookError> {
        each!(self.due(limit))
    }

    /// When the earliest pending webhook is due (milliseconds since the epoch).
    pub fn next_due_ms(&self) -> Result<Option<u64>, WebhookError> {
        each!(self.next_due_ms())
    }

    /// Records an attempt: delivered, failed with a next attempt after
    /// `retry_in`, or failed for the last time (`retry_in` `None`).
    pub fn record(
        &self,
        id: &str,
        outcome: Result<(), &str>,
        retry_in: Option<Duration>,
    ) -> Result<(), WebhookError> {
        each!(self.record(id, outcome, retry_in))
    }

    /// Where webhook `id` stands, if it is known.
    pub fn status(&self, id: &str) -> Result<Option<Status>, WebhookError> {
        each!(self.status(id))
    }
}

/// The outbox table of one SQLite file.
#[derive(Debug)]
struct FileOutbox {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl FileOutbox {
    fn open(path: &Path) -> Result<FileOutbox, WebhookError> {
        let fail = |source| WebhookError::Outbox {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(fail)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        Ok(FileOutbox {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn enqueue(&self, webhook: &Webhook) -> Result<(), WebhookError> {
        let now = now_ms();
        self.with(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO agentry_webhooks (id, url, body, created_ms, next_ms)
                 VALUES (?1, ?2, ?3, ?4, ?4)",
                params![webhook.id, webhook.url, webhook.body, now as i64],
            )
            .map(|_| ())
        })
    }

    fn reserve(&self, id: &str, url: &str) -> Result<(), WebhookError> {
        let now = now_ms();
        self.with(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO agentry_webhooks (id, url, body, state, created_ms, next_ms)
                 VALUES (?1, ?2, '', 'waiting', ?3, ?3)",
                params![id, url, now as i64],
            )
            .map(|_| ())
        })
    }

    fn ready(&self, webhook: &Webhook) -> Result<(), WebhookError> {
        let now = now_ms() as i64;
        self.with(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO agentry_webhooks (id, url, body, created_ms, next_ms)
                 VALUES (?1, ?2, ?3, ?4, ?4)",
                params![webhook.id, webhook.url, webhook.body, now],
            )?;
            conn.execute(
                "UPDATE agentry_webhooks SET body = ?2, state = 'pending', created_ms = ?3,
                 next_ms = ?3 WHERE id = ?1 AND state = 'waiting'",
                params![webhook.id, webhook.body, now],
            )
            .map(|_| ())
        })
    }

    fn waiting(&self, limit: usize) -> Result<Vec<Webhook>, WebhookError> {
        self.with(|conn| {
            let mut query = conn.prepare_cached(
                "SELECT id, url FROM agentry_webhooks WHERE state = 'waiting' LIMIT ?1",
            )?;
            let rows = query.query_map(params![limit as i64], |row| {
                Ok(Webhook {
                    id: row.get(0)?,
                    url: row.get(1)?,
                    body: String::new(),
                })
            })?;
            rows.collect()
        })
    }

    fn remove_finished(&self, id: &str) -> Result<bool, WebhookError> {
        self.with(|conn| {
            conn.execute(
                "DELETE FROM agentry_webhooks WHERE id = ?1 AND state IN ('delivered', 'gave_up')",
                params![id],
            )
            .map(|removed| removed > 0)
        })
    }

    fn due(&self, limit: usize) -> Result<Vec<Pending>, WebhookError> {
        let now = now_ms() as i64;
        self.with(|conn| {
            let mut query = conn.prepare_cached(
                "SELECT id, url, body, attempts, created_ms FROM agentry_webhooks
                 WHERE state = 'pending' AND next_ms <= ?1 ORDER BY next_ms LIMIT ?2",
            )?;
            let rows = query.query_map(params![now, limit as i64], |row| {
                Ok(Pending {
                    webhook: Webhook {
                        id: row.get(0)?,
                        url: row.get(1)?,
                        body: row.get(2)?,
                    },
                    attempts: row.get(3)?,
                    created_ms: row.get::<_, i64>(4)? as u64,
                })
            })?;
            rows.collect()
        })
    }

    fn next_due_ms(&self) -> Result<Option<u64>, WebhookError> {
        self.with(|conn| {
            conn.query_row(
                "SELECT MIN(next_ms) FROM agentry_webhooks WHERE state = 'pending'",
                [],
                |row| row.get::<_, Option<i64>>(0),
            )
            .map(|next| next.map(|ms| ms as u64))
        })
    }

    fn record(
        &self,
        id: &str,
        outcome: Result<(), &str>,
        retry_in: Option<Duration>,
    ) -> Result<(), WebhookError> {
        let (state, next, error) = recorded(outcome, retry_in);
        self.with(|conn| {
            conn.execute(
                "UPDATE agentry_webhooks SET state = ?2, attempts = attempts + 1, next_ms = ?3,
                 last_error = ?4 WHERE id = ?1",
                params![id, state, next as i64, error],
            )
            .map(|_| ())
        })
    }

    fn status(&self, id: &str) -> Result<Option<Status>, WebhookError> {
        self.with(|conn| {
            conn.query_row(
                "SELECT state, attempts FROM agentry_webhooks WHERE id = ?1",
                params![id],
                |row| {
                    Ok(Status {
                        state: state_of(&row.get::<_, String>(0)?),
                        attempts: row.get(1)?,
                    })
                },
            )
            .optional()
        })
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, WebhookError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        f(&conn).map_err(|source| WebhookError::Outbox {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::State;

    /// A run's webhook: reserved at its start (never due), ready at its stop
    /// (due, once: a second `ready` or `reserve` changes nothing), removed
    /// only once finished.
    #[test]
    fn a_reserved_webhook_waits_for_its_body_and_is_ready_once()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let outbox = Outbox::open(&dir.path().join("store.db"))?;
        outbox.reserve("msg_r1", "http://127.0.0.1:9/h")?;
        outbox.reserve("msg_r1", "http://elsewhere/")?;
        assert_eq!(
            outbox.status("msg_r1")?.map(|s| s.state),
            Some(State::Waiting)
        );
        assert!(
            outbox.due(10)?.is_empty(),
            "a waiting webhook is never attempted"
        );
        let waiting = outbox.waiting(10)?;
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].url, "http://127.0.0.1:9/h");
        assert!(!outbox.remove_finished("msg_r1")?, "not finished yet");

        let ready = Webhook {
            id: "msg_r1".into(),
            url: "http://127.0.0.1:9/h".into(),
            body: "{\"type\":\"run.stopped\"}".into(),
        };
        outbox.ready(&ready)?;
        outbox.ready(&Webhook {
            body: "{\"second\":true}".into(),
            ..ready.clone()
        })?;
        let due = outbox.due(10)?;
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].webhook, ready, "the first body stays");
        assert!(outbox.waiting(10)?.is_empty());
        outbox.record("msg_r1", Ok(()), None)?;
        assert!(outbox.remove_finished("msg_r1")?);
        assert_eq!(outbox.status("msg_r1")?, None);
        Ok(())
    }
}
