//! The run's event stream, shared by the conductor and the executor.
//!
//! Events are numbered per run. Numbering and sending happen under one small
//! lock so subscribers always see sequence numbers in increasing order, whichever
//! actor emitted them.

use std::sync::{Arc, Mutex};

use agentry_protocol::event::{EventRecord, RunEvent};
use tokio::sync::broadcast;

/// Publishes a run's events.
#[derive(Debug, Clone)]
pub struct EventSink {
    run_id: Arc<str>,
    tx: broadcast::Sender<EventRecord>,
    seq: Arc<Mutex<u64>>,
}

impl EventSink {
    /// A sink publishing on `tx`.
    pub fn new(run_id: Arc<str>, tx: broadcast::Sender<EventRecord>) -> Self {
        EventSink {
            run_id,
            tx,
            seq: Arc::new(Mutex::new(0)),
        }
    }

    /// Publishes an event. The event is only built when someone listens: building
    /// one costs a clone of the decision or envelope.
    pub fn emit(&self, event: impl FnOnce() -> RunEvent) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        let Ok(mut seq) = self.seq.lock() else { return };
        *seq += 1;
        let _ = self.tx.send(EventRecord {
            run_id: self.run_id.to_string(),
            seq: *seq,
            event: event(),
        });
    }
}
