//! The cluster's event log, `agentry.run_events`: every event of every run,
//! written by the node holding the run as the events come, and read by any
//! node for `GET /runs/{id}/events` (as SSE) and for AG-UI's stream of a
//! run another node holds (as `FedEvent` batches, `Cluster::events`).
//!
//! Events are numbered per run in the table, 1, 2, 3, ... with no gap,
//! whichever node wrote them: a run taken over goes on numbering after the
//! last event its earlier node wrote (so the work the new node redoes after
//! a crash shows again, under new numbers), and `Last-Event-ID` means the
//! same on every node. A node writes a run's events only while the run's
//! epoch is the one it started with: once another node took the run over,
//! what the old one still says is not written. A batch retried after a lost
//! connection is written once (its rows are keyed by epoch and the run's own
//! numbering too).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::StopReason;
use agentry::protocol::event::{EventRecord, RunEvent};
use agentry::store::{Database, Listener, Notice, StoreError};
use agentry_serve::{App, EventFeed, FedEvent, Forward};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::BoxStream;
use tokio::sync::Notify;

use super::node::{Node, blocking, now_ms};

const EVENTS_CHANNEL: &str = "agentry_events";
/// How often a stream looks for new events besides being woken.
const STREAM_POLL: Duration = Duration::from_millis(250);
/// Rows a stream reads at once.
const PAGE: i64 = 500;
/// How long after its run stopped a log without `run_stopped` is closed by
/// its readers: a node that died between committing the stop and writing the
/// event never writes it, and a live node's writer is far quicker than this.
const CLOSE_AFTER_MS: i64 = 10_000;
/// `run_seq` of the `run_stopped` a reader wrote to close such a log: no
/// writer's numbering uses it, and a writer refuses to write after it.
const CLOSED_BY_READER: i64 = -1;

/// The log's writer and readers on this node.
pub(super) struct Events {
    db: Arc<Database>,
    app: App,
    /// Woken on every `NOTIFY agentry_events` (and a reconnect).
    woken: Arc<Notify>,
    _listener: Listener,
}

impl Events {
    pub(super) fn start(node: &Node, app: App) -> Result<Events, StoreError> {
        let db = Arc::new(Database::connect(&node.url)?);
        let woken = Arc::new(Notify::new());
        let waking = Arc::clone(&woken);
        let listener = db.listen(EVENTS_CHANNEL, move |notice| match notice {
            Notice::Payload(_) | Notice::Reconnected => waking.notify_waiters(),
        })?;
        Ok(Events {
            db,
            app,
            woken,
            _listener: listener,
        })
    }

    /// Writes run `run_id`'s events as `feed` hands them on.
    pub(super) fn keep(&self, run_id: String, mut feed: EventFeed) {
        let db = Arc::clone(&self.db);
        tokio::spawn(async move {
            let mut epoch = None;
            while let Some(batch) = feed.next_batch().await {
                let mut tries = 0;
                loop {
                    match write(&db, &run_id, epoch, &batch).await {
                        Ok(Written::Under(at)) => epoch = Some(at),
                        Ok(Written::Refused) => return,
                        // The run's first commit is on its way: its events wait for it.
                        Ok(Written::NoRun) if tries < NO_RUN_TRIES => {
                            tries += 1;
                            tokio::time::sleep(NO_RUN_PAUSE).await;
                            continue;
                        }
                        Ok(Written::NoRun) => {
                            tracing::warn!(
                                run_id,
                                "the run is not in the store: its events were not kept"
                            );
                        }
                        Err(e) => {
                            tracing::warn!(run_id, error = %e, "the run's events were not kept")
                        }
                    }
                    break;
                }
            }
        });
    }

    /// `GET /runs/{id}/events` from the log: the events after `after`, then
    /// each as it is written, until `run_stopped`.
    pub(super) async fn stream(&self, forward: Forward, after: Option<u64>) -> Response {
        if !self.app.holds(&forward.run_id) {
            // Another tenant's run, or none: the 404 of a run that does not exist.
            let look = Forward {
                method: "GET".into(),
                ..forward.clone()
            };
            if let Some(answer) = self.app.answer_from_store(&look, true).await
                && answer.status != StatusCode::OK.as_u16()
            {
                return answer.into_response();
            }
        }
        let reader = self.reader(forward.run_id, after.unwrap_or(0));
        let events = futures::stream::unfold(reader, |mut reader| async move {
            let event = reader.next().await?;
            Some((Ok::<_, Infallible>(event), reader))
        });
        Sse::new(events)
            .keep_alive(KeepAlive::default())
            .into_response()
    }
}

