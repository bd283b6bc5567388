//! Reading runs back: [`load`] and [`runs`].

use agentry_protocol::state::SessionEntry;
use rusqlite::{Connection, OptionalExtension};
use serde::de::DeserializeOwned;

use super::error::sql_error;
use crate::rows::{RawSummary, decode_inline, parse, uint, what};
use crate::{
    Checkpoint, InboxRecord, LedgerEntry, RunOwner, RunRecord, RunSummary, StoreError, StoredRun,
    TimerRecord,
};

/// Everything about `run_id`, large outputs inlined again.
pub(super) fn load(
    conn: &Connection,
    path: &str,
    run_id: &str,
) -> Result<Option<StoredRun>, StoreError> {
    let Some(RunRow { record, checkpoint }) = run_row(conn, path, run_id)? else {
        return Ok(None);
    };
    Ok(Some(StoredRun {
        record,
        checkpoint,
        session: session(conn, path, run_id)?,
        ledger: ledger(conn, path, run_id)?,
        timers: timers(conn, path, run_id)?,
        inbox: inbox(conn, path, run_id)?,
        owner: owner(conn, path, run_id)?,
    }))
}

/// The run's own row: its record and its latest checkpoint.
struct RunRow {
    record: RunRecord,
    checkpoint: Option<Checkpoint>,
}

/// The `runs` row of `run_id`, or `None` when there is no such run.
fn run_row(conn: &Connection, path: &str, run_id: &str) -> Result<Option<RunRow>, StoreError> {
    let row = conn
        .prepare_cached(
            "SELECT task_id, parent_id, created_at_ms, deadline_at_ms, config, policy, checkpoint
             FROM runs WHERE run_id = ?1",
        )
        .and_then(|mut s| {
            s.query_row([run_id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, Option<String>>(6)?,
                ))
            })
            .optional()
        })
        .map_err(|e| sql_error(path, e))?;
    let Some((task_id, parent_id, created_at_ms, deadline_at_ms, config, policy, checkpoint)) = row
    else {
        return Ok(None);
    };
    let record = RunRecord {
        run_id: run_id.to_string(),
        task_id,
        parent_id,
        created_at_ms: uint(created_at_ms),
        deadline_at_ms: deadline_at_ms.map(uint),
        config: parse(path, &what("config", run_id), &config)?,
        policy,
    };
    let checkpoint = checkpoint
        .map(|c| parse(path, &what("checkpoint", run_id), &c))
        .transpose()?;
    Ok(Some(RunRow { record, checkpoint }))
}

/// The run's session entries, in order.
fn session(conn: &Connection, path: &str, run_id: &str) -> Result<Vec<SessionEntry>, StoreError> {
    texts(
        conn,
        path,
        "SELECT entry FROM session WHERE run_id = ?1 ORDER BY idx",
        run_id,
    )?
    .iter()
    .map(|json| inline(conn, path, &what("session", run_id), json, "result"))
    .collect()
}

/// The run's ledger rows, by step, position and call.
fn ledger(conn: &Connection, path: &str, run_id: &str) -> Result<Vec<LedgerEntry>, StoreError> {
    texts(
        conn,
        path,
        "SELECT row FROM ledger WHERE run_id = ?1 ORDER BY step, position, call_id",
        run_id,
    )?
    .iter()
    .map(|json| inline(conn, path, &what("ledger", run_id), json, "outcome"))
    .collect()
}

/// The run's pending timers, soonest first.
fn timers(conn: &Connection, path: &str, run_id: &str) -> Result<Vec<TimerRecord>, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT timer_id, due_at_ms, name, payload FROM timers
             WHERE run_id = ?1 ORDER BY due_at_ms, timer_id",
        )
        .map_err(sql)?;
    let rows = stmt
        .query_map([run_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })
        .map_err(sql)?;
    let mut timers = Vec::new();
    for row in rows {
        let (timer_id, due_at_ms, name, payload) = row.map_err(sql)?;
        timers.push(TimerRecord {
            timer_id,
            due_at_ms: uint(due_at_ms),
            name,
            payload: parse(path, &what("timers", run_id), &payload)?,
        });
    }
    Ok(timers)
}

