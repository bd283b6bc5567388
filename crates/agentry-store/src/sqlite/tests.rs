//! Tests of the SQLite store: shared fixtures here, the tests in `writes`
//! (what a batch does) and `files` (opening, damage, limits, migrations).

use std::path::{Path, PathBuf};

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::state::{RunSnapshot, RunStatus, SessionEntry};
use agentry_protocol::stop::StopReason;
use agentry_protocol::tool::ToolCall;
use serde_json::json;

use super::*;
use crate::{
    Checkpoint, INLINE_LIMIT, InboxRecord, LedgerEntry, LedgerState, RunRecord, TimerRecord,
};

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("store.db")
}

fn record(run_id: &str, created_at_ms: u64) -> RunRecord {
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

fn checkpoint(version: u64, status: RunStatus, stop: Option<StopReason>) -> Checkpoint {
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

fn result(call_id: &str, data: serde_json::Value) -> ResultEnvelope {
    let mut r = ResultEnvelope::success(call_id, "read_file", data, Vec::new());
    r.observed_at = 1_700_000_000_000;
    r
}

fn ledger(call_id: &str, step: u64, position: u32, state: LedgerState) -> LedgerEntry {
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
    }
}

fn append(run_id: &str, first: u64, entries: Vec<SessionEntry>) -> Write {
    Write::AppendSession {
        run_id: run_id.into(),
        first,
        entries,
    }
}

fn user(text: &str) -> SessionEntry {
    SessionEntry::User { text: text.into() }
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path).unwrap()
}

fn count(store: &SqliteStore, sql: &str) -> i64 {
    store.conn().query_row(sql, [], |r| r.get(0)).unwrap()
}

mod fencing;
mod files;
mod processes;
mod rows;
mod service;
mod writes;
