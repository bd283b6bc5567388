//! Open event streams (`GET /runs/{id}/events`), bounded per run and in total.
//!
//! A stream holds its connection for as long as its run lives, and a
//! connection serving one is busy, never closed to make room (`serve.rs`). So
//! without a bound, clients following sleeping runs took every connection
//! and nothing else was answered. Here a new stream past either bound
//! (`--max-streams-per-run`, `--max-streams`) ends the oldest stream of that
//! run, or of all runs, to make room: the oldest that is caught up (waiting
//! for its run's next event), else the oldest. An ended stream is a complete
//! response; the client may open it again, and it replays from the run's
//! first kept event (or after its `Last-Event-ID`, `events.rs`). `--max-streams` is below `--max-connections`, so the
//! connections beyond it are left for short requests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio_util::sync::CancellationToken;

/// How many event streams may be open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Of one run.
    pub per_run: usize,
    /// Of all runs.
    pub total: usize,
}

/// Streams of one run that clients follow by default: a few browser tabs.
pub const DEFAULT_STREAMS_PER_RUN: usize = 16;

impl StreamLimits {
    /// `per_run` of the default, and half the connections in total (at least
    /// one), leaving the other half to short requests.
    pub fn for_connections(max_connections: usize) -> StreamLimits {
        StreamLimits {
            per_run: DEFAULT_STREAMS_PER_RUN,
            total: (max_connections / 2).max(1),
        }
    }
}

/// The open streams, oldest first.
#[derive(Debug)]
pub struct Streams {
    limits: StreamLimits,
    open: Mutex<BTreeMap<u64, Open>>,
    next_id: AtomicU64,
}

/// One open stream as the table holds it.
#[derive(Debug)]
struct Open {
    run_id: String,
    signals: Arc<StreamSignals>,
}

/// What a stream and the table tell each other.
#[derive(Debug, Default)]
pub struct StreamSignals {
    /// Cancelled when the stream is ended to make room.
    ended: CancellationToken,
    /// The stream is caught up: it waits for its run's next event.
    caught_up: AtomicBool,
}

impl StreamSignals {
    /// Resolves when the stream has been ended to make room.
    pub async fn ended(&self) {
        self.ended.cancelled().await;
    }

    /// Whether the stream has been ended to make room.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Marks the stream caught up (or not).
    pub fn set_caught_up(&self, caught_up: bool) {
        self.caught_up.store(caught_up, Ordering::SeqCst);
    }
}

/// A stream's place in the table; it leaves when dropped (the response ended
/// or the client went away).
#[derive(Debug)]
pub struct StreamSlot {
    id: u64,
    streams: Arc<Streams>,
    /// Shared with the table.
    pub signals: Arc<StreamSignals>,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.streams.lock().remove(&self.id);
    }
}

impl Streams {
    /// No streams yet; at most `limits` at once.
    pub fn new(limits: StreamLimits) -> Arc<Streams> {
        Arc::new(Streams {
            limits,
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Open>> {
        // Entries are inserted and removed whole: a poisoned map is consistent.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new stream of `run_id`, made by ending older ones if
    /// the run, or the service, is at its bound.
    pub fn admit(self: &Arc<Self>, run_id: &str) -> StreamSlot {
        let mut open = self.lock();
        while open.values().filter(|o| o.run_id == run_id).count() >= self.limits.per_run.max(1) {
            end_oldest(&mut open, |o| o.run_id == run_id);
        }
        while open.len() >= self.limits.total.max(1) {
            end_oldest(&mut open, |_| true);
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let signals = Arc::new(StreamSignals::default());
        open.insert(
            id,
            Open {
                run_id: run_id.to_string(),
                signals: Arc::clone(&signals),
            },
        );
        StreamSlot {
            id,
            streams: Arc::clone(self),
            signals,
        }
    }
}

/// Ends (and forgets) the oldest stream `matches` accepts that is caught up,
/// else the oldest it accepts.
fn end_oldest(open: &mut BTreeMap<u64, Open>, matches: impl Fn(&Open) -> bool) {
    let mut candidates = open.iter().filter(|(_, o)| matches(o));
    let first = candidates.clone().next().map(|(id, _)| *id);
    let oldest = candidates
        .find(|(_, o)| o.signals.caught_up.load(Ordering::SeqCst))
        .map(|(id, _)| *id)
        .or(first);
    if let Some(ended) = oldest.and_then(|id| open.remove(&id)) {
        ended.signals.ended.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_caught_up_stream_of_the_run_then_of_all_makes_room() {
        let streams = Streams::new(StreamLimits {
            per_run: 2,
            total: 3,
        });
        let a1 = streams.admit("a");
        let a2 = streams.admit("a");
        a2.signals.set_caught_up(true);
        // Run a is at its bound: its caught-up stream goes, not its oldest.
        let a3 = streams.admit("a");
        assert!(!a1.signals.is_ended());
        assert!(a2.signals.is_ended());
        // The service is at its bound: the oldest of all goes (none caught up).
        let b1 = streams.admit("b");
        let b2 = streams.admit("b");
        assert!(a1.signals.is_ended());
        assert!(!a3.signals.is_ended() && !b1.signals.is_ended() && !b2.signals.is_ended());
        // A stream that ended on its own leaves room.
        drop(b2);
        let c1 = streams.admit("c");
        assert!(!a3.signals.is_ended() && !b1.signals.is_ended() && !c1.signals.is_ended());
    }
}
