//! Where a segment reads its run: this node's entry (its event log, its
//! handle), or, for a run another node of the cluster holds, the events the
//! nodes keep and the run's native view (`remote.rs`). A segment reads one
//! source from its start to its end: the two number a run's events apart
//! after a take-over, and the segment's `after` is in its source's numbering.

use std::sync::Arc;

use agentry::RunStatus;
use agentry::protocol::state::PendingApproval;
use futures::FutureExt;

use super::remote::Remote;
use crate::error::ApiError;
use crate::events::EventFeed;
pub(crate) use crate::events::Feed;
use crate::table::{Run, RunEntry};

/// How long a stream waits for a stopped run's outcome (its detail).
const OUTCOME_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The run a segment is of.
#[derive(Debug)]
pub(crate) enum Source {
    /// In this node's table.
    Here(Arc<RunEntry>),
    /// Another node's (or the store's alone).
    Elsewhere(Remote),
}

/// A look at a live run: its status and the calls it parked.
#[derive(Debug)]
pub(crate) struct Look {
    pub status: RunStatus,
    pub approvals: Vec<PendingApproval>,
    pub decisions: Vec<PendingApproval>,
}

impl Source {
    /// The run's events, from its first kept one.
    pub(crate) fn feed(&self) -> Feed {
        match self {
            Source::Here(entry) => Feed::Here(EventFeed::new(Arc::clone(&entry.log))),
            Source::Elsewhere(remote) => {
                Feed::Kept(remote.cluster.events(remote.run_id.clone(), 0))
            }
        }
    }

    /// The number of the run's last event now (0 for none).
    pub(crate) async fn last_seq(&self) -> Result<u64, ApiError> {
        match self {
            Source::Here(entry) => Ok(last_seq(entry)),
            Source::Elsewhere(remote) => remote.cluster.last_event(remote.run_id.clone()).await,
        }
    }

    /// The run now, if it is live (`None`: stopped, queued, or not found).
    pub(crate) async fn look(&self) -> Option<Look> {
        match self {
            Source::Here(entry) => match entry.current() {
                Run::Live(handle) => handle.snapshot().await.map(|s| Look {
                    status: s.status,
                    approvals: s.pending_approvals,
                    decisions: s.pending_decisions,
                }),
                Run::Stopped(_) | Run::Queued => None,
            },
            Source::Elsewhere(remote) => {
                let viewed = remote.view().await.ok()?;
                Some(Look {
                    status: viewed.status?,
                    approvals: viewed.approvals,
                    decisions: viewed.decisions,
                })
            }
        }
    }

    /// A stopped run's outcome detail, for RUN_ERROR. Here its outcome is
    /// published just after its `run_stopped` event: waited for briefly.
    pub(crate) async fn detail(&self) -> Option<String> {
        match self {
            Source::Here(entry) => match entry.current() {
                Run::Stopped(outcome) => Some(outcome.detail.clone()),
                Run::Live(handle) => tokio::time::timeout(OUTCOME_WAIT, handle.wait())
                    .await
                    .ok()?
                    .ok()
                    .map(|outcome| outcome.detail),
                Run::Queued => None,
            },
            Source::Elsewhere(remote) => remote.view().await.ok()?.detail,
        }
    }

    /// The run's goal and status now, for the state.
    pub(crate) async fn now(&self) -> (Option<String>, Option<RunStatus>) {
        match self {
            Source::Here(entry) => match entry.current() {
                Run::Live(handle) => match handle.snapshot().await {
                    Some(s) => (Some(s.task.goal), Some(s.status)),
                    None => (None, None),
                },
                Run::Stopped(outcome) => (Some(outcome.state.task.goal.clone()), None),
                Run::Queued => (None, None),
            },
            Source::Elsewhere(remote) => {
                let status = remote.view().await.ok().and_then(|v| v.status);
                // A stopped run's status is its events' to tell, as here.
                let status = status.filter(|s| *s != RunStatus::Stopped);
                (remote.goal().await, status)
            }
        }
    }
}

/// The events of `log` before now: their last number (0 for none), for a
/// segment that starts after them.
fn last_seq(entry: &RunEntry) -> u64 {
    let mut feed = EventFeed::new(Arc::clone(&entry.log));
    // Whatever the log holds now is handed at once; an empty log would wait.
    match feed.next_batch().now_or_never() {
        Some(Some(batch)) => batch.last().map_or(0, |e| e.seq),
        Some(None) | None => 0,
    }
}
