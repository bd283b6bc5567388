//! Applying a batch of [`Write`]s inside the caller's transaction.

use std::collections::HashSet;

use agentry_protocol::state::{RunStatus, SessionEntry};
use rusqlite::{OptionalExtension, Transaction, params};

use super::error::{is_foreign_key, is_primary_key, sql_error};
use crate::rows::{Step, encode_by_reference, encode_error, int, plan, status_name};
use crate::{Checkpoint, LedgerEntry, RunOwner, RunRecord, StoreError, TimerRecord, Write};

/// One batch: `writes` in order, in `tx`. The caller commits or drops `tx`.
pub(super) fn apply(tx: &Transaction<'_>, path: &str, writes: &[Write]) -> Result<(), StoreError> {
    let mut batch = Batch {
        tx,
        path,
        now: int(agentry_protocol::now_millis()),
        touched: HashSet::new(),
    };
    for (w, step) in writes.iter().zip(plan(writes)) {
        match step {
            Step::Apply => batch.apply(w)?,
            Step::CheckRun(run_id) => batch.touch(run_id)?,
        }
    }
    Ok(())
}

/// Who holds a run right now, as [`Batch::fence`] reads it (no owner: the
/// owner columns are NULL).
struct Holder {
    token: Option<String>,
    host: Option<String>,
    pid: Option<u32>,
    epoch: i64,
}

struct Batch<'a, 't> {
    tx: &'a Transaction<'t>,
    path: &'a str,
    now: i64,
    /// Runs already known to exist and stamped with `now` in this batch.
    touched: HashSet<&'a str>,
}

