//! Applying a batch of [`Write`]s inside the caller's transaction, with the
//! SQLite store's semantics (`sqlite/write.rs`): the same rows, the same
//! errors for the same mistakes.

use std::collections::HashSet;

use agentry_protocol::state::{RunStatus, SessionEntry};
use postgres::Transaction;
use postgres::types::ToSql;

use super::conn::Statements;
use super::error::{Failure, classify, is_foreign_key, is_unique};
use crate::rows::{Step, encode_by_reference, encode_error, int, plan, status_name};
use crate::{Checkpoint, LedgerEntry, RunOwner, RunRecord, StoreError, TimerRecord, Write};

type Params<'p> = [&'p (dyn ToSql + Sync)];

/// One batch: `writes` in order, in `tx`. The caller commits or drops `tx`.
pub(super) fn apply(
    tx: &mut Transaction<'_>,
    statements: &mut Statements,
    path: &str,
    writes: &[Write],
) -> Result<(), Failure> {
    let mut batch = Batch {
        tx,
        statements,
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

struct Batch<'a, 'b, 't> {
    tx: &'b mut Transaction<'t>,
    statements: &'b mut Statements,
    path: &'a str,
    now: i64,
    /// Runs already known to exist and stamped with `now` in this batch.
    touched: HashSet<&'a str>,
}

impl<'a> Batch<'a, '_, '_> {
    /// Runs `sql` (prepared once per connection); the rows it changed.
    fn exec(&mut self, sql: &str, params: &Params<'_>) -> Result<u64, postgres::Error> {
        let statement = self.statements.get(self.tx, sql)?;
        self.tx.execute(&statement, params)
    }

    fn fail(&self, e: postgres::Error) -> Failure {
        classify(self.path, e)
    }

    /// A statement error of a write for `run_id`: a missing run shows as a
    /// foreign-key failure.
    fn write_error(&self, run_id: &str, e: postgres::Error) -> Failure {
        if is_foreign_key(&e) {
            Failure::Store(self.no_run(run_id))
        } else {
            self.fail(e)
        }
    }

    fn no_run(&self, run_id: &str) -> StoreError {
        StoreError::NoRun {
            path: self.path.to_string(),
            run_id: run_id.to_string(),
        }
    }

    fn apply(&mut self, w: &'a Write) -> Result<(), Failure> {
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
                self.exec(
                    "DELETE FROM agentry.timers WHERE run_id = $1 AND timer_id = $2",
                    &[run_id, timer_id],
                )
                .map_err(|e| self.fail(e))?;
                Ok(())
            }
            Write::Enqueue { run_id, seq, input } => {
                self.touch(run_id)?;
                let input = serde_json::to_string(input)
                    .map_err(|e| encode_error(self.path, "an input", e))?;
                self.exec(
                    "INSERT INTO agentry.inbox (run_id, seq, input) VALUES ($1, $2, $3)
                     ON CONFLICT (run_id, seq) DO UPDATE SET input = excluded.input",
                    &[run_id, &int(*seq), &input],
                )
                .map_err(|e| self.write_error(run_id, e))?;
                Ok(())
            }
            Write::Dequeue { run_id, seq } => {
                self.exec(
                    "DELETE FROM agentry.inbox WHERE run_id = $1 AND seq = $2",
                    &[run_id, &int(*seq)],
                )
                .map_err(|e| self.fail(e))?;
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
                self.exec(
                    "DELETE FROM agentry.owners WHERE run_id = $1 AND token = $2",
                    &[run_id, token],
                )
                .map_err(|e| self.fail(e))?;
                Ok(())
            }
            Write::Fence { run_id, token } => self.fence(run_id, token),
        }
    }

    /// Refreshes the owner's heartbeat; [`StoreError::Fenced`] when `token`
    /// no longer owns an existing run.
    fn heartbeat(&mut self, run_id: &str, token: &str, at_ms: u64) -> Result<(), Failure> {
        let changed = self
            .exec(
                "UPDATE agentry.owners SET heartbeat_ms = $3 WHERE run_id = $1 AND token = $2",
                &[&run_id, &token, &int(at_ms)],
            )
            .map_err(|e| self.fail(e))?;
        if changed > 0 {
            return Ok(());
        }
        // Not the owner any more: say so, unless there is no run at all.
        match self.fence(run_id, token) {
            Err(Failure::Store(StoreError::NoRun { .. })) => Ok(()),
            other => other,
        }
    }

    /// Passes only while `token` owns `run_id`: else [`StoreError::Fenced`]
    /// naming the run's epoch and owner now ([`StoreError::NoRun`] for no
    /// run). The owner row is share-locked until the batch commits, so a
    /// take-over by another node waits for this batch and lands after it,
    /// never between the check and the writes.
    fn fence(&mut self, run_id: &str, token: &str) -> Result<(), Failure> {
        let holds = self
            .statements
            .get(
                self.tx,
                "SELECT 1 FROM agentry.owners WHERE run_id = $1 AND token = $2 FOR SHARE",
            )
            .and_then(|statement| self.tx.query(&statement, &[&run_id, &token]))
            .map_err(|e| self.fail(e))?;
        if !holds.is_empty() {
            return Ok(());
        }
        let holder = self
            .statements
            .get(
                self.tx,
                "SELECT o.token, o.host, o.pid, r.epoch
                 FROM agentry.runs r LEFT JOIN agentry.owners o ON o.run_id = r.run_id
                 WHERE r.run_id = $1",
            )
            .and_then(|statement| self.tx.query(&statement, &[&run_id]))
            .map_err(|e| self.fail(e))?;
        let Some(holder) = holder.first() else {
            return Err(Failure::Store(self.no_run(run_id)));
        };
        let owner: Option<String> = holder.get(0);
        if owner.as_deref() == Some(token) {
            return Ok(());
        }
        let host: Option<String> = holder.get(1);
        let pid: Option<i64> = holder.get(2);
        Err(Failure::Store(StoreError::Fenced {
            path: self.path.to_string(),
            run_id: run_id.to_string(),
            epoch: crate::rows::uint(holder.get(3)),
            owner: host
                .zip(pid)
                .map(|(host, pid)| format!("process {pid} on host {host}")),
        }))
    }

    /// Compare-and-set of the run's owner: only if its token is still
    /// `replaces`. Two nodes claiming at once: the row lock (or, for a run
    /// with no owner, the primary key) lets exactly one of them through.
    fn claim(
        &mut self,
        run_id: &'a str,
        owner: &RunOwner,
        replaces: Option<&str>,
    ) -> Result<(), Failure> {
        self.touch(run_id)?;
        let pid = i64::from(owner.pid);
        let pid_start = owner.pid_start.map(int);
        let since = int(owner.since_ms);
        let beat = int(owner.heartbeat_ms);
        let changed = match replaces {
            None => self.exec(
                "INSERT INTO agentry.owners (run_id, token, host, machine, pid, pid_start,
                    since_ms, heartbeat_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (run_id) DO NOTHING",
                &[
                    &run_id,
                    &owner.token,
                    &owner.host,
                    &owner.machine,
                    &pid,
                    &pid_start,
                    &since,
                    &beat,
                ],
            ),
            Some(previous) => self.exec(
                "UPDATE agentry.owners SET token = $2, host = $3, machine = $4, pid = $5,
                    pid_start = $6, since_ms = $7, heartbeat_ms = $8
                 WHERE run_id = $1 AND token = $9",
                &[
                    &run_id,
                    &owner.token,
                    &owner.host,
                    &owner.machine,
                    &pid,
                    &pid_start,
                    &since,
                    &beat,
                    &previous,
                ],
            ),
        }
        .map_err(|e| self.write_error(run_id, e))?;
        if changed != 1 {
            return Err(Failure::Store(StoreError::Claimed {
                path: self.path.to_string(),
                run_id: run_id.to_string(),
            }));
        }
        self.exec(
            "UPDATE agentry.runs SET epoch = epoch + 1 WHERE run_id = $1",
            &[&run_id],
        )
        .map_err(|e| self.fail(e))?;
        Ok(())
    }

    /// Checks that `run_id` exists and stamps its `updated_at_ms`, once per
    /// run and batch (a group commit touches many runs, each several times).
    fn touch(&mut self, run_id: &'a str) -> Result<(), Failure> {
        if self.touched.contains(run_id) {
            return Ok(());
        }
        let now = self.now;
        let changed = self
            .exec(
                "UPDATE agentry.runs SET updated_at_ms = $2 WHERE run_id = $1",
                &[&run_id, &now],
            )
            .map_err(|e| self.fail(e))?;
        if changed == 0 {
            return Err(Failure::Store(self.no_run(run_id)));
        }
        self.touched.insert(run_id);
        Ok(())
    }

    fn create_run(&mut self, r: &'a RunRecord) -> Result<(), Failure> {
        let config = serde_json::to_string(&r.config)
            .map_err(|e| encode_error(self.path, "a run's config", e))?;
        let running = status_name(RunStatus::Running, self.path)?;
        let tenant = crate::query::serve_field(&r.policy, "tenant");
        let agent = crate::query::serve_field(&r.policy, "agent");
        let now = self.now;
        self.exec(
            "INSERT INTO agentry.runs (run_id, task_id, parent_id, created_at_ms, updated_at_ms,
                deadline_at_ms, config, policy, tenant, agent, checkpoint, status, stop_reason,
                version)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL, $11, NULL, 0)",
            &[
                &r.run_id,
                &r.task_id,
                &r.parent_id,
                &int(r.created_at_ms),
                &now,
                &r.deadline_at_ms.map(int),
                &config,
                &r.policy,
                &tenant,
                &agent,
                &running,
            ],
        )
        .map_err(|e| {
            if is_unique(&e) {
                Failure::Store(StoreError::Conflict {
                    path: self.path.to_string(),
                    run_id: r.run_id.clone(),
                })
            } else {
                self.fail(e)
            }
        })?;
        self.touched.insert(&r.run_id);
        Ok(())
    }

    fn checkpoint(&mut self, run_id: &str, c: &Checkpoint) -> Result<(), Failure> {
        let json =
            serde_json::to_string(c).map_err(|e| encode_error(self.path, "a checkpoint", e))?;
        let status = status_name(c.snapshot.status, self.path)?;
        let stop_reason = c.snapshot.control.stop_reason.map(|r| r.as_str());
        let changed = self
            .exec(
                "UPDATE agentry.runs SET checkpoint = $2, status = $3, stop_reason = $4,
                    version = $5
                 WHERE run_id = $1",
                &[
                    &run_id,
                    &json,
                    &status,
                    &stop_reason,
                    &int(c.snapshot.version),
                ],
            )
            .map_err(|e| self.fail(e))?;
        if changed == 0 {
            return Err(Failure::Store(self.no_run(run_id)));
        }
        Ok(())
    }

    fn append_session(
        &mut self,
        run_id: &str,
        first: u64,
        entries: &[SessionEntry],
    ) -> Result<(), Failure> {
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
            self.exec(
                "INSERT INTO agentry.session (run_id, idx, entry) VALUES ($1, $2, $3)
                 ON CONFLICT (run_id, idx) DO UPDATE SET entry = excluded.entry",
                &[&run_id, &int(i), &json],
            )
            .map_err(|e| self.write_error(run_id, e))?;
        }
        Ok(())
    }

    fn ledger(&mut self, run_id: &str, entry: &LedgerEntry) -> Result<(), Failure> {
        let row = if entry.outcome.as_ref().is_some_and(|o| o.data.is_some()) {
            self.by_reference(entry, "outcome")?
        } else {
            serde_json::to_string(entry).map_err(|e| encode_error(self.path, "a ledger row", e))?
        };
        self.exec(
            "INSERT INTO agentry.ledger (run_id, call_id, step, position, tool, intent_key,
                state, row, updated_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
             ON CONFLICT (run_id, call_id) DO UPDATE SET
                step = excluded.step, position = excluded.position, tool = excluded.tool,
                intent_key = excluded.intent_key, state = excluded.state,
                row = excluded.row, updated_at_ms = excluded.updated_at_ms",
            &[
                &run_id,
                &entry.call_id,
                &int(entry.step),
                &i64::from(entry.position),
                &entry.call.name,
                &entry.intent_key,
                &entry.state.as_str(),
                &row,
                &int(entry.updated_at_ms),
            ],
        )
        .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn ledger_process(
        &mut self,
        run_id: &str,
        call_id: &str,
        group: &agentry_protocol::ProcessGroupRecord,
    ) -> Result<(), Failure> {
        let group = serde_json::to_string(group)
            .map_err(|e| encode_error(self.path, "a process group", e))?;
        // Appended in place: the row is not read back and rewritten.
        self.exec(
            "UPDATE agentry.ledger SET row = jsonb_set(row::jsonb, '{processes}',
                coalesce(row::jsonb -> 'processes', '[]'::jsonb)
                    || jsonb_build_array(($3::text)::jsonb))::text
             WHERE run_id = $1 AND call_id = $2",
            &[&run_id, &call_id, &group],
        )
        .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn ledger_remote(
        &mut self,
        run_id: &str,
        call_id: &str,
        remote: &agentry_protocol::RemoteRef,
    ) -> Result<(), Failure> {
        let remote = serde_json::to_string(remote)
            .map_err(|e| encode_error(self.path, "a remote task", e))?;
        self.exec(
            "UPDATE agentry.ledger SET row = jsonb_set(row::jsonb, '{remote}',
                ($3::text)::jsonb)::text
             WHERE run_id = $1 AND call_id = $2",
            &[&run_id, &call_id, &remote],
        )
        .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    fn set_timer(&mut self, run_id: &str, t: &TimerRecord) -> Result<(), Failure> {
        let payload = serde_json::to_string(&t.payload)
            .map_err(|e| encode_error(self.path, "a timer payload", e))?;
        self.exec(
            "INSERT INTO agentry.timers (run_id, timer_id, due_at_ms, name, payload)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (run_id, timer_id) DO UPDATE SET
                due_at_ms = excluded.due_at_ms, name = excluded.name,
                payload = excluded.payload",
            &[&run_id, &t.timer_id, &int(t.due_at_ms), &t.name, &payload],
        )
        .map_err(|e| self.write_error(run_id, e))?;
        Ok(())
    }

    /// Serializes `row`, its envelope's large `data` stored once in `blobs`.
    fn by_reference(&mut self, row: &impl serde::Serialize, key: &str) -> Result<String, Failure> {
        let path = self.path;
        encode_by_reference(path, row, key, |sha, bytes| {
            self.exec(
                "INSERT INTO agentry.blobs (sha256, bytes) VALUES ($1, $2)
                 ON CONFLICT (sha256) DO NOTHING",
                &[&sha, &bytes],
            )
            .map(drop)
            .map_err(|e| classify(path, e))
        })
    }
}
