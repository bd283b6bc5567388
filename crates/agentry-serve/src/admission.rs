//! The shared limits' state (`limits.rs`'s slots and queue over the requests
//! they hold) and where it is kept; `admit.rs` lets requests in through it.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::SystemTime;

use super::agents::{AgentRun, RunMeta};
use super::create::NewRun;
use super::limits::{Counts, RunLimits, Slots};
use super::queue_place::Queue;

/// A run to start: an inline task (its working directory made) or a named
/// agent's request (checked).
#[derive(Debug)]
pub(super) enum Pending {
    Inline(Box<NewRun>),
    Agent(Box<AgentRun>),
}

/// A request let in or queued: the run, what the service shows of it, and
/// what a restart needs to make it again.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) pending: Pending,
    pub(super) meta: RunMeta,
    pub(super) traceparent: Option<String>,
}

/// The limits' state, and where it is kept.
#[derive(Debug)]
pub(super) struct Admission {
    slots: Mutex<Slots<Request>>,
    pub(super) table: OnceLock<Arc<Queue>>,
    /// Tenants whose counts `/metrics` shows by name.
    configured: Vec<String>,
}

impl Admission {
    pub(super) fn new(limits: RunLimits, mut configured: Vec<String>) -> Admission {
        configured.extend(limits.tenants.keys().cloned());
        configured.sort();
        configured.dedup();
        Admission {
            slots: Mutex::new(Slots::new(limits, SystemTime::now())),
            table: OnceLock::new(),
            configured,
        }
    }

    pub(super) fn slots(&self) -> MutexGuard<'_, Slots<Request>> {
        // Every change is whole under the lock: a poisoned one is consistent.
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counts `/metrics` shows.
    pub(super) fn counts(&self) -> Counts {
        self.slots().counts(&self.configured, SystemTime::now())
    }

    /// Where `run_id` waits (1 = next), if it is queued.
    pub(super) fn position(&self, run_id: &str) -> Option<usize> {
        self.slots().position(run_id)
    }

    pub(super) fn table(&self) -> Option<Arc<Queue>> {
        self.table.get().cloned()
    }
}
