//! The run's event stream, shared by the conductor and the executor.
//!
//! Events are numbered per run. Numbering and sending happen under one small
//! lock so subscribers always see sequence numbers in increasing order, whichever
//! actor emitted them. The channel itself is created only when someone can listen
//! (at start with `events_from_start`, else on the first `subscribe`): a run
//! nobody watches allocates no event buffer and builds no events.

use std::sync::{Arc, Mutex};

use agentry_protocol::event::{EventRecord, RunEvent};
use tokio::sync::broadcast;

/// Events buffered per subscriber before the slowest one starts missing some.
const EVENT_BUFFER: usize = 1024;

#[derive(Debug, Default)]
struct SinkInner {
    seq: u64,
    tx: Option<broadcast::Sender<EventRecord>>,
}

/// Publishes a run's events.
#[derive(Debug, Clone)]
pub struct EventSink {
    run_id: Arc<str>,
    inner: Arc<Mutex<SinkInner>>,
}

impl EventSink {
    /// A sink for run `run_id`; with `open`, the channel exists from the start.
    pub fn new(run_id: Arc<str>, open: bool) -> Self {
        let tx = open.then(|| broadcast::channel(EVENT_BUFFER).0);
        EventSink {
            run_id,
            inner: Arc::new(Mutex::new(SinkInner { seq: 0, tx })),
        }
    }

    /// A receiver of every event from now on (creating the channel if needed).
    pub fn subscribe(&self) -> Option<broadcast::Receiver<EventRecord>> {
        let mut inner = self.inner.lock().ok()?;
        Some(
            inner
                .tx
                .get_or_insert_with(|| broadcast::channel(EVENT_BUFFER).0)
                .subscribe(),
        )
    }

    /// Publishes an event. The event is only built when someone listens: building
    /// one costs a clone of the decision or envelope.
    pub fn emit(&self, event: impl FnOnce() -> RunEvent) {
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let Some(tx) = inner.tx.clone() else { return };
        if tx.receiver_count() == 0 {
            return;
        }
        inner.seq += 1;
        let seq = inner.seq;
        let _ = tx.send(EventRecord {
            run_id: self.run_id.to_string(),
            seq,
            event: event(),
        });
    }
}
