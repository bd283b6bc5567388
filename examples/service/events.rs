//! A per-run replay buffer of events, and the Server-Sent Events stream read from it.
//!
//! `RunHandle::subscribe` hands the whole history only to its first caller; later
//! subscribers see events from the moment they subscribe. An HTTP client may
//! connect at any time, so the service subscribes once, when it creates the run,
//! and copies every event into an [`EventLog`]. SSE clients read the log from the
//! start and then follow it. They never read a broadcast channel themselves, so a
//! slow client cannot lag and lose events: it just reads the log later.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};

use agentry::RunHandle;
use agentry::protocol::event::{EventRecord, RunEvent};
use axum::response::sse::Event;
use futures::Stream;
use tokio::sync::{broadcast, watch};

/// Events kept per run. Past this, the oldest go: a client connecting late to a
/// very long run sees the most recent ones.
pub const REPLAY_LIMIT: usize = 10_000;

/// Everything a run has emitted (up to [`REPLAY_LIMIT`]), in sequence order.
#[derive(Debug)]
pub struct EventLog {
    state: Mutex<LogState>,
    /// Bumped after every change to `state`; readers wait on it.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct LogState {
    events: VecDeque<Arc<EventRecord>>,
    /// No more events will come: the run stopped (or its event source closed).
    closed: bool,
}

impl EventLog {
    /// Starts copying the run's events into a new log. `events` must be the
    /// run's first subscription, so that the log starts at the run's first event.
    pub fn follow(handle: RunHandle, events: broadcast::Receiver<EventRecord>) -> Arc<EventLog> {
        let log = Arc::new(EventLog {
            state: Mutex::new(LogState::default()),
            changed: watch::Sender::new(0),
        });
        tokio::spawn(forward(handle, events, Arc::clone(&log)));
        log
    }

    fn push(&self, record: EventRecord) {
        self.update(|state| {
            if state.events.len() == REPLAY_LIMIT {
                state.events.pop_front();
            }
            state.events.push_back(Arc::new(record));
        });
    }

    fn close(&self) {
        self.update(|state| state.closed = true);
    }

    fn update(&self, change: impl FnOnce(&mut LogState)) {
        // A poisoned lock means a panic mid-push; the deque is still a valid
        // (if possibly one event short) log, so keep serving it.
        change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.send_modify(|n| *n += 1);
    }

    /// Events with a sequence number above `after`, and whether the log is closed.
    fn since(&self, after: u64) -> (Vec<Arc<EventRecord>>, bool) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let start = state.events.partition_point(|r| r.seq <= after);
        (state.events.range(start..).cloned().collect(), state.closed)
    }

    /// The log as SSE events, from the first kept event; the stream ends after
    /// `run_stopped` (or when the log closes without one).
    pub fn stream(self: Arc<Self>) -> impl Stream<Item = Result<Event, Infallible>> {
        let reader = Reader {
            changes: self.changed.subscribe(),
            log: self,
            last_seq: 0,
            pending: VecDeque::new(),
            done: false,
        };
        futures::stream::unfold(reader, |mut reader| async move {
            let record = reader.next().await?;
            Some((Ok(sse_event(&record)), reader))
        })
    }
}

/// One SSE client's position in the log.
struct Reader {
    log: Arc<EventLog>,
    changes: watch::Receiver<u64>,
    last_seq: u64,
    pending: VecDeque<Arc<EventRecord>>,
    done: bool,
}

impl Reader {
    async fn next(&mut self) -> Option<Arc<EventRecord>> {
        loop {
            if let Some(record) = self.pending.pop_front() {
                self.last_seq = record.seq;
                self.done = matches!(record.event, RunEvent::RunStopped { .. });
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
            if self.changes.changed().await.is_err() {
                self.done = true;
            }
        }
    }
}

/// `event: <type>`, `id: <seq>`, `data: <the EventRecord as JSON>`.
fn sse_event(record: &EventRecord) -> Event {
    let data = serde_json::to_value(record).unwrap_or_default();
    let kind = data["event"]["type"]
        .as_str()
        .unwrap_or("event")
        .to_string();
    Event::default()
        .event(kind)
        .id(record.seq.to_string())
        .data(data.to_string())
}

/// Copies the run's events into the log until `run_stopped`, then closes it.
async fn forward(
    handle: RunHandle,
    mut events: broadcast::Receiver<EventRecord>,
    log: Arc<EventLog>,
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
                    let last = matches!(record.event, RunEvent::RunStopped { .. });
                    log.push(record);
                    if last {
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
                        Ok(record) => log.push(record),
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
