//! What a conductor is started with.

use std::sync::Arc;

use tokio::time::Duration;
use tokio_util::sync::CancellationToken;

use super::lineage::Lineage;
use super::msg::Posted;
use super::outcome::LiveActors;
use crate::config::RunConfig;
use crate::durable::RunLog;
use crate::events::EventSink;
use crate::policy::Policy;
use crate::registry::LiveRegistry;
use crate::state::RunState;
use crate::trace::TraceWriter;

/// Start-up arguments.
pub struct ConductorArgs {
    /// Run id.
    pub run_id: Arc<str>,
    /// Configuration.
    pub config: RunConfig,
    /// Tools.
    pub registry: LiveRegistry,
    /// The policy.
    pub policy: Box<dyn Policy>,
    /// The run's token (a child of the runtime's).
    pub run_token: CancellationToken,
    /// Where the outcome is published.
    pub outcome: super::outcome::OutcomeTx,
    /// Where events are published.
    pub events: EventSink,
    /// The trace writer, opened before the run starts so a bad path is an error
    /// for the caller, not a failed actor.
    pub trace: Option<TraceWriter>,
    /// Where the run's handles find its actors: filled as they start (so a
    /// handle can read state without waiting for the conductor's step to
    /// end), emptied when the run stops.
    pub(crate) live: LiveActors,
    /// Where this run sits in an agent tree.
    pub lineage: Lineage,
    /// The run's `invoke_agent` span (disabled when nobody wants spans).
    pub span: tracing::Span,
    /// Starts children for `agent.spawn`.
    pub agents: Arc<dyn agentry_tools::agents::AgentDesk>,
    /// Where a durable run commits its state and ledger.
    pub log: Option<RunLog>,
    /// The state to continue from, for a resumed run.
    pub restore: Option<Restore>,
    /// The run's ledger rows, when already known (a new run's: none).
    pub ledger: crate::executor::KnownLedger,
    /// Counts what is posted to the conductor from outside.
    pub posted: Posted,
    /// The run's inbox bound, shared with its handles.
    pub(crate) gauge: std::sync::Arc<crate::inbox::InboxGauge>,
    /// The step's cancellation a user's interrupt fires (shared with handles).
    pub(crate) cut: crate::interrupt::StepCut,
    /// A durable run: this process's claim on it, held while the run runs.
    pub(crate) claim: Option<crate::owner::Claim>,
    /// The run's kernel sandboxes, prepared before it started.
    pub(crate) sandboxes: Arc<agentry_tools::proc::RunSandboxes>,
}

/// What a resumed run continues from.
pub struct Restore {
    /// The state read back from the store.
    pub state: RunState,
    /// Wall-clock time since the run was created: the budget's clock (and so the
    /// absolute deadline) goes on from there.
    pub elapsed: Duration,
    /// Its live children, whose reservations its books take back.
    pub children: Vec<crate::budget::ChildBooks>,
    /// Woken from hibernation: stored asleep, so it goes back to sleep
    /// without a commit.
    pub woken: bool,
}