impl Events {
    /// A reader of run `run_id`'s log, after event `after`.
    fn reader(&self, run_id: String, after: u64) -> Reader {
        Reader {
            db: Arc::clone(&self.db),
            woken: Arc::clone(&self.woken),
            run_id,
            last: i64::try_from(after).unwrap_or(i64::MAX),
            pending: Vec::new().into_iter(),
            done: false,
            quiet: 0,
        }
    }

    /// Run `run_id`'s events after `after`, in batches as they are written,
    /// until `run_stopped` (`Cluster::events`).
    pub(super) fn feed(&self, run_id: String, after: u64) -> BoxStream<'static, Vec<FedEvent>> {
        let reader = self.reader(run_id, after);
        Box::pin(futures::stream::unfold(reader, |mut reader| async move {
            let rows = reader.next_page().await?;
            let batch = rows
                .into_iter()
                .map(|row| FedEvent {
                    seq: u64::try_from(row.seq).unwrap_or(0),
                    last: row.kind == "run_stopped",
                    kind: row.kind,
                    data: row.data,
                })
                .collect();
            Some((batch, reader))
        }))
    }

    /// The number of run `run_id`'s last event in the log (0 for none).
    pub(super) async fn last(&self, run_id: String) -> Result<u64, StoreError> {
        blocking(&self.db, move |tx| {
            let last: i64 = tx
                .query_one(
                    "SELECT coalesce(max(seq), 0) FROM agentry.run_events WHERE run_id = $1",
                    &[&run_id],
                )?
                .get(0);
            Ok(u64::try_from(last).unwrap_or(0))
        })
        .await
    }
}

/// How long events wait for their run's first commit.
const NO_RUN_TRIES: u32 = 500;
const NO_RUN_PAUSE: Duration = Duration::from_millis(20);

/// What writing a batch did.
enum Written {
    /// The store does not hold the run (yet).
    NoRun,
    /// Written under this epoch of the run (this node's claim).
    Under(i64),
    /// The run is another node's now: nothing more of this node's is written.
    Refused,
}

async fn write(
    db: &Arc<Database>,
    run_id: &str,
    epoch: Option<i64>,
    batch: &[FedEvent],
) -> Result<Written, StoreError> {
    let run_id = run_id.to_string();
    let batch = batch.to_vec();
    blocking(db, move |tx| {
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&run_id])?;
        let current: Option<i64> = tx
            .query_opt(
                "SELECT epoch FROM agentry.runs WHERE run_id = $1",
                &[&run_id],
            )?
            .map(|row| row.get(0));
        let Some(current) = current else {
            return Ok(Written::NoRun);
        };
        if epoch.is_some_and(|mine| mine != current) {
            return Ok(Written::Refused);
        }
        let closed = tx
            .query_opt(
                "SELECT 1 FROM agentry.run_events WHERE run_id = $1 AND run_seq = $2",
                &[&run_id, &CLOSED_BY_READER],
            )?
            .is_some();
        if closed {
            return Ok(Written::Refused);
        }
        let mut next: i64 = tx
            .query_one(
                "SELECT coalesce(max(seq), 0) FROM agentry.run_events WHERE run_id = $1",
                &[&run_id],
            )?
            .get(0);
        for event in &batch {
            let run_seq = i64::try_from(event.seq).unwrap_or(i64::MAX);
            let data = renumbered(&event.data, next + 1);
            let inserted = tx.execute(
                "INSERT INTO agentry.run_events (run_id, seq, epoch, run_seq, kind, data, at_ms)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (run_id, epoch, run_seq) DO NOTHING",
                &[
                    &run_id,
                    &(next + 1),
                    &current,
                    &run_seq,
                    &event.kind,
                    &data,
                    &now_ms(),
                ],
            )?;
            next += i64::try_from(inserted).unwrap_or(0);
        }
        tx.execute("SELECT pg_notify($1, $2)", &[&EVENTS_CHANNEL, &run_id])?;
        Ok(Written::Under(current))
    })
    .await
}

/// The event's JSON with `seq` set to its number in the log.
fn renumbered(data: &str, seq: i64) -> String {
    match serde_json::from_str::<serde_json::Value>(data) {
        Ok(mut value) => {
            value["seq"] = serde_json::json!(seq);
            value.to_string()
        }
        Err(_) => data.to_string(),
    }
}

/// One client's place in the log.
struct Reader {
    db: Arc<Database>,
    woken: Arc<Notify>,
    run_id: String,
    last: i64,
    pending: std::vec::IntoIter<Row>,
    done: bool,
    /// Reads in a row that found nothing new while the run was stopped.
    quiet: u32,
}

struct Row {
    seq: i64,
    kind: String,
    data: String,
}

