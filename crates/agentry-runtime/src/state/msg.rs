//! What goes in and out of the state keeper: its messages, the updates it
//! applies, and what it answers.

use std::sync::Arc;

use agentry_protocol::budget::Usage;
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::{PendingApproval, RunSnapshot, RunStatus, Settlement};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::{RunInput, TraceStep};
use agentry_store::StoreError;
use ractor::RpcReplyPort;

use crate::durable::{Ending, InFlight};
use crate::trace::TraceSender;

/// One state change.
#[derive(Debug, Clone)]
pub enum StateUpdate {
    /// An input from outside: counted, given its sequence number, and (for
    /// messages, events and ticks) added to the session.
    Input(RunInput),
    /// An input delivered by a stored timer or from the run's stored inbox:
    /// applied like [`StateUpdate::Input`], and the timer or inbox entry leaves
    /// the store in the same commit.
    StoredInput {
        /// Where it was stored.
        source: InputSource,
        /// The input.
        input: RunInput,
    },
    /// A stored inbox entry that turned out to change nothing (a pause of a
    /// paused run): it only leaves the store. No version bump.
    Discard(u64),
    /// The run's status changed (paused, sleeping, running).
    Status(RunStatus),
    /// Timer ticks were skipped.
    TicksSkipped(u64),
    /// A step was decided and is about to act (recorded only for durable runs, so
    /// a resumed run acts on the same decision instead of asking the policy again).
    Decided(Box<InFlight>),
    /// A whole step: the decision, its results, and the spend, applied
    /// atomically. Boxed: it is four times the size of any other update, and
    /// every future that holds a state message is as large as the largest.
    Step(Box<StepUpdate>),
    /// The run stopped.
    Stopped {
        /// Why.
        reason: StopReason,
        /// Total spend at the stop.
        spent: Usage,
    },
}

/// A whole step as the state keeper applies it ([`StateUpdate::Step`]).
#[derive(Debug, Clone)]
pub struct StepUpdate {
    /// Step number.
    pub step: u64,
    /// What the policy decided.
    pub decision: Arc<Decision>,
    /// Results, in request order.
    pub results: Vec<Arc<ResultEnvelope>>,
    /// Total spend after the step.
    pub spent: Usage,
    /// Of `spent`, what children spent.
    pub delegated: Usage,
    /// The answer the model gave at this step, if any.
    pub answer: Option<String>,
    /// Tool calls this run has made itself, after the step.
    pub tool_calls: u64,
    /// The step's fingerprint (no-progress window).
    pub fingerprint: u64,
    /// The step started a call that must not run twice: a durable run commits
    /// the step before acknowledging it in every mode.
    pub side_effects: bool,
    /// The step ends the run (a resumed run finishes it instead of stepping).
    pub ending: Option<Ending>,
}

/// Where a durable run keeps an input until it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// A one-shot timer (`RunHandle::after`), by id.
    Timer(String),
    /// The run's inbox (an input a handle accepted), by position.
    Inbox(u64),
}

/// Where an update landed: the inputs applied so far (for an input, its
/// sequence number) and the state version after it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedAt {
    /// Inputs applied so far; for an input, its sequence number.
    pub input_seq: u64,
    /// State version after the update.
    pub state_version: u64,
}

/// What applying an update changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Input sequence number and state version after the update.
    pub at: AppliedAt,
    /// Content digest of the world layer after the update (path → sha256).
    pub world_digest: Arc<str>,
}

/// A human's decision on a pending call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    /// Approved or denied.
    pub approved: bool,
    /// Why, for a denial.
    pub reason: Option<String>,
    /// Where the decision was applied (set by the state keeper).
    pub applied: AppliedAt,
}

/// A human's settlement of a call a crash interrupted, as the executor gets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// What the human said.
    pub settlement: Settlement,
    /// Where the settlement was applied.
    pub at: AppliedAt,
}

/// Where a settlement goes.
pub type SettlementPort = RpcReplyPort<Settled>;

