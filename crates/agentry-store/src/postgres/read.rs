//! Reading runs back ([`load`], [`runs`]) and what a service asks besides
//! ([`list`], [`stopped_before`], [`delete_run`]), with the SQLite store's
//! answers (`sqlite/read.rs`, `sqlite/service.rs`).

use std::collections::BTreeSet;

use agentry_protocol::state::SessionEntry;
use postgres::GenericClient;
use postgres::types::ToSql;

use super::conn::Statements;
use super::error::{Failure, classify};
use crate::rows::{BLOB_KEY, RawSummary, blob_refs, decode_inline, int, parse, uint, what};
use crate::{
    Checkpoint, InboxRecord, LedgerEntry, ListedRun, RunOwner, RunQuery, RunRecord, RunSummary,
    StatusFilter, StoredRun, TenantFilter, TimerRecord,
};

/// The columns [`summary`] reads, in its order.
const SUMMARY_COLUMNS: &str =
    "run_id, task_id, parent_id, status, stop_reason, version, created_at_ms, updated_at_ms";

/// Reads [`SUMMARY_COLUMNS`] (the row's first eight columns).
fn summary(row: &postgres::Row) -> RawSummary {
    RawSummary {
        run_id: row.get(0),
        task_id: row.get(1),
        parent_id: row.get(2),
        status: row.get(3),
        stop_reason: row.get(4),
        version: row.get(5),
        created: row.get(6),
        updated: row.get(7),
    }
}

/// A connection (or a transaction on it) with its prepared statements.
pub(super) struct Reader<'c, C> {
    pub(super) client: &'c mut C,
    pub(super) statements: &'c mut Statements,
    pub(super) path: &'c str,
}

