//! One step as data. `decide` yields a [`Decided`], which becomes a
//! [`StepResult`]; `act` fills in its [`Acted`] (what acting produced);
//! `record` fills in the budget after the step and its fingerprint;
//! `check_end` reads it and says whether the run goes on ([`Flow`]). The stages
//! borrow the result (`&mut StepResult`) rather than take it, so it is not
//! copied stage to stage.

use std::sync::Arc;

use agentry_protocol::accept::CheckOutcome;
use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::{Decision, PolicyOutput, TokenUsage};
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::{AttemptRecord, StepInterrupt};

use crate::config::Driver;
use crate::executor::AppliedInput;

/// A decided step: from the policy, or (acted on again) read back from the store.
pub(super) struct Decided {
    pub(super) step: u64,
    /// The budget before the step, as the policy was shown it.
    pub(super) before: BudgetSnapshot,
    pub(super) output: PolicyOutput,
    /// Acted on again after a restart: the ledger settles its calls.
    pub(super) again: bool,
}

/// How the model ended its turn, if it did.
pub(super) enum Answer {
    /// A successful `task.finish`: the acceptance checks decide.
    Finished(String),
    /// A final text answer; for an event-driven agent a reply, not the end.
    Final(String),
}

impl Answer {
    /// Whether this answer ends the run (once the acceptance checks pass): an
    /// event-driven agent's text answer is a reply, and it sleeps until the next
    /// event; only `task.finish` ends such a run.
    #[inline]
    pub(super) fn ends_run(&self, driver: Driver) -> bool {
        match self {
            Answer::Finished(_) => true,
            Answer::Final(_) => driver != Driver::Events,
        }
    }

    #[inline]
    pub(super) fn text(&self) -> &str {
        match self {
            Answer::Finished(text) | Answer::Final(text) => text,
        }
    }

    #[inline]
    pub(super) fn into_text(self) -> String {
        match self {
            Answer::Finished(text) | Answer::Final(text) => text,
        }
    }
}

/// What acting on the decision produced.
#[derive(Default)]
pub(super) struct Acted {
    /// One envelope per call, in request order (or the policy's error).
    pub(super) results: Vec<Arc<ResultEnvelope>>,
    /// Every attempt of the calls that were retried.
    pub(super) attempts: Vec<AttemptRecord>,
    /// Approval decisions applied while the calls waited.
    pub(super) approvals: Vec<AppliedInput>,
    /// Tool calls the allowance granted this step.
    pub(super) tool_calls: u64,
    /// A call that must not run twice was started.
    pub(super) side_effects: bool,
    pub(super) answer: Option<Answer>,
    /// Acting ended the run (a fatal policy error, a refused call, cancellation).
    pub(super) stop: Option<Stop>,
    /// What a user's interrupt cut short, if anything.
    pub(super) interrupted: Option<StepInterrupt>,
}

/// The rest of the policy's output, kept for the budget and the trace.
pub(super) struct TurnInfo {
    pub(super) usage: TokenUsage,
    pub(super) cost_micros: u64,
    /// Empty when the policy did not name its model.
    pub(super) model: String,
    pub(super) prompt_hash: Option<String>,
    pub(super) compaction: Option<agentry_protocol::decision::Compaction>,
}

/// One step as data, built from the decided step: `act` fills `acted`,
/// `record` fills `after` and `fingerprint`, `check_end` reads it.
pub(super) struct StepResult {
    pub(super) step: u64,
    pub(super) before: BudgetSnapshot,
    /// Shared by the event, the executor, the session and the policy's mirror.
    pub(super) decision: Arc<Decision>,
    pub(super) turn: TurnInfo,
    /// Acted on again after a restart: the ledger settles its calls.
    pub(super) again: bool,
    pub(super) acted: Acted,
    /// The budget after the step; set by `record`.
    pub(super) after: BudgetSnapshot,
    /// hash(action, observation, world); set by `record`.
    pub(super) fingerprint: u64,
}

impl StepResult {
    /// The decided step, before anything was done about it. Its decision is
    /// shared from here on: the executor, the event, the session and the
    /// policy's view all hold this one.
    #[inline]
    pub(super) fn new(decided: Decided) -> StepResult {
        let Decided {
            step,
            before,
            output,
            again,
        } = decided;
        StepResult {
            step,
            before,
            decision: Arc::new(output.decision),
            turn: TurnInfo {
                usage: output.usage,
                cost_micros: output.cost_micros,
                model: output.model,
                prompt_hash: output.prompt_hash,
                compaction: output.compaction,
            },
            again,
            acted: Acted::default(),
            after: BudgetSnapshot::default(),
            fingerprint: 0,
        }
    }
}

/// Why the run ends, and how to say so.
pub(super) struct Stop {
    pub(super) reason: StopReason,
    pub(super) detail: String,
    /// Acceptance check outcomes, when the model finished.
    pub(super) checks: Vec<CheckOutcome>,
}

impl Stop {
    #[inline]
    pub(super) fn new(reason: StopReason, detail: impl Into<String>) -> Stop {
        Stop {
            reason,
            detail: detail.into(),
            checks: Vec::new(),
        }
    }
}

/// Whether the run goes on after a step.
pub(super) enum Flow {
    Continue,
    Stop(Stop),
}

impl Flow {
    #[inline]
    pub(super) fn stop(reason: StopReason, detail: impl Into<String>) -> Flow {
        Flow::Stop(Stop::new(reason, detail))
    }
}
