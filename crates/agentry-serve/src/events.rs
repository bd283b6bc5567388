//! A per-run replay buffer of events, and the Server-Sent Events stream read from it.
//!
//! `RunHandle::subscribe` hands the whole history only to its first caller; later
//! subscribers see events from the moment they subscribe. An HTTP client may
//! connect at any time, so the service subscribes once, when it creates the run,
//! and copies every event into an [`EventLog`]. SSE clients read the log from the
//! start and then follow it. They never read a broadcast channel themselves, so a
//! slow client cannot lag and lose events: it just reads the log later.
//!
//! The log is bounded in events and in bytes, so a run whose tool results are
//! large (a file read a thousand times) does not keep them all: the oldest events
//! go first. When the run stops the log shrinks to a smaller bound, because a
//! stopped run is kept for as long as the service keeps it, and many are.
//! Events are kept as the JSON they are sent as: serialized once, not once per
//! client, and their size is exactly what they cost.
//!
//! A client that reconnects says where it was (`Last-Event-ID`, or `?after=N`
//! for one that cannot set headers): it reads the log from the event after
//! that one, so it sees each event once. The log numbers events as the run
//! does, and the run's numbering goes on across hibernation, so this holds
//! across one too. It also goes on across a restart: a durable run's
//! checkpoints record it and the resumed run numbers on past a margin
//! (`agentry::runtime::RESUMED_EVENT_GAP`), so a client naming an event from
//! before the restart gets every event of the new process's log (events the
//! old one emitted after its last commit are gone; their work is redone under
//! new numbers). If the log no longer holds the events right after it, the
//! stream opens with a comment saying which ones the client missed (after a
//! restart, the margin's unused numbers among them).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use agentry::RunHandle;
use agentry::protocol::event::{EventRecord, RunEvent};
use axum::http::HeaderMap;
use axum::response::sse::Event;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use tokio::sync::{broadcast, watch};

use super::error::ApiError;
use super::streams::StreamSlot;

/// The header an SSE client sends on reconnecting: the `id` of the last event it saw.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";

/// The query parameter that says the same, for clients that cannot set headers.
pub const AFTER_PARAM: &str = "after";

/// Events kept per run, whatever their size.
pub const REPLAY_LIMIT: usize = 10_000;

/// What a kept event costs beyond its JSON (the record, the deque slot).
const EVENT_OVERHEAD: usize = 64;

/// How much of a run's history is kept for late clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayLimits {
    /// Bytes kept while the run is live.
    pub live_bytes: usize,
    /// Bytes kept once it stopped.
    pub stopped_bytes: usize,
}

/// One event as sent: its type, sequence number and JSON.
#[derive(Debug)]
struct Logged {
    seq: u64,
    kind: String,
    data: String,
    /// `run_stopped`: the stream ends after it.
    last: bool,
}

impl Logged {
    fn new(record: &EventRecord) -> Logged {
        let mut data = serde_json::to_value(record).unwrap_or_default();
        // When the service logged it (Unix ms): a client's time axis (the
        // console's timeline). Stamped here, not by the runtime, so a run's
        // own path pays nothing for it.
        data["at_ms"] = serde_json::json!(agentry::protocol::now_millis());
        let kind = data["event"]["type"]
            .as_str()
            .unwrap_or("event")
            .to_string();
        Logged {
            seq: record.seq,
            kind,
            data: data.to_string(),
            last: matches!(record.event, RunEvent::RunStopped { .. }),
        }
    }

    fn size(&self) -> usize {
        self.data.len() + self.kind.len() + EVENT_OVERHEAD
    }

    /// `event: <type>`, `id: <seq>`, `data: <the EventRecord as JSON>`.
    fn sse(&self) -> Event {
        Event::default()
            .event(&self.kind)
            .id(self.seq.to_string())
            .data(&self.data)
    }
}

/// The run's most recent events, within [`ReplayLimits`], in sequence order.
#[derive(Debug)]
pub struct EventLog {
    state: Mutex<LogState>,
    limits: ReplayLimits,
    /// Bumped after every change to `state`; readers wait on it.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct LogState {
    events: VecDeque<Arc<Logged>>,
    /// What the kept events cost, by [`Logged::size`].
    bytes: usize,
    /// No more events will come: the run stopped (or its event source closed).
    closed: bool,
}

