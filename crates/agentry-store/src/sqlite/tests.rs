//! Tests of what only the SQLite store has: `files` (opening, damage,
//! limits, migrations), `rows` (any damaged value reads back or is
//! `Corrupt`) and `service` (its query plans). What every backend must do is
//! in `crate::suite`.

use std::path::{Path, PathBuf};

use agentry_protocol::state::{RunStatus, SessionEntry};
use agentry_protocol::stop::StopReason;
use agentry_protocol::tool::ToolCall;
use serde_json::json;

use super::*;
pub(crate) use crate::suite::{append, checkpoint, ledger, record, result, user};
use crate::{INLINE_LIMIT, LedgerState, TimerRecord};

fn db_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("store.db")
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path).unwrap()
}

mod files;
mod rows;
mod service;