impl<C: GenericClient> Reader<'_, C> {
    fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, Failure> {
        let path = self.path;
        let statement = self
            .statements
            .get(self.client, sql)
            .map_err(|e| classify(path, e))?;
        self.client
            .query(&statement, params)
            .map_err(|e| classify(path, e))
    }

    /// Everything about `run_id`, large outputs inlined again.
    pub(super) fn load(&mut self, run_id: &str) -> Result<Option<StoredRun>, Failure> {
        let rows = self.query(
            "SELECT task_id, parent_id, created_at_ms, deadline_at_ms, config, policy, checkpoint
             FROM agentry.runs WHERE run_id = $1",
            &[&run_id],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let path = self.path;
        let record = RunRecord {
            run_id: run_id.to_string(),
            task_id: row.get(0),
            parent_id: row.get(1),
            created_at_ms: uint(row.get(2)),
            deadline_at_ms: row.get::<_, Option<i64>>(3).map(uint),
            config: parse(path, &what("config", run_id), row.get(4))?,
            policy: row.get(5),
        };
        let checkpoint: Option<Checkpoint> = row
            .get::<_, Option<&str>>(6)
            .map(|c| parse(path, &what("checkpoint", run_id), c))
            .transpose()?;
        Ok(Some(StoredRun {
            record,
            checkpoint,
            session: self.session(run_id)?,
            ledger: self.ledger(run_id)?,
            timers: self.timers(run_id)?,
            inbox: self.inbox(run_id)?,
            owner: self.owner(run_id)?,
        }))
    }

    fn session(&mut self, run_id: &str) -> Result<Vec<SessionEntry>, Failure> {
        let rows = self.query(
            "SELECT entry FROM agentry.session WHERE run_id = $1 ORDER BY idx",
            &[&run_id],
        )?;
        let what = what("session", run_id);
        rows.iter()
            .map(|row| self.inline(&what, row.get(0), "result"))
            .collect()
    }

    fn ledger(&mut self, run_id: &str) -> Result<Vec<LedgerEntry>, Failure> {
        let rows = self.query(
            "SELECT row FROM agentry.ledger WHERE run_id = $1 ORDER BY step, position, call_id",
            &[&run_id],
        )?;
        let what = what("ledger", run_id);
        rows.iter()
            .map(|row| self.inline(&what, row.get(0), "outcome"))
            .collect()
    }

    fn timers(&mut self, run_id: &str) -> Result<Vec<TimerRecord>, Failure> {
        let rows = self.query(
            "SELECT timer_id, due_at_ms, name, payload FROM agentry.timers
             WHERE run_id = $1 ORDER BY due_at_ms, timer_id",
            &[&run_id],
        )?;
        let what = what("timers", run_id);
        rows.iter()
            .map(|row| {
                Ok(TimerRecord {
                    timer_id: row.get(0),
                    due_at_ms: uint(row.get(1)),
                    name: row.get(2),
                    payload: parse(self.path, &what, row.get(3))?,
                })
            })
            .collect()
    }

    fn inbox(&mut self, run_id: &str) -> Result<Vec<InboxRecord>, Failure> {
        let rows = self.query(
            "SELECT seq, input FROM agentry.inbox WHERE run_id = $1 ORDER BY seq",
            &[&run_id],
        )?;
        let what = what("inbox", run_id);
        rows.iter()
            .map(|row| {
                Ok(InboxRecord {
                    seq: uint(row.get(0)),
                    input: parse(self.path, &what, row.get(1))?,
                })
            })
            .collect()
    }

    fn owner(&mut self, run_id: &str) -> Result<Option<RunOwner>, Failure> {
        let rows = self.query(
            "SELECT o.token, o.host, o.machine, o.pid, o.pid_start, o.since_ms, o.heartbeat_ms,
                r.epoch
             FROM agentry.owners o JOIN agentry.runs r ON r.run_id = o.run_id
             WHERE o.run_id = $1",
            &[&run_id],
        )?;
        Ok(rows.first().map(|row| RunOwner {
            token: row.get(0),
            host: row.get(1),
            machine: row.get(2),
            pid: u32::try_from(row.get::<_, i64>(3)).unwrap_or(u32::MAX),
            pid_start: row.get::<_, Option<i64>>(4).map(uint),
            since_ms: uint(row.get(5)),
            heartbeat_ms: uint(row.get(6)),
            epoch: uint(row.get(7)),
        }))
    }

    /// Parses a row whose envelope may hold its data by reference.
    fn inline<T: serde::de::DeserializeOwned>(
        &mut self,
        what: &str,
        json: &str,
        key: &str,
    ) -> Result<T, Failure> {
        let path = self.path;
        decode_inline(path, what, json, key, |sha| {
            let rows = self.query("SELECT bytes FROM agentry.blobs WHERE sha256 = $1", &[&sha])?;
            Ok(rows.first().map(|row| row.get::<_, Vec<u8>>(0)))
        })
    }

    /// Every run, newest first.
    pub(super) fn runs(&mut self) -> Result<Vec<RunSummary>, Failure> {
        let rows = self.query(
            &format!(
                "SELECT {SUMMARY_COLUMNS} FROM agentry.runs ORDER BY created_at_ms DESC, run_id"
            ),
            &[],
        )?;
        let path = self.path;
        Ok(rows
            .iter()
            .map(|row| summary(row).parse(path))
            .collect::<Result<_, _>>()?)
    }

    /// One page of root runs, newest first, on `runs_by_tenant` (or
    /// `runs_by_tenant_agent`, `runs_by_root_created`).
    pub(super) fn list(&mut self, query: &RunQuery) -> Result<Vec<ListedRun>, Failure> {
        let mut sql =
            format!("SELECT {SUMMARY_COLUMNS}, policy FROM agentry.runs WHERE parent_id IS NULL");
        let mut args: Vec<Box<dyn ToSql + Sync>> = Vec::new();
        let mut arg = |sql: &mut String, text: &str, value: Box<dyn ToSql + Sync>| {
            args.push(value);
            sql.push_str(&text.replace('?', &format!("${}", args.len())));
        };
        match &query.tenant {
            TenantFilter::Any => {}
            TenantFilter::Of(None) => sql.push_str(" AND tenant IS NULL"),
            TenantFilter::Of(Some(tenant)) => {
                arg(&mut sql, " AND tenant = ?", Box::new(tenant.clone()));
            }
        }
        if let Some(agent) = &query.agent {
            arg(&mut sql, " AND agent = ?", Box::new(agent.clone()));
        }
        match query.status {
            None => {}
            Some(StatusFilter::Stopped) => sql.push_str(" AND status = 'stopped'"),
            Some(StatusFilter::Unfinished) => sql.push_str(" AND status <> 'stopped'"),
        }
        if let Some(after) = &query.after {
            arg(
                &mut sql,
                " AND (created_at_ms, run_id) < (?",
                Box::new(int(after.created_at_ms)),
            );
            arg(&mut sql, ", ?)", Box::new(after.run_id.clone()));
        }
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        arg(
            &mut sql,
            " ORDER BY created_at_ms DESC, run_id DESC LIMIT ?",
            Box::new(limit),
        );
        let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a.as_ref()).collect();
        let rows = self.query(&sql, &params)?;
        let path = self.path;
        rows.iter()
            .map(|row| {
                Ok(ListedRun {
                    summary: summary(row).parse(path)?,
                    policy: row.get(8),
                })
            })
            .collect()
    }

    /// Root runs stopped before `before_ms`, oldest first (`runs_by_stop`).
    pub(super) fn stopped_before(
        &mut self,
        before_ms: u64,
        limit: usize,
    ) -> Result<Vec<RunSummary>, Failure> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.query(
            &format!(
                "SELECT {SUMMARY_COLUMNS} FROM agentry.runs
                 WHERE parent_id IS NULL AND status = 'stopped' AND updated_at_ms < $1
                 ORDER BY updated_at_ms LIMIT $2"
            ),
            &[&int(before_ms), &limit],
        )?;
        let path = self.path;
        Ok(rows
            .iter()
            .map(|row| summary(row).parse(path))
            .collect::<Result<_, _>>()?)
    }

    /// Removes `run_id`'s tree (the caller's transaction): every row of every
    /// table, then the blobs no remaining row refers to. Returns the removed
    /// records, the root's first.
    pub(super) fn delete_run(&mut self, run_id: &str) -> Result<Vec<RunRecord>, Failure> {
        let ids: Vec<String> = self
            .query(
                "WITH RECURSIVE tree(id, depth) AS (
                     SELECT run_id, 0 FROM agentry.runs WHERE run_id = $1
                     UNION SELECT runs.run_id, tree.depth + 1 FROM agentry.runs
                         JOIN tree ON runs.parent_id = tree.id
                 ) SELECT id FROM tree ORDER BY depth",
                &[&run_id],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let mut records = Vec::with_capacity(ids.len());
        let mut blobs = BTreeSet::new();
        for id in &ids {
            if let Some(run) = self.load(id)? {
                records.push(run.record);
            }
            for query in [
                "SELECT entry FROM agentry.session WHERE run_id = $1 AND strpos(entry, $2) > 0",
                "SELECT row FROM agentry.ledger WHERE run_id = $1 AND strpos(row, $2) > 0",
            ] {
                for row in self.query(query, &[id, &BLOB_KEY])? {
                    blobs.extend(blob_refs(row.get(0)));
                }
            }
        }
        // Children before parents: `parent_id` names a run that must exist
        // until its children are gone.
        for id in ids.iter().rev() {
            for table in ["session", "ledger", "timers", "inbox", "owners", "runs"] {
                self.query(
                    &format!("DELETE FROM agentry.{table} WHERE run_id = $1"),
                    &[id],
                )?;
            }
        }
        for sha in blobs {
            let used = self.query(
                "SELECT 1 WHERE EXISTS (SELECT 1 FROM agentry.session WHERE strpos(entry, $1) > 0)
                    OR EXISTS (SELECT 1 FROM agentry.ledger WHERE strpos(row, $1) > 0)",
                &[&sha],
            )?;
            if used.is_empty() {
                self.query("DELETE FROM agentry.blobs WHERE sha256 = $1", &[&sha])?;
            }
        }
        Ok(records)
    }
}