impl LogState {
    fn close(&mut self, bytes: usize) {
        self.closed = true;
        self.shrink_to(bytes, REPLAY_LIMIT);
    }

    /// Drops the oldest events until the log fits `bytes` and `events`.
    /// `run_stopped` is always kept: it is what tells a reader the stream is over.
    fn shrink_to(&mut self, bytes: usize, events: usize) {
        while self.bytes > bytes || self.events.len() > events {
            let Some(oldest) = self.events.front() else {
                break;
            };
            if oldest.last {
                break;
            }
            self.bytes -= oldest.size();
            self.events.pop_front();
        }
    }
}

impl EventLog {
    /// An empty log.
    pub fn new(limits: ReplayLimits) -> Arc<EventLog> {
        Arc::new(EventLog {
            state: Mutex::new(LogState::default()),
            limits,
            changed: watch::Sender::new(0),
        })
    }

    /// Appends an event; `run_stopped` also closes the log, in the same step,
    /// so a reader that saw the stop finds the log already shrunk.
    fn push(&self, record: &EventRecord) {
        let logged = Logged::new(record);
        let last = logged.last;
        self.update(|state| {
            // Closed by a drain (`ops.rs`): what a run let go of says after
            // that (its cancellation) is not its story, and is not told.
            if state.closed {
                return;
            }
            // Room is made first, so the newest event is always there for the
            // clients following the run, even one larger than the whole bound.
            state.shrink_to(
                self.limits.live_bytes.saturating_sub(logged.size()),
                REPLAY_LIMIT - 1,
            );
            state.bytes += logged.size();
            state.events.push_back(Arc::new(logged));
            if last {
                state.close(self.limits.stopped_bytes);
            }
        });
    }

    /// No more events: the log shrinks to what a stopped run keeps, and its
    /// streams end after what it holds.
    pub(super) fn close(&self) {
        self.update(|state| state.close(self.limits.stopped_bytes));
    }

    fn update(&self, change: impl FnOnce(&mut LogState)) {
        // A poisoned lock means a panic mid-push; the deque is still a valid
        // (if possibly one event short) log, so keep serving it.
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.send_modify(|n| *n += 1);
    }

    /// Events with a sequence number above `after`, and whether the log is closed.
    fn since(&self, after: u64) -> (Vec<Arc<Logged>>, bool) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let start = state.events.partition_point(|r| r.seq <= after);
        (state.events.range(start..).cloned().collect(), state.closed)
    }

    /// The log as SSE events, from the first kept event after `after` (from
    /// the first kept event without it); the stream ends after `run_stopped`
    /// (or when the log closes without one), or when `slot` is ended to make
    /// room for a newer stream (`streams.rs`). A resumed stream opens with a
    /// comment (see [`resume_note`]).
    pub fn stream(
        self: Arc<Self>,
        slot: StreamSlot,
        after: Option<u64>,
    ) -> impl Stream<Item = Result<Event, Infallible>> {
        let changes = self.changed.subscribe();
        let last_seq = after.unwrap_or(0);
        // Read once here, so the note and the first events agree.
        let (held, _) = self.since(last_seq);
        let note = after.map(|after| resume_note(after, held.first().map(|r| r.seq)));
        let reader = Reader {
            changes,
            log: self,
            last_seq,
            pending: held.into(),
            done: false,
            slot,
        };
        let note = futures::stream::iter(note.map(|n| Ok(Event::default().comment(n))));
        let events = futures::stream::unfold(reader, |mut reader| async move {
            let record = reader.next().await?;
            Some((Ok(record.sse()), reader))
        });
        futures::StreamExt::chain(note, events)
    }
}

/// The comment a resumed stream opens with: where it resumes, and which
/// events the log no longer held (`first` is the first it holds after `after`).
fn resume_note(after: u64, first: Option<u64>) -> String {
    match first {
        Some(first) if first > after.saturating_add(1) => format!(
            "resuming after event {after}; events {} to {} are no longer held",
            after + 1,
            first - 1
        ),
        Some(_) | None => format!("resuming after event {after}"),
    }
}

