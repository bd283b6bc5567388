//! What a service asks of the store besides running its runs: a page of one
//! tenant's runs ([`list`], on schema 4's expression indexes), the runs a
//! retention period has passed ([`stopped_before`]), and removing a run's
//! tree, every table's rows, in the caller's transaction ([`delete_run`]).

use std::collections::BTreeSet;

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, Transaction, params_from_iter};

use super::error::sql_error;
use super::read::{RUN_SUMMARY_COLUMNS, run_summary};
use super::schema::{agent_expr, tenant_expr};
use crate::rows::{BLOB_KEY, blob_refs, int};
use crate::{ListedRun, RunQuery, RunRecord, RunSummary, StatusFilter, StoreError, TenantFilter};

/// One page of root runs, newest first. The tenant and agent are compared
/// with the expressions of the indexes, so SQLite walks `runs_by_tenant`
/// (or `runs_by_tenant_agent`) in order and stops after `limit` rows.
pub(super) fn list(
    conn: &Connection,
    path: &str,
    query: &RunQuery,
) -> Result<Vec<ListedRun>, StoreError> {
    let mut sql = format!("SELECT {RUN_SUMMARY_COLUMNS}, policy FROM runs WHERE parent_id IS NULL");
    let mut args: Vec<Sql> = Vec::new();
    if let TenantFilter::Of(tenant) = &query.tenant {
        sql.push_str(concat!(" AND ", tenant_expr!(), " IS ?"));
        args.push(tenant.clone().map_or(Sql::Null, Sql::Text));
    }
    if let Some(agent) = &query.agent {
        sql.push_str(concat!(" AND ", agent_expr!(), " = ?"));
        args.push(Sql::Text(agent.clone()));
    }
    match query.status {
        None => {}
        Some(StatusFilter::Stopped) => sql.push_str(" AND status = 'stopped'"),
        Some(StatusFilter::Unfinished) => sql.push_str(" AND status <> 'stopped'"),
    }
    if let Some(after) = &query.after {
        sql.push_str(" AND (created_at_ms, run_id) < (?, ?)");
        args.push(Sql::Integer(int(after.created_at_ms)));
        args.push(Sql::Text(after.run_id.clone()));
    }
    sql.push_str(" ORDER BY created_at_ms DESC, run_id DESC LIMIT ?");
    args.push(Sql::Integer(i64::try_from(query.limit).unwrap_or(i64::MAX)));
    let fail = |e| sql_error(path, e);
    let mut stmt = conn.prepare_cached(&sql).map_err(fail)?;
    let rows = stmt
        .query_map(params_from_iter(args), |r| {
            Ok((run_summary(r)?, r.get::<_, String>(8)?))
        })
        .map_err(fail)?;
    let mut page = Vec::new();
    for row in rows {
        let (raw, policy) = row.map_err(fail)?;
        page.push(ListedRun {
            summary: raw.parse(path)?,
            policy,
        });
    }
    Ok(page)
}

/// Root runs stopped before `before_ms`, oldest first (`runs_by_stop`).
pub(super) fn stopped_before(
    conn: &Connection,
    path: &str,
    before_ms: u64,
    limit: usize,
) -> Result<Vec<RunSummary>, StoreError> {
    let fail = |e| sql_error(path, e);
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {RUN_SUMMARY_COLUMNS} FROM runs
             WHERE parent_id IS NULL AND status = 'stopped' AND updated_at_ms < ?1
             ORDER BY updated_at_ms LIMIT ?2"
        ))
        .map_err(fail)?;
    let rows = stmt
        .query_map(
            [int(before_ms), i64::try_from(limit).unwrap_or(i64::MAX)],
            run_summary,
        )
        .map_err(fail)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(fail)?.parse(path)?);
    }
    Ok(out)
}

/// The tables holding a run's rows, besides `runs` itself.
const RUN_TABLES: &[&str] = &["session", "ledger", "timers", "inbox", "owners"];

/// Removes `run_id`'s tree in `tx`: every row of every table, then the blobs
/// no remaining row refers to. Returns the removed records, the root's first.
pub(super) fn delete_run(
    tx: &Transaction<'_>,
    path: &str,
    run_id: &str,
) -> Result<Vec<RunRecord>, StoreError> {
    let fail = |e| sql_error(path, e);
    let ids: Vec<String> = {
        let mut stmt = tx
            .prepare_cached(
                "WITH RECURSIVE tree(id, depth) AS (
                     SELECT run_id, 0 FROM runs WHERE run_id = ?1
                     UNION SELECT runs.run_id, tree.depth + 1 FROM runs
                         JOIN tree ON runs.parent_id = tree.id
                 ) SELECT id FROM tree ORDER BY depth",
            )
            .map_err(fail)?;
        let rows = stmt.query_map([run_id], |r| r.get(0)).map_err(fail)?;
        rows.collect::<Result<_, _>>().map_err(fail)?
    };
    let mut records = Vec::with_capacity(ids.len());
    let mut blobs = BTreeSet::new();
    for id in &ids {
        if let Some(run) = super::read::load(tx, path, id)? {
            records.push(run.record);
        }
        blobs.extend(referenced_blobs(tx, path, id)?);
    }
    // Children before parents: `parent_id` names a run that must still exist
    // until its children are gone (foreign keys are on).
    for id in ids.iter().rev() {
        for table in RUN_TABLES {
            tx.prepare_cached(&format!("DELETE FROM {table} WHERE run_id = ?1"))
                .and_then(|mut s| s.execute([id]))
                .map_err(fail)?;
        }
        tx.prepare_cached("DELETE FROM runs WHERE run_id = ?1")
            .and_then(|mut s| s.execute([id]))
            .map_err(fail)?;
    }
    for sha in blobs {
        if !still_referenced(tx, path, &sha)? {
            tx.prepare_cached("DELETE FROM blobs WHERE sha256 = ?1")
                .and_then(|mut s| s.execute([&sha]))
                .map_err(fail)?;
        }
    }
    Ok(records)
}

/// The blobs `run_id`'s session and ledger rows refer to.
fn referenced_blobs(
    conn: &Connection,
    path: &str,
    run_id: &str,
) -> Result<Vec<String>, StoreError> {
    let fail = |e| sql_error(path, e);
    let mut shas = Vec::new();
    for query in [
        "SELECT entry FROM session WHERE run_id = ?1 AND instr(entry, ?2) > 0",
        "SELECT row FROM ledger WHERE run_id = ?1 AND instr(row, ?2) > 0",
    ] {
        let mut stmt = conn.prepare_cached(query).map_err(fail)?;
        let texts = stmt
            .query_map([run_id, BLOB_KEY], |r| r.get::<_, String>(0))
            .map_err(fail)?;
        for text in texts {
            shas.extend(blob_refs(&text.map_err(fail)?));
        }
    }
    Ok(shas)
}

/// Whether any session or ledger row still names blob `sha` (another run
/// stored the same content). Scans only when a removed run held a blob.
fn still_referenced(conn: &Connection, path: &str, sha: &str) -> Result<bool, StoreError> {
    let fail = |e| sql_error(path, e);
    for query in [
        "SELECT 1 FROM session WHERE instr(entry, ?1) > 0 LIMIT 1",
        "SELECT 1 FROM ledger WHERE instr(row, ?1) > 0 LIMIT 1",
    ] {
        let found = conn
            .prepare_cached(query)
            .and_then(|mut s| s.exists([sha]))
            .map_err(fail)?;
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}
