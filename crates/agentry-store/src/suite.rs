//! The store's test suite, run against every backend: each test is a
//! function generic over a [`Backend`] (a fresh place for a store, opened as
//! often as the test likes), instantiated by [`for_each_backend!`] once per
//! backend compiled in. Postgres' are `#[ignore]`d (they need a server,
//! which `.ci/run` installs); the harness starts a private one
//! (`agentry-test-postgres`).
//!
//! What only one backend has (SQLite's file handling, its damage property,
//! its query plans) is tested beside it (`sqlite/tests/`).

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::state::{RunSnapshot, RunStatus, SessionEntry};
use agentry_protocol::stop::StopReason;
use agentry_protocol::tool::ToolCall;
use serde_json::json;

use crate::{
    Checkpoint, INLINE_LIMIT, InboxRecord, LedgerEntry, LedgerState, RunRecord, RunSummary, Store,
    StoreError, StoredRun, TimerRecord, Write,
};

/// A fresh, empty place a store lives in, and how to reach it.
pub(crate) trait Backend: Sized {
    /// The store this backend opens.
    type Store: Store;
    /// A new place, with no store in it yet.
    fn place() -> Self;
    /// Opens the store at this place (again: a reopen sees every commit).
    fn open(&self) -> Self::Store;
    /// What the store's `location()` says.
    fn location(&self) -> String;
    /// One integer from `sql` on the store's tables (named plainly).
    fn count(&self, sql: &str) -> i64;
}

/// A SQLite file in a temporary directory.
#[cfg(feature = "sqlite")]
pub(crate) struct SqlitePlace {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

#[cfg(feature = "sqlite")]
impl Backend for SqlitePlace {
    type Store = crate::SqliteStore;

    fn place() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        SqlitePlace { _dir: dir, path }
    }

    fn open(&self) -> crate::SqliteStore {
        crate::SqliteStore::open(&self.path).unwrap()
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn count(&self, sql: &str) -> i64 {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }
}

/// A fresh database on the test process's private PostgreSQL server.
#[cfg(feature = "postgres")]
pub(crate) struct PostgresPlace {
    pub(crate) url: String,
}

#[cfg(feature = "postgres")]
impl Backend for PostgresPlace {
    type Store = crate::PostgresStore;

    fn place() -> Self {
        PostgresPlace {
            url: agentry_test_postgres::PgServer::shared().database(),
        }
    }

    fn open(&self) -> crate::PostgresStore {
        crate::PostgresStore::connect(&self.url).unwrap()
    }

    fn location(&self) -> String {
        self.open().location()
    }

    fn count(&self, sql: &str) -> i64 {
        let mut client = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        client.batch_execute("SET search_path TO agentry").unwrap();
        client
            .query_one(&format!("SELECT ({sql})::bigint"), &[])
            .unwrap()
            .get::<_, Option<i64>>(0)
            .unwrap_or(0)
    }
}

/// `#[test]`s running each named generic test once per backend compiled in:
/// `on_sqlite::NAME` and (ignored unless asked for) `on_postgres::NAME`.
macro_rules! for_each_backend {
    ($($test:ident),* $(,)?) => {
        #[cfg(feature = "sqlite")]
        mod on_sqlite {
            $(
                #[test]
                fn $test() {
                    super::$test::<crate::suite::SqlitePlace>();
                }
            )*
        }
        #[cfg(feature = "postgres")]
        mod on_postgres {
            $(
                #[test]
                #[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
                fn $test() {
                    super::$test::<crate::suite::PostgresPlace>();
                }
            )*
        }
    };
}

pub(crate) fn record(run_id: &str, created_at_ms: u64) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        task_id: format!("task-{run_id}"),
        parent_id: None,
        created_at_ms,
        deadline_at_ms: Some(created_at_ms + 60_000),
        config: json!({"model": "scripted", "limits": {"max_steps": 10}}),
        policy: "script:/abs/script.json".into(),
    }
}

pub(crate) fn checkpoint(version: u64, status: RunStatus, stop: Option<StopReason>) -> Checkpoint {
    let mut snapshot = RunSnapshot {
        version,
        status,
        session_len: version,
        ..RunSnapshot::default()
    };
    snapshot.task.goal = "sum the numbers".into();
    snapshot.control.stop_reason = stop;
    Checkpoint {
        snapshot,
        progress: json!({"step": version, "fingerprints": ["a", "b"]}),
    }
}

pub(crate) fn result(call_id: &str, data: serde_json::Value) -> ResultEnvelope {
    let mut r = ResultEnvelope::success(call_id, "read_file", data, Vec::new());
    r.observed_at = 1_700_000_000_000;
    r
}

pub(crate) fn ledger(call_id: &str, step: u64, position: u32, state: LedgerState) -> LedgerEntry {
    LedgerEntry {
        call_id: call_id.into(),
        step,
        position,
        call: ToolCall::new(call_id, "read_file", json!({"path": "a.txt"})),
        digest: format!("digest-{call_id}"),
        intent_key: format!("intent-{call_id}"),
        operation_id: format!("op-{call_id}"),
        state,
        outcome: None,
        updated_at_ms: 5,
        processes: Vec::new(),
        remote: None,
    }
}

pub(crate) fn append(run_id: &str, first: u64, entries: Vec<SessionEntry>) -> Write {
    Write::AppendSession {
        run_id: run_id.into(),
        first,
        entries,
    }
}

pub(crate) fn user(text: &str) -> SessionEntry {
    SessionEntry::User { text: text.into() }
}

mod fencing;
mod processes;
pub(crate) mod service;
mod writes;