/// One event as a [`EventFeed`] hands it on: its number in the run's
/// numbering, its type and its JSON (the `EventRecord`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FedEvent {
    /// The run's sequence number.
    pub seq: u64,
    /// The event's type (`run_stopped`, `step_started`, ...).
    pub kind: String,
    /// The `EventRecord` as JSON.
    pub data: String,
    /// `run_stopped`: nothing comes after it.
    pub last: bool,
}

/// A run's events as a reader takes them (this node's log, or the events a cluster keeps), from the first.
pub(crate) enum Feed {
    Here(EventFeed),
    Kept(BoxStream<'static, Vec<FedEvent>>),
}

impl Feed {
    /// The events that came since the last call, waiting for one if none
    /// did; `None` once there will be no more.
    pub(crate) async fn next_batch(&mut self) -> Option<Vec<FedEvent>> {
        match self {
            Feed::Here(feed) => feed.next_batch().await,
            Feed::Kept(events) => events.next().await,
        }
    }
}

/// A run's events as they enter its log, in order, for a store of events
/// elsewhere (a cluster's). It reads the log as an SSE client does, so it
/// loses nothing unless it falls behind the log's bound.
#[derive(Debug)]
pub struct EventFeed {
    log: Arc<EventLog>,
    changes: watch::Receiver<u64>,
    last_seq: u64,
}

impl EventFeed {
    pub(super) fn new(log: Arc<EventLog>) -> EventFeed {
        EventFeed {
            changes: log.changed.subscribe(),
            log,
            last_seq: 0,
        }
    }

    /// The events that came since the last call, waiting for one if none
    /// did; `None` once the log is closed and every event was handed on.
    pub async fn next_batch(&mut self) -> Option<Vec<FedEvent>> {
        loop {
            self.changes.borrow_and_update();
            let (fresh, closed) = self.log.since(self.last_seq);
            if let Some(last) = fresh.last() {
                self.last_seq = last.seq;
                let batch = fresh
                    .iter()
                    .map(|e| FedEvent {
                        seq: e.seq,
                        kind: e.kind.clone(),
                        data: e.data.clone(),
                        last: e.last,
                    })
                    .collect();
                return Some(batch);
            }
            if closed || self.changes.changed().await.is_err() {
                return None;
            }
        }
    }
}

/// Where a client resumes: `Last-Event-ID`, else `?after=N`; neither is
/// `None` (the whole kept log). The header wins, because a browser's
/// `EventSource` opened with `?after=` sends it on every reconnect, newer.
/// A value that is not a whole number is 400 naming the header or parameter.
pub fn resume_point(headers: &HeaderMap, query: Option<&str>) -> Result<Option<u64>, ApiError> {
    if let Some(value) = headers.get(LAST_EVENT_ID) {
        let text = value.to_str().unwrap_or_default();
        return event_id(LAST_EVENT_ID, text.trim()).map(Some);
    }
    let mut after = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name == AFTER_PARAM {
            after = Some(event_id(AFTER_PARAM, value)?);
        }
    }
    Ok(after)
}

fn event_id(field: &str, text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_field(
            field,
            format!("{text:?}: expected the id of an event of this run (a whole number)"),
        )
    })
}

/// One SSE client's position in the log.
struct Reader {
    log: Arc<EventLog>,
    changes: watch::Receiver<u64>,
    last_seq: u64,
    pending: VecDeque<Arc<Logged>>,
    done: bool,
    /// Its place among the open streams, and whether it was ended.
    slot: StreamSlot,
}

impl Reader {
    async fn next(&mut self) -> Option<Arc<Logged>> {
        loop {
            if self.slot.signals.is_ended() {
                return None;
            }
            if let Some(record) = self.pending.pop_front() {
                self.last_seq = record.seq;
                self.done = record.last;
                return Some(record);
            }
            if self.done {
                return None;
            }
            // Mark the current version seen *before* reading the log: a push
            // between the read and the wait then still wakes us.
            self.changes.borrow_and_update();
            let (fresh, closed) = self.log.since(self.last_seq);
            if !fresh.is_empty() {
                self.pending.extend(fresh);
                continue;
            }
            if closed {
                return None;
            }
            // The sender lives in the log we hold, so this cannot fail; if it
            // somehow did, the next pass reads the log and ends on `closed`.
            self.slot.signals.set_caught_up(true);
            let changed = tokio::select! {
                changed = self.changes.changed() => changed.is_ok(),
                () = self.slot.signals.ended() => return None,
            };
            self.slot.signals.set_caught_up(false);
            if !changed {
                self.done = true;
            }
        }
    }
}

