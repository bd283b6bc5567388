//! Driving a started (or resumed) run until it stops, or until a durable run
//! parks on a call nobody has settled.

use std::path::{Path, PathBuf};

use agentry::protocol::event::RunEvent;
use agentry::protocol::state::PendingApproval;
use agentry::protocol::tool::ToolCall;
use std::time::Duration;

use agentry::{RunHandle, RunOutcome, RunTree, RuntimeError};

use crate::args::SettleArg;
use crate::error::RunError;

/// How `run` or `resume` ended.
#[derive(Debug)]
pub(crate) enum Finished {
    /// The run stopped; its tree, if it started children.
    Outcome(Box<RunOutcome>, Option<Box<RunTree>>),
    /// A durable run parked on calls a crash interrupted; it stays in the store.
    Parked(Parked),
}

/// A durable run waiting for `agentry resume --decide`.
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) run_id: String,
    pub(crate) store: PathBuf,
    pub(crate) pending: Vec<PendingApproval>,
}

/// Waits for the run's outcome. A durable run that parks `awaiting_decision` on
/// a call settled in `decisions` is settled; on any other call the command
/// returns [`Finished::Parked`], leaving the run parked in the store (the park is
/// committed before the event that reports it).
pub(crate) async fn drive(
    handle: &RunHandle,
    decisions: &[SettleArg],
    store: Option<&Path>,
) -> Result<Finished, RunError> {
    let mut events = handle.subscribe();
    let wait = handle.wait();
    tokio::pin!(wait);
    loop {
        tokio::select! {
            outcome = &mut wait => return finished(handle, outcome).await,
            event = events.recv() => {
                let call = match event {
                    Ok(record) => {
                        if let RunEvent::AwaitingApproval { call, .. } = &record.event {
                            tell_approval_waits(call);
                        }
                        let RunEvent::AwaitingDecision { call, .. } = record.event else {
                            continue;
                        };
                        call
                    }
                    // Lagged: check the state itself below.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        match handle.pending_decisions().await.into_iter().next() {
                            Some(p) => p.call,
                            None => continue,
                        }
                    }
                    Err(_) => return finished(handle, wait.await).await,
                };
                // Without a store a crash decision cannot come up.
                let Some(store) = store else { continue };
                match decisions.iter().find(|d| d.call_id == call.id) {
                    Some(d) => {
                        handle.settle(&d.call_id, d.settlement).await.map_err(RunError::Lost)?;
                    }
                    None => {
                        return Ok(Finished::Parked(Parked {
                            run_id: handle.run_id().to_string(),
                            store: store.to_path_buf(),
                            pending: handle.pending_decisions().await,
                        }));
                    }
                }
            }
        }
    }
}

/// A call parked for a human's approval, which this command cannot give:
/// says so, and how to let such a call run, instead of waiting silently
/// until the task's approval timeout denies it.
fn tell_approval_waits(call: &ToolCall) {
    eprintln!(
        "agentry: call {} ({}) waits for a human's approval, which this command cannot give; \
         it is refused when the task's approval_timeout passes. To let it run, pass --approve {}; \
         to answer calls as they come, serve the task (agentry serve)",
        call.id, call.name, call.name
    );
}

/// How long a stopped run's children get to end and be recorded before its
/// tree is reported as it stands (they were cancelled with it).
const CHILDREN_GRACE: Duration = Duration::from_secs(10);

/// The run's outcome, and its tree once its children have ended; an outcome
/// that never came is lost (exit 1).
async fn finished(
    handle: &RunHandle,
    outcome: Result<RunOutcome, RuntimeError>,
) -> Result<Finished, RunError> {
    let outcome = outcome.map_err(RunError::Lost)?;
    let tree = if handle.has_children() {
        handle.wait_children(CHILDREN_GRACE).await;
        Some(Box::new(handle.tree().await))
    } else {
        None
    };
    Ok(Finished::Outcome(Box::new(outcome), tree))
}
