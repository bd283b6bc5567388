//! The schema (all of it in the Postgres schema `agentry`, so the store can
//! share a database with other programs) and its migrations.
//!
//! `MIGRATIONS[i]` moves a store from version `i` to `i + 1`, each in one
//! transaction together with the version bump, under an advisory lock: nodes
//! of a cluster starting at once apply each step exactly once.

use postgres::Client;

use super::error::{Failure, classify};
use crate::StoreError;

/// The version this build reads and writes. A database at a higher version
/// is refused ([`StoreError::NewerSchema`]), never modified.
pub const POSTGRES_SCHEMA_VERSION: u32 = 1;

/// The advisory lock key migrations hold ("agentry" in ASCII).
pub(super) const MIGRATION_LOCK: i64 = 0x0061_6765_6e74_7279;

/// Version 1: runs, session, call ledger, timers, inbox, owners, blobs, and
/// the ids of landed commits.
///
/// Like the SQLite store: JSON columns hold `serde_json` text; `status`,
/// `stop_reason` and `version` of `runs` mirror the checkpoint, and the
/// ledger's `step`, `position`, `tool`, `intent_key` and `state` mirror its
/// `row`. Unlike it, a service's `tenant` and `agent` are columns, taken
/// from the policy description when the run is created. `epoch` counts the
/// run's claims (the fencing token's generation).
const V1: &str = "
CREATE TABLE agentry.runs (
    run_id         TEXT PRIMARY KEY,
    task_id        TEXT NOT NULL,
    parent_id      TEXT,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    deadline_at_ms BIGINT,
    config         TEXT NOT NULL,
    policy         TEXT NOT NULL,
    tenant         TEXT,
    agent          TEXT,
    checkpoint     TEXT,
    status         TEXT NOT NULL,
    stop_reason    TEXT,
    version        BIGINT NOT NULL,
    epoch          BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX runs_by_created ON agentry.runs (created_at_ms DESC, run_id);
CREATE INDEX runs_by_root_created ON agentry.runs (created_at_ms DESC, run_id DESC)
    WHERE parent_id IS NULL;
CREATE INDEX runs_by_tenant ON agentry.runs (tenant, created_at_ms DESC, run_id DESC)
    WHERE parent_id IS NULL;
CREATE INDEX runs_by_tenant_agent ON agentry.runs (tenant, agent, created_at_ms DESC, run_id DESC)
    WHERE parent_id IS NULL;
CREATE INDEX runs_by_stop ON agentry.runs (status, updated_at_ms) WHERE parent_id IS NULL;
CREATE INDEX runs_by_parent ON agentry.runs (parent_id) WHERE parent_id IS NOT NULL;

CREATE TABLE agentry.session (
    run_id TEXT NOT NULL REFERENCES agentry.runs (run_id),
    idx    BIGINT NOT NULL,
    entry  TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);

CREATE TABLE agentry.ledger (
    run_id        TEXT NOT NULL REFERENCES agentry.runs (run_id),
    call_id       TEXT NOT NULL,
    step          BIGINT NOT NULL,
    position      BIGINT NOT NULL,
    tool          TEXT NOT NULL,
    intent_key    TEXT NOT NULL,
    state         TEXT NOT NULL,
    row           TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (run_id, call_id)
);
CREATE INDEX ledger_by_intent ON agentry.ledger (run_id, intent_key);

CREATE TABLE agentry.timers (
    run_id    TEXT NOT NULL REFERENCES agentry.runs (run_id),
    timer_id  TEXT NOT NULL,
    due_at_ms BIGINT NOT NULL,
    name      TEXT NOT NULL,
    payload   TEXT NOT NULL,
    PRIMARY KEY (run_id, timer_id)
);

CREATE TABLE agentry.inbox (
    run_id TEXT NOT NULL REFERENCES agentry.runs (run_id),
    seq    BIGINT NOT NULL,
    input  TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE agentry.owners (
    run_id       TEXT PRIMARY KEY REFERENCES agentry.runs (run_id),
    token        TEXT NOT NULL,
    host         TEXT NOT NULL,
    machine      TEXT NOT NULL,
    pid          BIGINT NOT NULL,
    pid_start    BIGINT,
    since_ms     BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL
);

CREATE TABLE agentry.blobs (
    sha256 TEXT PRIMARY KEY,
    bytes  BYTEA NOT NULL
);

CREATE TABLE agentry.commits (
    id    TEXT PRIMARY KEY,
    at_ms BIGINT NOT NULL
);
CREATE INDEX commits_by_age ON agentry.commits (at_ms);
";

/// Every migration of this build, oldest first.
pub(super) const MIGRATIONS: &[&str] = &[V1];

// The list and the declared version must move together.
const _: () = assert!(MIGRATIONS.len() == POSTGRES_SCHEMA_VERSION as usize);

/// Brings the database up to `migrations.len()`, one transaction per step.
pub(super) fn migrate(
    client: &mut Client,
    migrations: &[&str],
    location: &str,
) -> Result<(), Failure> {
    let sql = |e| classify(location, e);
    let target = u32::try_from(migrations.len()).unwrap_or(u32::MAX);
    loop {
        let mut tx = client.transaction().map_err(sql)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .map_err(sql)?;
        tx.batch_execute(
            "CREATE SCHEMA IF NOT EXISTS agentry;
             CREATE TABLE IF NOT EXISTS agentry.schema_version (
                 one     BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
                 version BIGINT NOT NULL
             );",
        )
        .map_err(sql)?;
        let current: i64 = tx
            .query_opt("SELECT version FROM agentry.schema_version", &[])
            .map_err(sql)?
            .map_or(0, |row| row.get(0));
        let current = u32::try_from(current).unwrap_or(u32::MAX);
        if current > target {
            return Err(Failure::Store(StoreError::NewerSchema {
                path: location.to_string(),
                found: current,
                supported: target,
            }));
        }
        let Some(step) = migrations.get(current as usize) else {
            return tx.commit().map_err(sql);
        };
        tx.batch_execute(step).map_err(sql)?;
        tx.execute(
            "INSERT INTO agentry.schema_version (version) VALUES ($1)
             ON CONFLICT (one) DO UPDATE SET version = excluded.version",
            &[&i64::from(current + 1)],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)?;
    }
}
