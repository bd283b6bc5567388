//! The schema and its migrations, keyed by `PRAGMA user_version`.
//!
//! `MIGRATIONS[i]` moves a store from version `i` to `i + 1`; each runs in its
//! own transaction together with the version bump, so a crash leaves the file
//! at one version or the next, never between. To change the schema, append an
//! entry and bump [`crate::SCHEMA_VERSION`].

use rusqlite::{Connection, TransactionBehavior};

/// The tenant a service keeps in a run's policy description (NULL for a
/// description that is not JSON, e.g. `script:/abs/path`).
macro_rules! tenant_expr {
    () => {
        "json_extract(CASE WHEN json_valid(policy) THEN policy END, '$.serve.tenant')"
    };
}

/// The named agent a service keeps in a run's policy description.
macro_rules! agent_expr {
    () => {
        "json_extract(CASE WHEN json_valid(policy) THEN policy END, '$.serve.agent')"
    };
}

pub(super) use {agent_expr, tenant_expr};

use super::error::sql_error;
use crate::{SCHEMA_VERSION, StoreError};

/// Version 1: runs, session, call ledger, timers, content-addressed blobs.
///
/// JSON columns hold `serde_json` text. `status`, `stop_reason` and `version`
/// of `runs` mirror the checkpoint so listing runs parses no checkpoint; the
/// ledger's `step`, `position`, `tool`, `intent_key` and `state` mirror its
/// `row` for ordering and lookups.
const V1: &str = "
CREATE TABLE runs (
    run_id         TEXT PRIMARY KEY NOT NULL,
    task_id        TEXT NOT NULL,
    parent_id      TEXT,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    deadline_at_ms INTEGER,
    config         TEXT NOT NULL,
    policy         TEXT NOT NULL,
    checkpoint     TEXT,
    status         TEXT NOT NULL,
    stop_reason    TEXT,
    version        INTEGER NOT NULL
);
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, run_id);

CREATE TABLE session (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    idx    INTEGER NOT NULL,
    entry  TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE ledger (
    run_id        TEXT NOT NULL REFERENCES runs (run_id),
    call_id       TEXT NOT NULL,
    step          INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    tool          TEXT NOT NULL,
    intent_key    TEXT NOT NULL,
    state         TEXT NOT NULL,
    row           TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, call_id)
);
CREATE INDEX ledger_by_intent ON ledger (run_id, intent_key);

CREATE TABLE timers (
    run_id    TEXT NOT NULL REFERENCES runs (run_id),
    timer_id  TEXT NOT NULL,
    due_at_ms INTEGER NOT NULL,
    name      TEXT NOT NULL,
    payload   TEXT NOT NULL,
    PRIMARY KEY (run_id, timer_id)
);

CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY NOT NULL,
    bytes  BLOB NOT NULL
);
";

/// Every migration of this build, oldest first.
/// Version 2: the run's inbox (inputs accepted but not yet applied).
const V2: &str = "
CREATE TABLE inbox (
    run_id TEXT NOT NULL REFERENCES runs (run_id),
    seq    INTEGER NOT NULL,
    input  TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
";

/// Version 3: who runs a run right now (one owner per run, with a heartbeat).
const V3: &str = "
CREATE TABLE owners (
    run_id       TEXT PRIMARY KEY NOT NULL REFERENCES runs (run_id),
    token        TEXT NOT NULL,
    host         TEXT NOT NULL,
    machine      TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    pid_start    INTEGER,
    since_ms     INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL
);
";

/// Version 4: listing a service's runs by tenant and agent, newest first
/// (expression indexes on the policy description's `serve` object, the
/// expressions exactly those of `service.rs`'s queries: SQLite uses an
/// expression index only for the same expression), finding the runs a
/// retention period has passed, and a run's children for deleting a tree.
const V4: &str = concat!(
    "CREATE INDEX runs_by_tenant ON runs (",
    tenant_expr!(),
    ", created_at_ms DESC, run_id DESC) WHERE parent_id IS NULL;
CREATE INDEX runs_by_tenant_agent ON runs (",
    tenant_expr!(),
    ", ",
    agent_expr!(),
    ", created_at_ms DESC, run_id DESC) WHERE parent_id IS NULL;
CREATE INDEX runs_by_root_created ON runs (created_at_ms DESC, run_id DESC) WHERE parent_id IS NULL;
CREATE INDEX runs_by_stop ON runs (status, updated_at_ms) WHERE parent_id IS NULL;
CREATE INDEX runs_by_parent ON runs (parent_id) WHERE parent_id IS NOT NULL;
"
);

/// Version 5: the run's fencing epoch, raised by every claim and kept when
/// the owner row goes (a release), so it only grows. A run that had an owner
/// then was claimed at least once: it starts at 1.
const V5: &str = "
ALTER TABLE runs ADD COLUMN owner_epoch INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET owner_epoch = 1 WHERE run_id IN (SELECT run_id FROM owners);
";

pub(super) const MIGRATIONS: &[&str] = &[V1, V2, V3, V4, V5];

// The list and the declared version must move together.
const _: () = assert!(MIGRATIONS.len() == SCHEMA_VERSION as usize);

/// `PRAGMA user_version`.
pub(super) fn user_version(conn: &Connection) -> rusqlite::Result<u32> {
    let v: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    // user_version is a signed 32-bit field; a negative one is from no agentry
    // and counts as "newer" (refused untouched).
    Ok(u32::try_from(v).unwrap_or(u32::MAX))
}

/// Brings the store up to `migrations.len()`, one transaction per step.
/// Refuses ([`StoreError::NewerSchema`]) a store past the end of the list.
pub(super) fn migrate(
    conn: &mut Connection,
    migrations: &[&str],
    path: &str,
) -> Result<(), StoreError> {
    let sql = |e| sql_error(path, e);
    let target = u32::try_from(migrations.len()).unwrap_or(u32::MAX);
    loop {
        // IMMEDIATE and the version read inside it: two processes opening the
        // same file at once cannot both apply a step.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let current = user_version(&tx).map_err(sql)?;
        if current > target {
            return Err(StoreError::NewerSchema {
                path: path.to_string(),
                found: current,
                supported: target,
            });
        }
        let Some(step) = migrations.get(current as usize) else {
            return tx.commit().map_err(sql);
        };
        tx.execute_batch(step).map_err(sql)?;
        tx.pragma_update(None, "user_version", current + 1)
            .map_err(sql)?;
        tx.commit().map_err(sql)?;
    }
}
