//! The run's event stream, shared by the conductor and the executor.
//!
//! Events are numbered per run. Numbering and sending happen under one small
//! lock so subscribers always see sequence numbers in increasing order, whichever
//! actor emitted them. The channel itself is created on the first `subscribe`, so
//! a run nobody watches allocates no 1,024-slot buffer. With `events_from_start`
//! the events emitted before that are kept in a backlog (only as many as were
//! emitted) and handed to the first subscriber. A backlog that fills the
//! channel's capacity before anyone subscribes is dropped and no longer kept:
//! nobody is coming for the run's start, and a run nobody watches then builds no
//! events at all (a subscriber that comes later sees events from then on).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use agentry_protocol::event::{EventRecord, RunEvent};
use tokio::sync::broadcast;

/// Events buffered per subscriber before the slowest one starts missing some.
const EVENT_BUFFER: usize = 1024;

#[derive(Debug, Default)]
struct SinkInner {
    seq: u64,
    tx: Option<broadcast::Sender<EventRecord>>,
    /// Events kept for the first subscriber (`events_from_start`), until it comes.
    backlog: Option<VecDeque<EventRecord>>,
}

/// Publishes a run's events.
#[derive(Debug, Clone)]
pub struct EventSink {
    run_id: Arc<str>,
    inner: Arc<Mutex<SinkInner>>,
}

impl EventSink {
    /// A sink for run `run_id`; with `from_start`, events are kept for the first
    /// subscriber.
    pub fn new(run_id: Arc<str>, from_start: bool) -> Self {
        let backlog = from_start.then(VecDeque::new);
        EventSink {
            run_id,
            inner: Arc::new(Mutex::new(SinkInner {
                seq: 0,
                tx: None,
                backlog,
            })),
        }
    }

    /// A receiver of every event from now on; the first one also gets the
    /// backlog kept since the start (creating the channel if needed).
    pub fn subscribe(&self) -> Option<broadcast::Receiver<EventRecord>> {
        let mut inner = self.inner.lock().ok()?;
        let tx = inner
            .tx
            .get_or_insert_with(|| broadcast::channel(EVENT_BUFFER).0)
            .clone();
        let rx = tx.subscribe();
        // Under the lock, so nothing is emitted between the backlog and the live
        // events: the receiver sees one gapless, ordered stream.
        for record in inner.backlog.take().unwrap_or_default() {
            let _ = tx.send(record);
        }
        Some(rx)
    }

    /// Whether an event emitted now would be seen (a live subscriber, or the
    /// backlog kept for the first one).
    pub fn listening(&self) -> bool {
        self.inner.lock().is_ok_and(|inner| {
            inner.backlog.is_some() || inner.tx.as_ref().is_some_and(|tx| tx.receiver_count() > 0)
        })
    }

    /// Publishes an event. The event is only built when someone listens: building
    /// one costs a clone of the decision or envelope.
    pub fn emit(&self, event: impl FnOnce() -> RunEvent) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let live = inner.tx.as_ref().is_some_and(|tx| tx.receiver_count() > 0);
        if !live && inner.backlog.is_none() {
            return;
        }
        inner.seq += 1;
        let record = EventRecord {
            run_id: Arc::clone(&self.run_id),
            seq: inner.seq,
            event: event(),
        };
        if live {
            if let Some(tx) = &inner.tx {
                let _ = tx.send(record);
            }
            return;
        }
        let full = match inner.backlog.as_mut() {
            Some(backlog) if backlog.len() < EVENT_BUFFER => {
                backlog.push_back(record);
                false
            }
            Some(_) => true,
            None => false,
        };
        if full {
            // Full and still nobody: stop keeping (and building) events.
            inner.backlog = None;
        }
    }
}
