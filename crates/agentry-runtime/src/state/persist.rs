//! How a durable run's state reaches the store, and which updates must be on
//! disk before they are acknowledged.

use agentry_protocol::state::RunStatus;
use agentry_protocol::trace::{TraceLine, TraceStep};
use agentry_store::{Checkpoint, StoreError, Write};

use super::msg::{Applied, InputSource, StateUpdate};
use super::run_state::RunState;
use crate::durable::Durability;
use crate::trace::TraceSender;

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
                token: log.owner_token.to_string(),
            });
        }
        writes
    }

    /// Hands the state to the store (durable runs only): waits for the commit when
    /// `wait`, else queues it behind everything queued before.
    pub(super) async fn persist(&mut self, wait: bool) -> Result<(), StoreError> {
        let Some(log) = self.log.clone() else {
            return Ok(());
        };
        let writes = self.writes(&log.run_id);
        if wait {
            log.commit(writes).await
        } else {
            log.submit(writes);
            Ok(())
        }
    }

    /// Applies an update and hands it to the store (durable runs), waiting for
    /// the commit when the update must be on disk before it is acknowledged.
    pub(super) async fn apply_committed(
        &mut self,
        update: StateUpdate,
    ) -> Result<Applied, StoreError> {
        let wait = self.log.is_some() && self.must_wait(&update);
        let applied = self.apply(update);
        self.persist(wait).await.map(|()| applied)
    }

    /// [`RunState::apply_committed`] of a step, whose trace record is completed
    /// with the state after the update and queued on the trace.
    pub(super) async fn apply_traced(
        &mut self,
        update: StateUpdate,
        mut record: Box<TraceStep>,
        trace: &TraceSender,
    ) -> Result<Applied, StoreError> {
        let committed = self.apply_committed(update).await;
        // A step that could not be committed gets no record: the run
        // stops on it and the stop line says why.
        if let Ok(applied) = &committed {
            record.state_version = applied.at.state_version;
            record.state = self.trace_snapshot();
            trace.write(TraceLine::Step(record));
        }
        committed
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
