//! The queue and the day's spend, kept in the store's SQLite file (tables of
//! their own, beside the store's, as the webhook outbox keeps its own; with a
//! Postgres store, `queue_pg.rs` keeps them in its database and
//! `queue_place.rs` picks one): a queued run was promised with
//! its id (201), so a restart must not lose it; and a restart must not give
//! a tenant its day's money back.
//!
//! A queued request is kept as the body it came with (checked then, checked
//! again when it is restored), its tenant and `traceparent`, under its run
//! id; its row goes once its run has started (the run is in the store then).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, params};

use super::error::ServeError;
use super::limits::UtcDay;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry_serve_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    tenant TEXT,
    traceparent TEXT,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS agentry_serve_spend (
    tenant TEXT NOT NULL,
    day INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL,
    PRIMARY KEY (tenant, day)
);
";

/// A queued request as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct QueuedRow {
    pub(super) run_id: String,
    pub(super) tenant: Option<String>,
    pub(super) traceparent: Option<String>,
    pub(super) body: Vec<u8>,
}

/// A tenant's spend of one day, as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SpendRow {
    pub(super) tenant: String,
    pub(super) day: UtcDay,
    pub(super) micros: u64,
}

/// What one run spent on a day, as counted: from `from` (its spend counted
/// before the day's first change) to `to` (all of it so far). A Postgres
/// database keeps this per run, so services sharing it add up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RunSpend {
    pub(super) run_id: String,
    pub(super) from: u64,
    pub(super) to: u64,
}

/// The two tables of one SQLite file. Blocking: call it off the async workers.
#[derive(Debug)]
pub(super) struct QueueTable {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl QueueTable {
    /// Opens (and if needed makes) the tables in `path`, the store's file.
    pub(super) fn open(path: &Path) -> Result<QueueTable, ServeError> {
        let fail = |e: rusqlite::Error| ServeError::Queue {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let conn = Connection::open(path).map_err(fail)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(fail)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(fail)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(fail)?;
        conn.execute_batch(SCHEMA).map_err(fail)?;
        Ok(QueueTable {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    fn with<T>(
        &self,
        work: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, ServeError> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        work(&conn).map_err(|e| ServeError::Queue {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Keeps a queued request (committed when this returns).
    pub(super) fn push(&self, row: &QueuedRow) -> Result<(), ServeError> {
        self.with(|conn| {
            conn.execute(
                "INSERT OR IGNORE INTO agentry_serve_queue (run_id, tenant, traceparent, body)
                 VALUES (?1, ?2, ?3, ?4)",
                params![row.run_id, row.tenant, row.traceparent, row.body],
            )
            .map(|_| ())
        })
    }

    /// Forgets a queued request (started, or aborted before it started).
    pub(super) fn remove(&self, run_id: &str) -> Result<(), ServeError> {
        self.with(|conn| {
            conn.execute(
                "DELETE FROM agentry_serve_queue WHERE run_id = ?1",
                params![run_id],
            )
            .map(|_| ())
        })
    }

    /// Every queued request, in the order they came.
    pub(super) fn queued(&self) -> Result<Vec<QueuedRow>, ServeError> {
        self.with(|conn| {
            let mut query = conn.prepare(
                "SELECT run_id, tenant, traceparent, body FROM agentry_serve_queue ORDER BY seq",
            )?;
            let rows = query.query_map([], |row| {
                Ok(QueuedRow {
                    run_id: row.get(0)?,
                    tenant: row.get(1)?,
                    traceparent: row.get(2)?,
                    body: row.get(3)?,
                })
            })?;
            rows.collect()
        })
    }

    /// Sets `tenant`'s spend of `day`.
    pub(super) fn set_spend(&self, row: &SpendRow) -> Result<(), ServeError> {
        self.with(|conn| {
            conn.execute(
                "INSERT INTO agentry_serve_spend (tenant, day, cost_micros) VALUES (?1, ?2, ?3)
                 ON CONFLICT (tenant, day) DO UPDATE SET cost_micros = MAX(cost_micros, ?3)",
                params![row.tenant, row.day.0 as i64, row.micros as i64],
            )
            .map(|_| ())
        })
    }

    /// Every tenant's spend of `day`.
    pub(super) fn spend_of(&self, day: UtcDay) -> Result<Vec<SpendRow>, ServeError> {
        self.with(|conn| {
            let mut query =
                conn.prepare("SELECT tenant, cost_micros FROM agentry_serve_spend WHERE day = ?1")?;
            let rows = query.query_map(params![day.0 as i64], |row| {
                Ok(SpendRow {
                    tenant: row.get(0)?,
                    day,
                    micros: row.get::<_, i64>(1)?.max(0) as u64,
                })
            })?;
            rows.collect()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn queued_requests_and_spend_read_back_from_the_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runs.db");
        let table = QueueTable::open(&path).unwrap();
        for id in ["r1", "r2", "r3"] {
            table
                .push(&QueuedRow {
                    run_id: id.into(),
                    tenant: Some("acme".into()),
                    traceparent: None,
                    body: id.as_bytes().to_vec(),
                })
                .unwrap();
        }
        table.remove("r2").unwrap();
        let spend = |micros| SpendRow {
            tenant: "acme".into(),
            day: UtcDay(7),
            micros,
        };
        table.set_spend(&spend(500)).unwrap();
        table.set_spend(&spend(300)).unwrap();
        drop(table);
        let table = QueueTable::open(&path).unwrap();
        let ids: Vec<String> = table
            .queued()
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(ids, ["r1", "r3"]);
        assert_eq!(table.spend_of(UtcDay(7)).unwrap(), [spend(500)]);
        assert!(table.spend_of(UtcDay(8)).unwrap().is_empty());
    }
}
