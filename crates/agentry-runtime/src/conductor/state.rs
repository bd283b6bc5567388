//! What the conductor keeps between messages: its children, the run's counters,
//! and what a resumed run still has to finish.

use std::collections::VecDeque;
use std::sync::Arc;

use agentry_protocol::event::RunEvent;
use agentry_protocol::state::SessionEntry;
use ractor::ActorRef;
use tokio_util::sync::CancellationToken;

use super::msg::Posted;
use super::outcome::{ActorRefs, LiveActors};
use super::phase::Phase;
use super::ticker::Ticker;
use crate::budget::{BudgetMsg, ToolCallAllowance};
use crate::clock::RunClock;
use crate::config::RunConfig;
use crate::durable::{Ending, InFlight};
use crate::events::EventSink;
use crate::executor::{ExecutorArgs, ExecutorMsg};
use crate::policy::PolicyMsg;
use crate::state::StateMsg;
use crate::trace::TraceWriter;

/// The four actors the conductor supervises.
pub(super) struct Children {
    /// Kept to restart the executor if it dies.
    pub(super) executor_args: ExecutorArgs,
    pub(super) policy: ActorRef<PolicyMsg>,
    pub(super) executor: ActorRef<ExecutorMsg>,
    pub(super) state: ActorRef<StateMsg>,
    pub(super) budget: ActorRef<BudgetMsg>,
}

impl Children {
    /// Whether every child is up: a dead one's supervision event must be handled
    /// (the executor restarted) before the next step.
    pub(super) fn all_running(&self) -> bool {
        use ractor::ActorStatus::Running;
        self.policy.get_status() == Running
            && self.executor.get_status() == Running
            && self.state.get_status() == Running
            && self.budget.get_status() == Running
    }

    /// Their addresses, for the run's handle.
    pub(super) fn actors(&self) -> ActorRefs {
        ActorRefs {
            policy: self.policy.clone(),
            executor: self.executor.clone(),
            state: self.state.clone(),
            budget: self.budget.clone(),
        }
    }
}

/// What the conductor is wired to for the whole run: kept whole from its
/// start-up arguments (the rest went to its children).
pub(super) struct Wiring {
    pub(super) run_id: Arc<str>,
    pub(super) config: RunConfig,
    pub(super) run_token: CancellationToken,
    /// This process's claim on a durable run: let go before the outcome is
    /// published (and, declared first, dropped before it if the conductor dies),
    /// so whoever sees the run end here can resume it in this process.
    pub(super) claim: Option<crate::owner::Claim>,
    pub(super) outcome: super::outcome::OutcomeTx,
    pub(super) events: EventSink,
    pub(super) trace: Option<TraceWriter>,
    /// Parent run id, for the trace.
    pub(super) parent_id: Option<Arc<str>>,
    /// The parent's budget supervisor, for a child (to learn why it was cancelled).
    pub(super) parent_budget: Option<ActorRef<BudgetMsg>>,
    /// Messages posted from outside (see [`Posted`]).
    pub(super) posted: Posted,
    /// Where the run's handles find its actors (emptied when it stops).
    pub(super) live: LiveActors,
    /// The run's inbox bound: the slots of inputs in `pending` (`unseen` of
    /// them) are given back when a decision takes them.
    pub(super) gauge: Arc<crate::inbox::InboxGauge>,
    /// What a user's interrupt cuts: each step runs under its token.
    pub(super) cut: crate::interrupt::StepCut,
    /// A durable run records each decision before acting on it.
    pub(super) durable: bool,
    /// W3C traceparent of this run.
    pub(super) traceparent: Arc<str>,
    /// The run's `invoke_agent` span, closed as the run finishes.
    pub(super) span: tracing::Span,
}

/// Conductor state.
pub struct ConductorState {
    /// Declared first: its claim is dropped before anything else if the
    /// conductor dies.
    pub(super) wiring: Wiring,
    /// Shared by every trace record of the run, as are the ids of `wiring`.
    pub(super) model: Arc<str>,
    pub(super) task_id: Arc<str>,
    pub(super) children: Children,
    /// Session entries applied since the policy last decided.
    pub(super) pending: Vec<SessionEntry>,
    pub(super) fingerprints: VecDeque<u64>,
    /// Inputs this conductor applied: part of each step's fingerprint, so a
    /// step woken by a new message or event is never a repeat of the last.
    pub(super) inputs_applied: u64,
    /// Content digest of the world as of the last applied update.
    pub(super) world_digest: Arc<str>,
    /// When the run started and its deadline (the budget supervisor's clock).
    pub(super) clock: RunClock,
    pub(super) steps: u64,
    /// Whether a step may start: running, paused, waiting for the executor's
    /// restart, stopped.
    pub(super) phase: Phase,
    /// A wake-up `Step` is already in the mailbox (event-driven agents).
    pub(super) wake_pending: bool,
    /// Timer state of a time-driven agent.
    pub(super) ticks: Option<Ticker>,
    /// A resumed run's decided-but-unapplied step, acted on again first
    /// (boxed: ~470 bytes, and only a resumed run has one).
    pub(super) in_flight: Option<Box<InFlight>>,
    /// A resumed run whose last step ended it: finish that, take no new step.
    pub(super) ending: Option<Ending>,
    /// Where this run takes its tool calls from, and how many it took (see
    /// [`ToolCallAllowance`]).
    pub(super) allowance: ToolCallAllowance,
    /// How many of the messages posted from outside were handled.
    pub(super) handled: u64,
    /// Inputs in `pending` holding an inbox slot.
    pub(super) unseen: usize,
    /// Of the budget spent, what children spent, as the last step's grant
    /// said (kept with the step: see `ControlState::delegated`).
    pub(super) delegated: agentry_protocol::budget::Usage,
    /// The token of the step in progress (taken from `cut` as it starts).
    pub(super) step_cut: CancellationToken,
    /// The last step's decision called tools: the model's turn is not over, so
    /// an event-driven run asks it again at once instead of sleeping (not after
    /// a tick's step: a tick wakes one decision).
    pub(super) turn_open: bool,
    /// The calls denied (`EPERM`) in a row, as "name (id)": `max_denied` of
    /// them stop the run `permission_denied`.
    pub(super) denied: Vec<String>,
    /// Counts the run's sleeps: a `Hibernate` for an earlier sleep is stale.
    pub(super) sleeps: u64,
    /// Cancelled as the run hibernates (its token's watcher ends); only for a
    /// run that may hibernate.
    pub(super) released: Option<CancellationToken>,
    /// Woken from hibernation, its stored status is `sleeping` already.
    pub(super) stored_asleep: bool,
}

impl ConductorState {
    /// Publishes an event; `event` is only built when someone listens.
    #[inline]
    pub(super) fn emit(&self, event: impl FnOnce() -> RunEvent) {
        self.wiring.events.emit(event);
    }
}
