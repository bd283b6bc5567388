//! What the conductor needs besides the state to continue a run, kept in each
//! checkpoint.

use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::PolicyOutput;
use serde::{Deserialize, Serialize};

/// A step decided but not yet applied: resuming acts on this decision again
/// instead of asking the policy anew (the ledger says which calls already ran).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// Step number.
    pub step: u64,
    /// What the policy said.
    pub output: PolicyOutput,
    /// The budget when the step started.
    pub before: BudgetSnapshot,
}

/// What the conductor needs besides the state to continue a run; kept by the
/// state keeper and stored in each checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Steps taken.
    pub steps: u64,
    /// Tool calls this run made itself.
    pub tool_calls: u64,
    /// The most recent step fingerprints (no-progress window), oldest first.
    pub fingerprints: Vec<u64>,
    /// A decided step not yet applied. Boxed: set only between a step's
    /// decision and its record, and ~470 bytes inline in every run's state.
    pub in_flight: Option<Box<InFlight>>,
    /// The last applied step ends the run (an answer to verify, or a stop already
    /// decided) but the stop is not on disk yet: a resumed run does only that.
    #[serde(default)]
    pub ending: Option<Ending>,
    /// The number of the last event the run had numbered when this
    /// checkpoint was written (0 in a store older than the field).
    #[serde(default)]
    pub last_event: u64,
}

impl Progress {
    /// The number a run resumed from this checkpoint numbers its events
    /// after: past [`RESUMED_EVENT_GAP`] numbers the crash may have used.
    pub fn resumed_numbering(&self) -> u64 {
        self.last_event.saturating_add(RESUMED_EVENT_GAP)
    }
}

/// Event numbers a resumed run leaves unused after the last one its last
/// checkpoint recorded. The events a run emitted after its last commit
/// are lost with the process (their work is redone, under new numbers); a
/// client may have seen some of them. Skipping this many means a number is
/// never given to two different events unless a run emitted more than this
/// between two checkpoints (every state update writes one: a step's events
/// until its decision, then its calls' until its record, are far fewer,
/// short of a model streaming this many text deltas in one answer or a
/// tool reporting progress this often in one call).
pub const RESUMED_EVENT_GAP: u64 = 10_000;

/// How the last applied step ends the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// The model finished with this answer: run the acceptance checks.
    Verify {
        /// The answer.
        answer: String,
    },
    /// The step already decided the stop.
    Stop {
        /// Why.
        reason: agentry_protocol::stop::StopReason,
        /// The sentence explaining it.
        detail: String,
    },
}

/// Fingerprints kept in [`Progress`]: more than any sensible no-progress window.
pub const KEPT_FINGERPRINTS: usize = 32;
