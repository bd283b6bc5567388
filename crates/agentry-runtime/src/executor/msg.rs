//! What goes in and out of the executor: its messages, its start-up arguments,
//! a step's results, and one call's outcome.

use std::path::Path;
use std::sync::Arc;

use agentry_protocol::accept::{AcceptCheck, CheckOutcome};
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::trace::{AttemptRecord, RunInput};
use ractor::{ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::budget::BudgetMsg;
use crate::config::{ApprovalConfig, RetryPolicy};
use crate::durable::RunLog;
use crate::events::EventSink;
use crate::registry::{Grants, LiveRegistry};
use crate::state::{AppliedAt, StateMsg};

/// An input the state keeper applied while a call waited for it (a human's
/// approval or settlement).
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedInput {
    /// Its sequence number and the state version after it.
    pub at: AppliedAt,
    /// The input.
    pub input: RunInput,
}

/// A step's results plus every attempt made to produce them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Executed {
    /// One envelope per call, in request order (shared with the idempotency
    /// table, and then with the session).
    pub results: Vec<Arc<ResultEnvelope>>,
    /// Every attempt of the calls that were retried.
    pub attempts: Vec<AttemptRecord>,
    /// Approval decisions applied while the calls waited.
    pub approvals: Vec<AppliedInput>,
    /// A call that must not run twice was started (its intent is on disk, for a
    /// durable run).
    pub side_effects: bool,
    /// Calls a user's interrupt cancelled, kept from starting or withdrew from
    /// approval, in request order.
    pub interrupted: Vec<String>,
    /// Irreversible calls the interrupt cut short, settled by a human.
    pub unsettled: Vec<String>,
}

/// Messages the executor accepts.
pub enum ExecutorMsg {
    /// Run a step's calls. Only the first `granted` calls have tool-call budget; the
    /// rest are answered `EBUDGET` without running.
    Execute {
        /// Step number.
        step: u64,
        /// The step's decision (shared with the conductor, which keeps it for the
        /// session); its calls, in request order, are run. Any other decision
        /// runs nothing.
        decision: Arc<Decision>,
        /// How many calls the budget supervisor granted.
        granted: usize,
        /// The step is acted on again after a restart: calls the ledger records as
        /// finished are not run again, and calls it records as started are settled
        /// by their contract.
        redrive: bool,
        /// The step's token: a user's interrupt cancels it (and the run's
        /// cancellation, whose child it is).
        cut: CancellationToken,
        /// The results.
        reply: RpcReplyPort<Executed>,
    },
    /// Run the task's acceptance checks in the working directory.
    Verify {
        /// The checks.
        checks: Vec<AcceptCheck>,
        /// One outcome per check.
        reply: RpcReplyPort<Vec<CheckOutcome>>,
    },
}

/// A durable run's ledger rows as whoever started the run already knows
/// them (none for a new run; what a woken run's read found): the executor's
/// first start takes them instead of waiting for the store's writer and
/// reading the run again. Unknown (the default) for a resume, and taken by
/// the first start, so a restarted executor reads the store: it may have
/// written rows since.
#[derive(Debug, Clone, Default)]
pub struct KnownLedger(Arc<std::sync::Mutex<Option<Vec<agentry_store::LedgerEntry>>>>);

impl KnownLedger {
    /// Rows known to be the run's whole ledger.
    pub fn new(rows: Vec<agentry_store::LedgerEntry>) -> KnownLedger {
        KnownLedger(Arc::new(std::sync::Mutex::new(Some(rows))))
    }

    /// The rows, once; `None` when they are not known (read the store).
    pub(super) fn take(&self) -> Option<Vec<agentry_store::LedgerEntry>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// Start-up arguments.
#[derive(Clone)]
pub struct ExecutorArgs {
    /// Run id.
    pub run_id: Arc<str>,
    /// Tools: the registry in place when a batch starts is the batch's.
    pub registry: LiveRegistry,
    /// What this run may call.
    pub grants: Grants,
    /// Working directory.
    pub workdir: Arc<Path>,
    /// The working directory as a handle, opened once when the run started:
    /// file tools and acceptance checks resolve paths beneath it.
    pub root: Arc<agentry_tools::fs::WorkRoot>,
    /// Artifacts directory (full outputs referenced from envelopes).
    pub artifacts: Arc<Path>,
    /// Cancelled at the deadline or on abort; every call is selected against it.
    pub run_token: CancellationToken,
    /// The run's absolute deadline, to tell `ETIMEDOUT` from `ECANCELED`.
    pub deadline: Option<Instant>,
    /// The budget supervisor, asked before every retry.
    pub budget: ActorRef<BudgetMsg>,
    /// Where `ToolCallStarted` events go.
    pub events: EventSink,
    /// Bound on concurrently running calls of one step.
    pub max_parallel: usize,
    /// Results whose data is longer than this as JSON are also saved whole.
    pub result_cap: usize,
    /// Backoff between retries.
    pub retry: RetryPolicy,
    /// The state keeper, where calls park while they wait for approval.
    pub state: ActorRef<StateMsg>,
    /// Which calls need approval.
    pub approval: ApprovalConfig,
    /// Starts child agents for `agent.spawn`.
    pub agents: Option<Arc<dyn agentry_tools::agents::AgentDesk>>,
    /// Where a durable run's call ledger is committed; the executor reads it back
    /// when it starts (a resumed run, or a restart after the executor died).
    pub log: Option<RunLog>,
    /// The ledger's rows, when the run's starter knows them.
    pub known_ledger: KnownLedger,
    /// The run's W3C traceparent, handed to tools (`ToolContext::traceparent`).
    pub traceparent: Arc<str>,
    /// The run's `invoke_agent` span: the parent of each `execute_tool` span.
    pub span: tracing::Span,
    /// With `RunConfig::observe.content`: the redactor tool arguments and
    /// results pass before they become span attributes (`None`: no content).
    pub content: Option<Arc<agentry_redact::Redactor>>,
    /// The run's kernel sandboxes: every process a call or an acceptance
    /// check starts runs under them.
    pub sandbox: Arc<agentry_tools::proc::RunSandboxes>,
}

/// How one call ended: its envelope, a record of every attempt when it was
/// retried (a call that ran once is fully described by its envelope, whose
/// `attempt` is 1), and the human decisions it waited for (an approval, a
/// settlement after an interrupt cut it), in the order they were applied.
pub(super) struct CallOutcome {
    pub(super) envelope: ResultEnvelope,
    pub(super) attempts: Vec<AttemptRecord>,
    pub(super) applied: Vec<AppliedInput>,
    pub(super) cut: CutShort,
}

/// What a user's interrupt did to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CutShort {
    /// Nothing: it ran its course (or the run's own cancellation stopped it).
    No,
    /// Cancelled in flight, kept from starting, or withdrawn from approval.
    Cancelled,
    /// An irreversible call cut in flight: a human settled it.
    Unsettled,
}

impl CallOutcome {
    /// A call that ended before it ran (denied, settled by a human, or its
    /// intent could not be recorded).
    #[inline]
    pub(super) fn not_run(envelope: ResultEnvelope, approval: Option<AppliedInput>) -> CallOutcome {
        CallOutcome {
            envelope,
            attempts: Vec::new(),
            applied: approval.into_iter().collect(),
            cut: CutShort::No,
        }
    }

    /// `self`, marked as what the interrupt did to it.
    #[inline]
    pub(super) fn cut(self, cut: CutShort) -> CallOutcome {
        CallOutcome { cut, ..self }
    }
}