/// Copies the run's events into the log until `run_stopped`, then closes it.
pub async fn forward(
    handle: &RunHandle,
    mut events: broadcast::Receiver<EventRecord>,
    log: &EventLog,
) {
    // `run_stopped` is emitted before the outcome is published, so once `wait`
    // returns, whatever is left is already in the channel. Waiting on the outcome
    // too means a run that dies without `run_stopped` still closes its log (the
    // handle keeps the channel's sender alive, so `recv` alone would never end).
    let stopped = handle.wait();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            biased;
            got = events.recv() => match got {
                Ok(record) => {
                    log.push(&record);
                    if matches!(record.event, RunEvent::RunStopped { .. }) {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(run_id = handle.run_id(), missed, "the event log fell behind; events were lost");
                }
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = &mut stopped => {
                loop {
                    match events.try_recv() {
                        Ok(record) => log.push(&record),
                        Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                        Err(_) => break,
                    }
                }
                break;
            }
        }
    }
    log.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_wins_over_after_and_bad_values_name_their_field() {
        let mut headers = HeaderMap::new();
        assert_eq!(resume_point(&headers, None).ok(), Some(None));
        assert_eq!(
            resume_point(&headers, Some("x=1&after=7")).ok(),
            Some(Some(7))
        );
        headers.insert(LAST_EVENT_ID, " 12 ".parse().unwrap());
        assert_eq!(resume_point(&headers, Some("after=7")).ok(), Some(Some(12)));
        let err = resume_point(&HeaderMap::new(), Some("after=seven")).err();
        assert_eq!(err.and_then(|e| e.field), Some(AFTER_PARAM.to_string()));
        headers.insert(LAST_EVENT_ID, "abc".parse().unwrap());
        let err = resume_point(&headers, None).err();
        assert_eq!(err.and_then(|e| e.field), Some(LAST_EVENT_ID.to_string()));
    }

    /// The whole SSE body of `log` read after `after` (the log is closed).
    async fn body(log: &Arc<EventLog>, after: Option<u64>) -> String {
        let streams = super::super::streams::Streams::new(super::super::streams::StreamLimits {
            per_run: 4,
            total: 4,
        });
        let stream = Arc::clone(log).stream(streams.admit("r"), after);
        let response =
            axum::response::IntoResponse::into_response(axum::response::sse::Sse::new(stream));
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await;
        String::from_utf8(bytes.unwrap().to_vec()).unwrap()
    }

    fn ids(body: &str) -> Vec<u64> {
        let ids = body.lines().filter_map(|l| l.strip_prefix("id: "));
        ids.map(|id| id.parse().unwrap()).collect()
    }

    #[tokio::test]
    async fn a_resumed_stream_says_which_events_it_missed() {
        assert_eq!(resume_note(4, Some(5)), "resuming after event 4");
        assert_eq!(resume_note(4, None), "resuming after event 4");
        // A log that holds only its last few events.
        let log = EventLog::new(ReplayLimits {
            live_bytes: 600,
            stopped_bytes: 600,
        });
        for seq in 1..=10 {
            let event = RunEvent::StepStarted { step: seq };
            log.push(&EventRecord {
                run_id: "r".into(),
                seq,
                event,
            });
        }
        log.close();
        let kept = ids(&body(&log, None).await);
        let first = kept[0];
        assert!(first > 3 && kept.ends_with(&[10]), "{kept:?}");
        // Resumed after an event it dropped: told which ones it missed.
        let missed = body(&log, Some(2)).await;
        let note = format!(
            ": resuming after event 2; events 3 to {} are no longer held\n",
            first - 1
        );
        assert!(missed.starts_with(&note), "{missed}");
        assert_eq!(ids(&missed), kept);
        // Resumed after an event it holds: the ones after it, once.
        let held = body(&log, Some(first + 1)).await;
        assert!(
            held.starts_with(&format!(": resuming after event {}\n", first + 1)),
            "{held}"
        );
        assert_eq!(ids(&held), (first + 2..=10).collect::<Vec<_>>());
    }
}