impl<'a> Batch<'a, '_> {
    fn sql(&self, e: rusqlite::Error) -> StoreError {
        sql_error(self.path, e)
    }

    /// A statement error of a write for `run_id`: a missing run shows as a
    /// foreign-key failure.
    fn write_error(&self, run_id: &str, e: rusqlite::Error) -> StoreError {
        if is_foreign_key(&e) {
            self.no_run(run_id)
        } else {
            self.sql(e)
        }
    }

    fn no_run(&self, run_id: &str) -> StoreError {
        StoreError::NoRun {
            path: self.path.to_string(),
            run_id: run_id.to_string(),
        }
    }

    fn apply(&mut self, w: &'a Write) -> Result<(), StoreError> {
        // Size: one arm per `Write` variant, each a call or two.
        match w {
            Write::CreateRun(record) => self.create_run(record),
            Write::Checkpoint { run_id, checkpoint } => {
                self.touch(run_id)?;
                self.checkpoint(run_id, checkpoint)
            }
            Write::AppendSession {
                run_id,
                first,
                entries,
            } => {
                self.touch(run_id)?;
                self.append_session(run_id, *first, entries)
            }
            Write::Ledger { run_id, entry } => {
                self.touch(run_id)?;
                self.ledger(run_id, entry)
            }
            Write::LedgerProcess {
                run_id,
                call_id,
                group,
            } => self.ledger_process(run_id, call_id, group),
            Write::LedgerRemote {
                run_id,
                call_id,
                remote,
            } => self.ledger_remote(run_id, call_id, remote),
            Write::SetTimer { run_id, timer } => {
                self.touch(run_id)?;
                self.set_timer(run_id, timer)
            }
            Write::ClearTimer { run_id, timer_id } => {
                // Clearing a timer of an unknown run removes nothing: not an error.
                self.tx
                    .prepare_cached("DELETE FROM timers WHERE run_id = ?1 AND timer_id = ?2")
                    .and_then(|mut s| s.execute(params![run_id, timer_id]))
                    .map_err(|e| self.sql(e))?;
                Ok(())
            }
            Write::Enqueue { run_id, seq, input } => {
                self.touch(run_id)?;
                self.enqueue(run_id, *seq, input)
            }
            Write::Dequeue { run_id, seq } => {
                self.tx
                    .prepare_cached("DELETE FROM inbox WHERE run_id = ?1 AND seq = ?2")
                    .and_then(|mut s| s.execute(params![run_id, int(*seq)]))
                    .map_err(|e| self.sql(e))?;
                Ok(())
            }
            Write::Claim {
                run_id,
                owner,
                replaces,
            } => self.claim(run_id, owner, replaces.as_deref()),
            Write::Heartbeat {
                run_id,
                token,
                at_ms,
            } => self.heartbeat(run_id, token, *at_ms),
            Write::Release { run_id, token } => {
                self.tx
                    .prepare_cached("DELETE FROM owners WHERE run_id = ?1 AND token = ?2")
                    .and_then(|mut s| s.execute(params![run_id, token]))
                    .map_err(|e| self.sql(e))?;
                Ok(())
            }
            Write::Fence { run_id, token } => self.fence(run_id, token),
        }
    }

    /// Refreshes the owner's heartbeat; [`StoreError::Fenced`] when `token`
    /// no longer owns an existing run.
    fn heartbeat(&self, run_id: &str, token: &str, at_ms: u64) -> Result<(), StoreError> {
        let changed = self
            .tx
            .prepare_cached("UPDATE owners SET heartbeat_ms = ?3 WHERE run_id = ?1 AND token = ?2")
            .and_then(|mut s| s.execute(params![run_id, token, int(at_ms)]))
            .map_err(|e| self.sql(e))?;
        if changed > 0 {
            return Ok(());
        }
        // Not the owner any more: say so, unless there is no run at all.
        match self.fence(run_id, token) {
            Err(StoreError::NoRun { .. }) => Ok(()),
            other => other,
        }
    }

    /// Passes only while `token` owns `run_id`: else [`StoreError::Fenced`]
    /// naming the run's epoch and owner now ([`StoreError::NoRun`] for no run).
    fn fence(&self, run_id: &str, token: &str) -> Result<(), StoreError> {
        // The common case first, on the owners table alone: every batch of a
        // run pays for it.
        let holds = self
            .tx
            .prepare_cached("SELECT 1 FROM owners WHERE run_id = ?1 AND token = ?2")
            .and_then(|mut s| s.exists(params![run_id, token]))
            .map_err(|e| self.sql(e))?;
        if holds {
            return Ok(());
        }
        let row = self
            .tx
            .prepare_cached(
                "SELECT o.token, o.host, o.pid, r.owner_epoch
                 FROM runs r LEFT JOIN owners o ON o.run_id = r.run_id WHERE r.run_id = ?1",
            )
            .and_then(|mut s| {
                s.query_row([run_id], |r| {
                    Ok(Holder {
                        token: r.get(0)?,
                        host: r.get(1)?,
                        pid: r.get(2)?,
                        epoch: r.get(3)?,
                    })
                })
                .optional()
            })
            .map_err(|e| self.sql(e))?;
        let Some(holder) = row else {
            return Err(self.no_run(run_id));
        };
        if holder.token.as_deref() == Some(token) {
            return Ok(());
        }
        Err(StoreError::Fenced {
            path: self.path.to_string(),
            run_id: run_id.to_string(),
            epoch: holder.epoch as u64,
            owner: holder
                .host
                .zip(holder.pid)
                .map(|(host, pid)| format!("process {pid} on host {host}")),
        })
    }

    /// Compare-and-set of the run's owner: only if its token is still `replaces`.
    fn claim(
        &mut self,
        run_id: &'a str,
        owner: &RunOwner,
        replaces: Option<&str>,
    ) -> Result<(), StoreError> {
        self.touch(run_id)?;
        let current: Option<String> = self
            .tx
            .prepare_cached("SELECT token FROM owners WHERE run_id = ?1")
            .and_then(|mut s| s.query_row([run_id], |r| r.get(0)).optional())
            .map_err(|e| self.sql(e))?;
        if current.as_deref() != replaces {
            return Err(StoreError::Claimed {
                path: self.path.to_string(),
                run_id: run_id.to_string(),
            });
        }
        // The fencing token: one more than any owner of this run had.
        self.tx
            .prepare_cached("UPDATE runs SET owner_epoch = owner_epoch + 1 WHERE run_id = ?1")
            .and_then(|mut s| s.execute([run_id]))
            .map_err(|e| self.sql(e))?;
        self.tx
            .prepare_cached(
                "INSERT INTO owners (run_id, token, host, machine, pid, pid_start, since_ms,
                    heartbeat_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT (run_id) DO UPDATE SET
                    token = excluded.token, host = excluded.host, machine = excluded.machine,
                    pid = excluded.pid, pid_start = excluded.pid_start,
                    since_ms = excluded.since_ms, heartbeat_ms = excluded.heartbeat_ms",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    owner.token,
                    owner.host,
                    owner.machine,
                    owner.pid,
                    owner.pid_start.map(int),
                    int(owner.since_ms),
                    int(owner.heartbeat_ms),
                ])
            })
            .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    /// Checks that `run_id` exists and stamps its `updated_at_ms`, once per
    /// run and batch (a group commit touches many runs, each several times).
    fn touch(&mut self, run_id: &'a str) -> Result<(), StoreError> {
        if self.touched.contains(run_id) {
            return Ok(());
        }
        let changed = self
            .tx
            .prepare_cached("UPDATE runs SET updated_at_ms = ?2 WHERE run_id = ?1")
            .and_then(|mut s| s.execute(params![run_id, self.now]))
            .map_err(|e| self.sql(e))?;
        if changed == 0 {
            return Err(self.no_run(run_id));
        }
        self.touched.insert(run_id);
        Ok(())
    }

    fn create_run(&mut self, r: &'a RunRecord) -> Result<(), StoreError> {
        let config = serde_json::to_string(&r.config)
            .map_err(|e| encode_error(self.path, "a run's config", e))?;
        let running = status_name(RunStatus::Running, self.path)?;
        self.tx
            .prepare_cached(
                "INSERT INTO runs (run_id, task_id, parent_id, created_at_ms, updated_at_ms,
                    deadline_at_ms, config, policy, checkpoint, status, stop_reason, version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, ?9, NULL, 0)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    r.run_id,
                    r.task_id,
                    r.parent_id,
                    int(r.created_at_ms),
                    self.now,
                    r.deadline_at_ms.map(int),
                    config,
                    r.policy,
                    running,
                ])
            })
            .map_err(|e| {
                if is_primary_key(&e) {
                    StoreError::Conflict {
                        path: self.path.to_string(),
                        run_id: r.run_id.clone(),
                    }
                } else {
                    self.sql(e)
                }
            })?;
        self.touched.insert(&r.run_id);
        Ok(())
    }

    fn checkpoint(&self, run_id: &str, c: &Checkpoint) -> Result<(), StoreError> {
        let json =
            serde_json::to_string(c).map_err(|e| encode_error(self.path, "a checkpoint", e))?;
        let status = status_name(c.snapshot.status, self.path)?;
        let stop_reason = c.snapshot.control.stop_reason.map(|r| r.as_str());
        let changed = self
            .tx
            .prepare_cached(
                "UPDATE runs SET checkpoint = ?2, status = ?3, stop_reason = ?4, version = ?5
                 WHERE run_id = ?1",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    json,
                    status,
                    stop_reason,
                    int(c.snapshot.version)
                ])
            })
            .map_err(|e| self.sql(e))?;
        if changed == 0 {
            return Err(self.no_run(run_id));
        }
        Ok(())
    }

    fn append_session(
        &self,
        run_id: &str,
        first: u64,
        entries: &[SessionEntry],
    ) -> Result<(), StoreError> {
        let mut stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO session (run_id, idx, entry) VALUES (?1, ?2, ?3)
                 ON CONFLICT (run_id, idx) DO UPDATE SET entry = excluded.entry",
            )
            .map_err(|e| self.sql(e))?;
        for (i, entry) in (first..).zip(entries) {
            let json = match entry {
                SessionEntry::Tool { result } if result.data.is_some() => {
                    self.by_reference(entry, "result")?
                }
                SessionEntry::Tool { .. }
                | SessionEntry::User { .. }
                | SessionEntry::Assistant { .. }
                | SessionEntry::Event { .. }
                | SessionEntry::Note { .. } => serde_json::to_string(entry)
                    .map_err(|e| encode_error(self.path, "a session entry", e))?,
            };
            stmt.execute(params![run_id, int(i), json])
                .map_err(|e| self.write_error(run_id, e))?;
        }
        Ok(())
    }

    fn ledger(&self, run_id: &str, entry: &LedgerEntry) -> Result<(), StoreError> {
        let row = if entry.outcome.as_ref().is_some_and(|o| o.data.is_some()) {
            self.by_reference(entry, "outcome")?
        } else {
            serde_json::to_string(entry).map_err(|e| encode_error(self.path, "a ledger row", e))?
        };
        self.tx
            .prepare_cached(
                "INSERT INTO ledger (run_id, call_id, step, position, tool, intent_key, state,
                    row, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT (run_id, call_id) DO UPDATE SET
                    step = excluded.step, position = excluded.position, tool = excluded.tool,
                    intent_key = excluded.intent_key, state = excluded.state,
                    row = excluded.row, updated_at_ms = excluded.updated_at_ms",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    entry.call_id,
                    int(entry.step),
                    entry.position,
                    entry.call.name,
                    entry.intent_key,
                    entry.state.as_str(),
                    row,
                    int(entry.updated_at_ms),
                ])
            })
            .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn enqueue(&self, run_id: &str, seq: u64, input: &serde_json::Value) -> Result<(), StoreError> {
        let input = serde_json::to_string(input)
            .map_err(|e| encode_error(self.path, "an inbox input", e))?;
        self.tx
            .prepare_cached(
                "INSERT INTO inbox (run_id, seq, input) VALUES (?1, ?2, ?3)
                 ON CONFLICT (run_id, seq) DO UPDATE SET input = excluded.input",
            )
            .and_then(|mut s| s.execute(params![run_id, int(seq), input]))
            .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn ledger_process(
        &self,
        run_id: &str,
        call_id: &str,
        group: &agentry_protocol::ProcessGroupRecord,
    ) -> Result<(), StoreError> {
        let group = serde_json::to_string(group)
            .map_err(|e| encode_error(self.path, "a process group", e))?;
        // Appended in place: the row is not read back and rewritten.
        self.tx
            .prepare_cached(
                "UPDATE ledger SET row = json_set(row, '$.processes',
                    json_insert(coalesce(json_extract(row, '$.processes'), json('[]')),
                                '$[#]', json(?3)))
                 WHERE run_id = ?1 AND call_id = ?2",
            )
            .and_then(|mut s| s.execute(params![run_id, call_id, group]))
            .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn ledger_remote(
        &self,
        run_id: &str,
        call_id: &str,
        remote: &agentry_protocol::RemoteRef,
    ) -> Result<(), StoreError> {
        let remote = serde_json::to_string(remote)
            .map_err(|e| encode_error(self.path, "a remote task", e))?;
        self.tx
            .prepare_cached(
                "UPDATE ledger SET row = json_set(row, '$.remote', json(?3))
                 WHERE run_id = ?1 AND call_id = ?2",
            )
            .and_then(|mut s| s.execute(params![run_id, call_id, remote]))
            .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn set_timer(&self, run_id: &str, t: &TimerRecord) -> Result<(), StoreError> {
        let payload = serde_json::to_string(&t.payload)
            .map_err(|e| encode_error(self.path, "a timer payload", e))?;
        self.tx
            .prepare_cached(
                "INSERT INTO timers (run_id, timer_id, due_at_ms, name, payload)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (run_id, timer_id) DO UPDATE SET
                    due_at_ms = excluded.due_at_ms, name = excluded.name,
                    payload = excluded.payload",
            )
            .and_then(|mut s| {
                s.execute(params![
                    run_id,
                    t.timer_id,
                    int(t.due_at_ms),
                    t.name,
                    payload
                ])
            })
            .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    /// Serializes `row`, its envelope's large `data` stored once in `blobs`.
    fn by_reference(&self, row: &impl serde::Serialize, key: &str) -> Result<String, StoreError> {
        encode_by_reference(self.path, row, key, |sha, bytes| self.put_blob(sha, bytes))
    }

    fn put_blob(&self, sha: &str, bytes: &[u8]) -> Result<(), StoreError> {
        // Skip binding megabytes when this batch (or an earlier one) already
        // stored the same content, e.g. the session and the ledger row of one call.
        let present = self
            .tx
            .prepare_cached("SELECT 1 FROM blobs WHERE sha256 = ?1")
            .and_then(|mut s| s.query_row([sha], |_| Ok(())).optional())
            .map_err(|e| self.sql(e))?;
        if present.is_none() {
            self.tx
                .prepare_cached("INSERT OR IGNORE INTO blobs (sha256, bytes) VALUES (?1, ?2)")
                .and_then(|mut s| s.execute(params![sha, bytes]))
                .map_err(|e| self.sql(e))?;
        }
        Ok(())
    }
}