/// What a human's answer was for: which kind of parked call it must find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// An approval ([`StateMsg::Resolve`]).
    Approval,
    /// A settlement of a call a crash interrupted ([`StateMsg::Settle`]).
    Decision,
}

/// Why a human's answer ([`StateMsg::Resolve`], [`StateMsg::Settle`]) was not
/// taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HumanInputError {
    /// No call by that id is parked for this kind of answer.
    NotWaiting {
        /// The call named.
        tool_call_id: String,
        /// What it was expected to wait for.
        waiting_for: Waiting,
    },
    /// The answer could not be committed (a durable run); it does not count.
    Store {
        /// What the answer was for.
        waiting_for: Waiting,
        /// The store's error.
        error: StoreError,
    },
}

impl std::fmt::Display for HumanInputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HumanInputError::NotWaiting {
                tool_call_id,
                waiting_for: Waiting::Approval,
            } => write!(f, "no call {tool_call_id:?} is waiting for approval"),
            HumanInputError::NotWaiting {
                tool_call_id,
                waiting_for: Waiting::Decision,
            } => write!(f, "no call {tool_call_id:?} is waiting for a decision"),
            HumanInputError::Store {
                waiting_for: Waiting::Approval,
                error,
            } => write!(f, "the decision could not be stored: {error}"),
            HumanInputError::Store {
                waiting_for: Waiting::Decision,
                error,
            } => write!(f, "the settlement could not be stored: {error}"),
        }
    }
}

impl std::error::Error for HumanInputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HumanInputError::NotWaiting { .. } => None,
            HumanInputError::Store { error, .. } => Some(error),
        }
    }
}

/// Where the outcome of an [`StateMsg::Apply`] goes.
pub type AppliedPort = RpcReplyPort<Result<Applied, StoreError>>;

/// Messages the state keeper accepts.
pub enum StateMsg {
    /// Apply one update; the reply says what changed, or (for a durable run) why
    /// the update could not be committed.
    Apply(StateUpdate, Option<AppliedPort>),
    /// [`StateMsg::Apply`] of a step whose trace record the state keeper
    /// completes with the state after the update and queues on the trace, once
    /// applied (so the trace needs no round trip of its own).
    ApplyTraced {
        /// The step's update.
        update: StateUpdate,
        /// The step's record, but for `state_version` and `state`.
        record: Box<TraceStep>,
        /// The run's trace.
        trace: TraceSender,
        /// Where the outcome goes, when the conductor waits for it.
        reply: Option<AppliedPort>,
    },
    /// The key fields of the state.
    Snapshot(RpcReplyPort<RunSnapshot>),
    /// Park a call until a human decides (sent by the executor). The decision
    /// comes back on the port; the call is visible in snapshots meanwhile.
    AwaitApproval(PendingApproval, RpcReplyPort<ApprovalDecision>),
    /// A human's decision on a pending call (from a run handle). Replies with the
    /// input's sequence number, or why it was not taken.
    Resolve {
        /// The pending call.
        tool_call_id: String,
        /// The decision.
        decision: ApprovalDecision,
        /// Where the result goes.
        reply: RpcReplyPort<Result<u64, HumanInputError>>,
    },
    /// Drop a pending call without a decision (its wait timed out or was cancelled).
    Withdraw(String),
    /// Park a call a crash interrupted until a human settles it (sent by the
    /// executor of a resumed run). `parked` is answered once the park is on disk.
    AwaitDecision {
        /// The call.
        pending: PendingApproval,
        /// Answered when the park is committed (or failed to be).
        parked: RpcReplyPort<Result<(), StoreError>>,
        /// Where the settlement goes.
        decision: SettlementPort,
    },
    /// A human's settlement of a parked call (from a run handle). Replies with the
    /// input's sequence number, or why it was not taken.
    Settle {
        /// The parked call.
        tool_call_id: String,
        /// What the human said.
        settlement: Settlement,
        /// Where the result goes.
        reply: RpcReplyPort<Result<u64, HumanInputError>>,
    },
}