/// The run's inbox: inputs accepted but not applied yet, by sequence number.
fn inbox(conn: &Connection, path: &str, run_id: &str) -> Result<Vec<InboxRecord>, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut stmt = conn
        .prepare_cached("SELECT seq, input FROM inbox WHERE run_id = ?1 ORDER BY seq")
        .map_err(sql)?;
    let rows = stmt
        .query_map([run_id], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })
        .map_err(sql)?;
    let mut inbox = Vec::new();
    for row in rows {
        let (seq, input) = row.map_err(sql)?;
        inbox.push(InboxRecord {
            seq: uint(seq),
            input: parse(path, &what("inbox", run_id), &input)?,
        });
    }
    Ok(inbox)
}

/// The run's owner row, if it has one.
fn owner(conn: &Connection, path: &str, run_id: &str) -> Result<Option<RunOwner>, StoreError> {
    conn.prepare_cached(
        "SELECT o.token, o.host, o.machine, o.pid, o.pid_start, o.since_ms, o.heartbeat_ms,
            r.owner_epoch
         FROM owners o JOIN runs r ON r.run_id = o.run_id WHERE o.run_id = ?1",
    )
    .and_then(|mut s| {
        s.query_row([run_id], |r| {
            Ok(RunOwner {
                token: r.get(0)?,
                host: r.get(1)?,
                machine: r.get(2)?,
                pid: r.get(3)?,
                pid_start: r.get::<_, Option<i64>>(4)?.map(uint),
                since_ms: uint(r.get(5)?),
                heartbeat_ms: uint(r.get(6)?),
                epoch: uint(r.get(7)?),
            })
        })
        .optional()
    })
    .map_err(|e| sql_error(path, e))
}

/// The columns [`run_summary`] reads, in its order.
pub(super) const RUN_SUMMARY_COLUMNS: &str =
    "run_id, task_id, parent_id, status, stop_reason, version, created_at_ms, updated_at_ms";

/// Reads [`RUN_SUMMARY_COLUMNS`] (the row's first eight columns).
pub(super) fn run_summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawSummary> {
    Ok(RawSummary {
        run_id: r.get(0)?,
        task_id: r.get(1)?,
        parent_id: r.get(2)?,
        status: r.get(3)?,
        stop_reason: r.get(4)?,
        version: r.get(5)?,
        created: r.get(6)?,
        updated: r.get(7)?,
    })
}

/// Every run, newest first.
pub(super) fn runs(conn: &Connection, path: &str) -> Result<Vec<RunSummary>, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {RUN_SUMMARY_COLUMNS} FROM runs ORDER BY created_at_ms DESC, run_id"
        ))
        .map_err(sql)?;
    let rows = stmt.query_map([], run_summary).map_err(sql)?;
    let mut out = Vec::new();
    for row in rows {
        out.push(row.map_err(sql)?.parse(path)?);
    }
    Ok(out)
}

/// The single text column of every row of `query` (bound to `run_id`).
fn texts(
    conn: &Connection,
    path: &str,
    query: &str,
    run_id: &str,
) -> Result<Vec<String>, StoreError> {
    let sql = |e| sql_error(path, e);
    let mut stmt = conn.prepare_cached(query).map_err(sql)?;
    let rows = stmt
        .query_map([run_id], |r| r.get::<_, String>(0))
        .map_err(sql)?;
    rows.collect::<Result<_, _>>().map_err(sql)
}

/// Parses a row whose envelope (object under `key`) may hold its `data` by
/// reference, putting the data back.
fn inline<T: DeserializeOwned>(
    conn: &Connection,
    path: &str,
    what: &str,
    json: &str,
    key: &str,
) -> Result<T, StoreError> {
    decode_inline(path, what, json, key, |sha| {
        conn.prepare_cached("SELECT bytes FROM blobs WHERE sha256 = ?1")
            .and_then(|mut s| s.query_row([sha], |r| r.get(0)).optional())
            .map_err(|e| sql_error(path, e))
    })
}
