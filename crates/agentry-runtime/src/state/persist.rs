//! How a durable run's state reaches the store, and which updates must be on
//! disk before they are acknowledged.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use agentry_protocol::state::RunStatus;
use agentry_protocol::trace::{TraceLine, TraceStep};
use agentry_store::{Checkpoint, StoreError, Write};

use super::msg::{Applied, InputSource, StateUpdate};
use super::run_state::RunState;
use crate::durable::{Committing, Durability};
use crate::trace::TraceSender;

/// The store's side of a state change, ready once the change is
/// acknowledged: at once for a run in memory or writes queued without
/// waiting, once on disk for a commit waited for. A value rather than a
/// future the handler awaits around the change itself: the state keeper's
/// handler future is kept for the run's life, so what it holds across its
/// await is all it costs.
pub(super) enum Commit {
    Done,
    Waiting(Committing),
    Failed(StoreError),
}

impl Future for Commit {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match std::mem::replace(this, Commit::Done) {
            Commit::Done => Poll::Ready(Ok(())),
            Commit::Failed(e) => Poll::Ready(Err(e)),
            Commit::Waiting(mut committing) => {
                let polled = Pin::new(&mut committing).poll(cx);
                if polled.is_pending() {
                    *this = Commit::Waiting(committing);
                }
                polled
            }
        }
    }
}

/// An update applied, and its writes on their way to the store.
pub(super) struct Applying {
    pub(super) applied: Applied,
    /// Ready once the update is acknowledged (for a durable run that must
    /// wait, committed).
    pub(super) commit: Commit,
}

impl RunState {
    /// The writes that bring the store up to this state: new session entries and
    /// the checkpoint.
    fn writes(&mut self, run_id: &str) -> Vec<Write> {
        let mut writes = Vec::with_capacity(2);
        if self.session.len() > self.committed_len {
            writes.push(Write::AppendSession {
                run_id: run_id.to_string(),
                first: self.committed_len as u64,
                entries: self.session[self.committed_len..].to_vec(),
            });
            self.committed_len = self.session.len();
        }
        for source in self.consumed.drain(..) {
            writes.push(match source {
                InputSource::Timer(timer_id) => Write::ClearTimer {
                    run_id: run_id.to_string(),
                    timer_id,
                },
                InputSource::Inbox(seq) => Write::Dequeue {
                    run_id: run_id.to_string(),
                    seq,
                },
            });
        }
        if let Some(events) = &self.events {
            // Never back: a woken run's state was read from the store, its
            // sink numbered on in memory.
            self.progress.last_event = self.progress.last_event.max(events.last_numbered());
        }
        writes.push(Write::Checkpoint {
            run_id: run_id.to_string(),
            checkpoint: Checkpoint {
                snapshot: self.snapshot(),
                progress: serde_json::to_value(&self.progress).unwrap_or_default(),
            },
        });
        // A stopped run is nobody's: its owner lets go in the stop's commit.
        if self.status == RunStatus::Stopped
            && let Some(log) = &self.log
        {
            writes.push(Write::Release {
                run_id: run_id.to_string(),
                token: log.owner_token().to_string(),
            });
            // Released with this batch: a heartbeat after it would be refused.
            log.lease.released();
        }
        writes
    }

    /// Hands the state to the store (durable runs only): a commit to wait for
    /// when `wait`, else queued behind everything queued before.
    pub(super) fn persist(&mut self, wait: bool) -> Commit {
        let Some(log) = self.log.clone() else {
            return Commit::Done;
        };
        let writes = self.writes(&log.run_id);
        if !wait {
            log.submit(writes);
            return Commit::Done;
        }
        match log.begin_commit(writes) {
            Ok(committing) => Commit::Waiting(committing),
            Err(e) => Commit::Failed(e),
        }
    }

    /// Applies an update and hands it to the store (durable runs).
    pub(super) fn apply_committed(&mut self, update: StateUpdate) -> Applying {
        let wait = self.log.is_some() && self.must_wait(&update);
        let applied = self.apply(update);
        Applying {
            applied,
            commit: self.persist(wait),
        }
    }

    /// Completes a step's trace record with the state after its update
    /// (applied and, where it must be, committed) and queues it on the trace.
    pub(super) fn trace_step(
        &mut self,
        mut record: Box<TraceStep>,
        applied: &Applied,
        trace: &TraceSender,
    ) {
        record.state_version = applied.at.state_version;
        record.state = self.trace_snapshot();
        trace.write(TraceLine::Step(record));
    }

    /// Whether an update must be on disk before it is acknowledged.
    fn must_wait(&self, update: &StateUpdate) -> bool {
        let grouped = self
            .log
            .as_ref()
            .is_some_and(|l| l.mode == Durability::Grouped);
        match update {
            // Nobody waits for a decision: if it is lost, the step is decided again,
            // and it is on disk before any intent that depends on it (order).
            StateUpdate::Decided(_) | StateUpdate::TicksSkipped(_) => false,
            StateUpdate::Step(step) => !grouped || step.side_effects || step.ending.is_some(),
            StateUpdate::Status(RunStatus::Sleeping | RunStatus::Running) => !grouped,
            StateUpdate::Input(_)
            | StateUpdate::StoredInput { .. }
            | StateUpdate::Discard(_)
            | StateUpdate::Status(
                RunStatus::Paused
                | RunStatus::AwaitingApproval
                | RunStatus::Stopped
                | RunStatus::AwaitingDecision,
            )
            | StateUpdate::Stopped { .. } => true,
        }
    }
}
