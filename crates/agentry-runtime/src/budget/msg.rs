//! What goes in and out of the budget supervisor: its messages, their replies,
//! and its start-up arguments.

use crate::tree_limits::TreeLimits;
use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Shortfall, Usage};
use agentry_protocol::stop::StopReason;
use ractor::{ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::allowance::ToolCallAllowance;
use crate::clock::RunClock;

/// The answer to a spend request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The snapshot is handed to the policy; the reply is moved once per step, so
// boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum SpendReply {
    /// Granted; the budget before the spend (what the policy is shown). The
    /// conductor works out the snapshot after the step itself, once the step's
    /// tokens and tool calls are known; it takes the step's tool calls from the
    /// run's tool-call allowance.
    Granted {
        /// Before.
        before: BudgetSnapshot,
        /// Of `before.spent`, what children spent (kept in the run's
        /// checkpoint: a resume recounts the children from their records).
        delegated: Usage,
    },
    /// Refused: this dimension is exhausted. Nothing was spent.
    Refused(StopReason),
}

/// What the supervisor does with a granted step, without knowing the policy or
/// the events: the conductor hands it a relay, the supervisor calls it once,
/// after it answered the grant (a refused step drops it).
pub trait OnStepGranted: Send + 'static {
    /// Step granted; `before` is the budget before it (what the policy is shown).
    fn granted(self: Box<Self>, before: BudgetSnapshot);
}

/// Messages the budget supervisor accepts.
pub enum BudgetMsg {
    /// Check, then spend, all-or-nothing.
    Spend(Usage, RpcReplyPort<SpendReply>),
    /// Check, then spend one step; answer `granted` and, if the step was
    /// granted, hand it on with `then` (the conductor's relay to the policy:
    /// one message where it sent a spend request, waited for the grant and then
    /// asked the policy — one mailbox hop and one wake-up of the conductor less
    /// per step).
    SpendStep {
        /// Always answered, first: the grant or the refusal.
        granted: RpcReplyPort<SpendReply>,
        /// Called once the step is granted; dropped when it is refused.
        then: Box<dyn OnStepGranted>,
    },
    /// Check, then spend, one automatic retry; `false` when the run's retry budget
    /// is exhausted (or the run is stopping).
    SpendRetry(RpcReplyPort<bool>),
    /// Record usage already incurred (a model turn's tokens). No check: the next
    /// spend request sees it.
    Charge(Usage),
    /// Current snapshot.
    Snapshot(RpcReplyPort<BudgetSnapshot>),
    /// Why the run's token was cancelled, if it was.
    StopCause(RpcReplyPort<Option<StopReason>>),
    /// Cancel every in-flight call for this reason (user abort, shutdown).
    CancelAll(StopReason),
    /// Sent by the deadline timer.
    DeadlineReached,
    /// Carve a child's budget out of what is left here beyond this node's
    /// reserve (`TreeLimits::parent_reserve`): a requested limit must fit in
    /// that, on every dimension limited here; an unset one gets the child's
    /// share of it (`TreeLimits::child_share`); the deadline is clamped to this
    /// node's. Replies with the child's limits, or why the request does not fit.
    Reserve {
        /// The child's run id.
        child_id: String,
        /// The limits the child asks for.
        request: BudgetLimits,
        /// The child's limits and this node's absolute deadline, or why not.
        reply: RpcReplyPort<Result<ChildGrant, ReserveRefused>>,
    },
    /// A child (or a descendant through it) spent this: charge it here and up.
    ChildSpent {
        /// The child on the path.
        child_id: String,
        /// What was spent.
        usage: Usage,
    },
    /// A child ended: what it did not use of its reservation returns (for a
    /// held child, once it is collected).
    Release {
        /// The child.
        child_id: String,
    },
    /// Sent before the `Reserve` of a child a model spawns (`agent.spawn`):
    /// what it does not use returns only when the model collects its end
    /// (`Collect`), never at a moment its own timing decides. So what a spawn
    /// is carved and what `left_to_delegate` says are the same however fast
    /// the step's other children end, as a replay of the run finds them.
    HoldRelease {
        /// The child about to be reserved.
        child_id: String,
    },
    /// `agent.wait` returned a held child's outcome, or `agent.cancel` stopped
    /// it: what it did not use returns now.
    Collect {
        /// The child.
        child_id: String,
    },
    /// Every child ever carved from this node, in spawn order.
    Children(RpcReplyPort<Vec<String>>),
    /// How many children are still running (for the fan-out limit).
    LiveChildren(RpcReplyPort<usize>),
    /// The most a child could be given now on each dimension limited here
    /// (this node's reserve kept); `None` where unlimited.
    Delegable(RpcReplyPort<BudgetLimits>),
}

/// A child's budget as carved ([`BudgetMsg::Reserve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildGrant {
    /// The child's limits.
    pub limits: BudgetLimits,
    /// The parent's absolute deadline, which bounds the child's.
    pub deadline_at: Option<Instant>,
}

/// Why a child's budget was not carved (the parent supervisor's answer to `Reserve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReserveRefused {
    /// The parent is stopping, for this reason.
    #[error("the parent is stopping ({0})")]
    ParentStopping(StopReason),
    /// The parent has not that much left.
    #[error("{0}")]
    Uncovered(Shortfall),
}

/// Start-up arguments.
#[derive(Debug, Clone)]
pub(crate) struct BudgetArgs {
    /// Limits.
    pub limits: BudgetLimits,
    /// Already spent (a resumed run's spend before the restart).
    pub spent: Usage,
    /// The run's cancellation token; cancelled at the deadline.
    pub run_token: CancellationToken,
    /// When the run started and its absolute deadline (its own or its
    /// parent's, whichever comes first).
    pub clock: RunClock,
    /// For a child run: the parent's supervisor and this run's id there. Every
    /// spend is charged up to it; the unused allowance is released to it at stop.
    pub parent: Option<ParentLink>,
    /// The run's tool-call allowance, whose books the supervisor keeps.
    pub allowance: ToolCallAllowance,
    /// The tree's budget rule: the reserve a parent keeps, a child's default share.
    pub tree: TreeLimits,
    /// Of `spent`, what children spent.
    pub delegated: Usage,
    /// A resumed run's live children and what is still reserved for each.
    pub children: Vec<ChildBooks>,
}

/// A live child of a resumed run, as its parent's books take it back: its
/// limits, of which what it has not spent is set aside again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildBooks {
    /// The child's run id.
    pub child_id: String,
    /// The limits it was given.
    pub limits: BudgetLimits,
    /// What it (and its descendants) spent, by the store.
    pub spent: Usage,
}

/// A child's link to its parent's budget supervisor.
#[derive(Debug, Clone)]
pub struct ParentLink {
    /// The parent's budget supervisor.
    pub budget: ActorRef<BudgetMsg>,
    /// This run's id, as the parent knows it.
    pub child_id: String,
}
