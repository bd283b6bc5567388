//! What an embedder gets back from a run: its outcome, and its actors' addresses.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agentry_protocol::accept::CheckOutcome;
use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::state::RunSnapshot;
use agentry_protocol::stop::StopReason;
use ractor::{ActorCell, ActorRef};
use serde::Serialize;

use super::msg::ConductorPost;
use crate::budget::BudgetMsg;
use crate::executor::ExecutorMsg;
use crate::policy::PolicyMsg;
use crate::state::StateMsg;

/// How a run ended, as the embedder sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// Run id.
    pub run_id: String,
    /// Task id.
    pub task_id: String,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// A sentence explaining the stop (which check failed, which budget ran out).
    pub detail: String,
    /// The model's answer, if it gave one.
    pub answer: Option<String>,
    /// Steps taken.
    pub steps: u64,
    /// Tool calls this run made (its budget's spend also counts its children's).
    pub tool_calls: u64,
    /// Final budget.
    pub budget: BudgetSnapshot,
    /// Acceptance check outcomes, when the model finished.
    pub checks: Vec<CheckOutcome>,
    /// Key fields of the final state.
    pub state: RunSnapshot,
    /// The working directory.
    pub workdir: PathBuf,
    /// The trace file, if one was written.
    pub trace: Option<PathBuf>,
    /// Why the trace file is incomplete (a full disk, `/dev/full`, an I/O
    /// error), if it is: the run went on, but its record is lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_error: Option<String>,
}

/// The run's four actors as the conductor spawned them, by message type.
#[derive(Debug, Clone)]
pub(crate) struct ActorRefs {
    pub(crate) policy: ActorRef<PolicyMsg>,
    pub(crate) executor: ActorRef<ExecutorMsg>,
    pub(crate) state: ActorRef<StateMsg>,
    pub(crate) budget: ActorRef<BudgetMsg>,
}

/// The run's actors as its handles reach them while it runs: one slot shared
/// by every clone of its handles, filled by the conductor as it starts and
/// emptied once the outcome is published. A stopped run's actors have ended,
/// but each address keeps its actor's four mailboxes allocated (~4.7 KB): a
/// handle kept for the outcome must not keep them (~23 KB per run).
#[derive(Debug, Clone, Default)]
pub(crate) struct LiveActors(Arc<Mutex<Option<Live>>>);

/// The addresses [`LiveActors`] holds while the run runs.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// Every message to the conductor is counted (see `Posted`).
    pub(crate) conductor: ConductorPost,
    /// The state is read from the state keeper directly (it never blocks),
    /// not through the conductor, which may be mid-step.
    pub(crate) actors: ActorRefs,
}

impl LiveActors {
    /// Fills the slot.
    pub(crate) fn set(&self, live: Live) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(live);
        }
    }

    /// A restarted executor's address replaces the dead one's.
    pub(crate) fn replace_executor(&self, executor: &ActorRef<ExecutorMsg>) {
        if let Ok(mut slot) = self.0.lock()
            && let Some(live) = slot.as_mut()
        {
            live.actors.executor = executor.clone();
        }
    }

    /// Empties the slot and runs `publish` (the outcome's) before anyone can
    /// look again: whoever finds no actors finds the outcome, and whoever sees
    /// the outcome finds no actors.
    pub(crate) fn release_with(&self, publish: impl FnOnce()) {
        let taken = match self.0.lock() {
            Ok(mut slot) => {
                let taken = slot.take();
                publish();
                taken
            }
            Err(_) => {
                publish();
                None
            }
        };
        // Dropped outside the lock: the last address frees the mailboxes.
        drop(taken);
    }

    /// `f` on the addresses, or `None` once the run has stopped.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Live) -> R) -> Option<R> {
        self.0.lock().ok()?.as_ref().map(f)
    }

    /// The conductor, while the run runs.
    pub(crate) fn conductor(&self) -> Option<ConductorPost> {
        self.with(|l| l.conductor.clone())
    }

    /// The state keeper, while the run runs.
    pub(crate) fn state(&self) -> Option<ActorRef<StateMsg>> {
        self.with(|l| l.actors.state.clone())
    }

    /// The budget supervisor, while the run runs.
    pub(crate) fn budget(&self) -> Option<ActorRef<BudgetMsg>> {
        self.with(|l| l.actors.budget.clone())
    }
}

/// The run's four actors, as spawned. For embedders that want actor-level
/// access (supervision, diagnostics, killing one to test a crash); their
/// message types stay private, so a cell can be watched or stopped but not
/// sent to. The executor may be replaced by a restart later (a handle's next
/// `actors()` gives the new one); the others live as long as the run. Cells
/// kept after the run stopped keep their mailboxes allocated: drop them.
#[derive(Debug, Clone)]
pub struct RunActors {
    /// The policy actor.
    pub policy: ActorCell,
    /// The tool executor.
    pub executor: ActorCell,
    /// The state keeper.
    pub state: ActorCell,
    /// The budget supervisor.
    pub budget: ActorCell,
}

impl From<&ActorRefs> for RunActors {
    fn from(refs: &ActorRefs) -> RunActors {
        RunActors {
            policy: refs.policy.get_cell(),
            executor: refs.executor.get_cell(),
            state: refs.state.get_cell(),
            budget: refs.budget.get_cell(),
        }
    }
}