impl Reader {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(row) = self.pending.next() {
                return Some(
                    Event::default()
                        .event(&row.kind)
                        .id(row.seq.to_string())
                        .data(row.data),
                );
            }
            self.pending = self.next_page().await?.into_iter();
        }
    }

    /// The next events, up to `run_stopped`, waiting for one if none came;
    /// `None` once `run_stopped` was handed on (or the log cannot be read).
    async fn next_page(&mut self) -> Option<Vec<Row>> {
        loop {
            if self.done {
                return None;
            }
            // Registered before reading: a write between the read and the
            // wait still wakes this reader.
            let woken = Arc::clone(&self.woken);
            let notified = woken.notified();
            let (mut rows, stopped) = self.read().await.ok()?;
            if let Some(at) = rows.iter().position(|row| row.kind == "run_stopped") {
                rows.truncate(at + 1);
                self.done = true;
            }
            if let Some(last) = rows.last() {
                self.quiet = 0;
                self.last = last.seq;
                return Some(rows);
            }
            // A run stopped in the store whose log has no `run_stopped` yet:
            // its writer may still be on its way; once it is clearly not (its
            // node died between the two), the log is closed for every reader.
            if let Some(stop) = stopped {
                self.quiet += 1;
                if self.quiet > 2 && now_ms() - stop.updated_at_ms >= CLOSE_AFTER_MS {
                    if !self.close().await.ok()? {
                        return None;
                    }
                    self.quiet = 0;
                    continue;
                }
            }
            let _ = tokio::time::timeout(STREAM_POLL, notified).await;
        }
    }

    /// The next page of events, and the run's stop as the store has it.
    async fn read(&self) -> Result<(Vec<Row>, Option<StoppedRun>), StoreError> {
        let (run_id, last) = (self.run_id.clone(), self.last);
        blocking(&self.db, move |tx| {
            let rows = tx
                .query(
                    "SELECT seq, kind, data FROM agentry.run_events
                     WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                    &[&run_id, &last, &PAGE],
                )?
                .iter()
                .map(|row| Row {
                    seq: row.get(0),
                    kind: row.get(1),
                    data: row.get(2),
                })
                .collect();
            let stopped = tx
                .query_opt(
                    "SELECT updated_at_ms FROM agentry.runs
                     WHERE run_id = $1 AND status = 'stopped'",
                    &[&run_id],
                )?
                .map(|row| StoppedRun {
                    updated_at_ms: row.get(0),
                });
            Ok((rows, stopped))
        })
        .await
    }

    /// Writes the `run_stopped` the run's own node never wrote, from the
    /// stop reason in the store, numbered after the last event. False when
    /// the store has no reason to give (the stream then just ends).
    async fn close(&self) -> Result<bool, StoreError> {
        let run_id = self.run_id.clone();
        blocking(&self.db, move |tx| {
            tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&run_id])?;
            let Some(row) = tx.query_opt(
                "SELECT epoch, stop_reason FROM agentry.runs
                 WHERE run_id = $1 AND status = 'stopped'",
                &[&run_id],
            )?
            else {
                return Ok(false);
            };
            let epoch: i64 = row.get(0);
            let reason: Option<String> = row.get(1);
            let Some(stop_reason) = reason
                .and_then(|r| serde_json::from_value::<StopReason>(serde_json::json!(r)).ok())
            else {
                return Ok(false);
            };
            let written = tx
                .query_opt(
                    "SELECT 1 FROM agentry.run_events WHERE run_id = $1 AND kind = 'run_stopped'",
                    &[&run_id],
                )?
                .is_some();
            if written {
                return Ok(true);
            }
            let last: i64 = tx
                .query_one(
                    "SELECT coalesce(max(seq), 0) FROM agentry.run_events WHERE run_id = $1",
                    &[&run_id],
                )?
                .get(0);
            let record = EventRecord {
                run_id: run_id.as_str().into(),
                seq: u64::try_from(last + 1).unwrap_or(0),
                event: RunEvent::RunStopped { stop_reason },
            };
            let mut data = serde_json::to_value(&record).unwrap_or_default();
            data["at_ms"] = serde_json::json!(now_ms());
            tx.execute(
                "INSERT INTO agentry.run_events (run_id, seq, epoch, run_seq, kind, data, at_ms)
                 VALUES ($1, $2, $3, $4, 'run_stopped', $5, $6) ON CONFLICT DO NOTHING",
                &[
                    &run_id,
                    &(last + 1),
                    &epoch,
                    &CLOSED_BY_READER,
                    &data.to_string(),
                    &now_ms(),
                ],
            )?;
            tx.execute("SELECT pg_notify($1, $2)", &[&EVENTS_CHANNEL, &run_id])?;
            Ok(true)
        })
        .await
    }
}

/// A run the store has as stopped.
struct StoppedRun {
    /// When its stop was committed (Unix ms).
    updated_at_ms: i64,
}
