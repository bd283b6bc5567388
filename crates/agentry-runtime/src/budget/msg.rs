//! What goes in and out of the budget supervisor: its messages, their replies,
//! and its start-up arguments.

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Shortfall, Usage};
use agentry_protocol::decision::PolicyOutput;
use agentry_protocol::event::RunEvent;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::stop::StopReason;
use ractor::{ActorRef, RpcReplyPort};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::tally::ToolCallTally;
use crate::events::EventSink;
use crate::policy::PolicyMsg;

/// The answer to a spend request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The snapshot is handed to the policy; the reply is moved once per step, so
// boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum SpendReply {
    /// Granted; the budget before the spend (what the policy is shown). The
    /// conductor works out the snapshot after the step itself, once the step's
    /// tokens and tool calls are known; it takes the step's tool calls from the
    /// [`ToolCallTally`].
    Granted {
        /// Before.
        before: BudgetSnapshot,
    },
    /// Refused: this dimension is exhausted. Nothing was spent.
    Refused(StopReason),
}

/// A step's decision request, handed to the policy by the budget supervisor
/// once the step is granted: the conductor sends one message where it sent a
/// spend request, waited for the grant and then asked the policy (one mailbox
/// hop and one wake-up of the conductor less per step).
pub struct DecideAfterSpend {
    /// The step asked for.
    pub step: u64,
    /// Session entries applied since the previous decision (for the policy).
    pub new_entries: Vec<SessionEntry>,
    /// The run's policy actor.
    pub policy: ActorRef<PolicyMsg>,
    /// The run's events: `StepStarted` is published on the grant, before the
    /// policy is asked (so before any of the step's token deltas).
    pub events: EventSink,
    /// Always answered, first: the grant (with the snapshot the policy is
    /// shown) or the refusal.
    pub granted: RpcReplyPort<SpendReply>,
    /// The policy's decision; dropped unanswered when the step is refused.
    pub decided: RpcReplyPort<PolicyOutput>,
}

impl DecideAfterSpend {
    /// Answers the step's spend and, when it was granted, asks the policy.
    #[inline]
    pub(super) fn relay(self, answer: SpendReply) {
        let DecideAfterSpend {
            step,
            new_entries,
            policy,
            events,
            granted,
            decided,
        } = self;
        let _ = granted.send(answer);
        if let SpendReply::Granted { before, .. } = answer {
            events.emit(|| RunEvent::StepStarted { step });
            // A policy that is gone drops the message and with it the
            // reply port: the conductor hears that it did not answer.
            let _ = policy.cast(PolicyMsg::Decide {
                step,
                new_entries,
                budget: before,
                reply: decided,
            });
        }
    }
}

/// Messages the budget supervisor accepts.
pub enum BudgetMsg {
    /// Check, then spend, all-or-nothing.
    Spend(Usage, RpcReplyPort<SpendReply>),
    /// Check, then spend one step; if granted, ask the policy to decide it
    /// (see [`DecideAfterSpend`]).
    SpendAndDecide(Box<DecideAfterSpend>),
    /// Spend up to `n` tool calls; replies with how many were granted (the rest are
    /// refused with `EBUDGET`) and the snapshot after.
    SpendToolCalls(u64, RpcReplyPort<(u64, BudgetSnapshot)>),
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
    /// Carve a child's budget out of what is left here: a requested limit must fit
    /// (spent + reserved + request within this node's limit, on every dimension),
    /// an unset one on a dimension limited here gets all that is left, and the
    /// deadline is clamped to this node's. Replies with the child's limits, or why
    /// the request does not fit.
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
    /// A child ended: what it did not use of its reservation returns.
    Release {
        /// The child.
        child_id: String,
    },
    /// Every child ever carved from this node, in spawn order.
    Children(RpcReplyPort<Vec<String>>),
    /// How many children are still running (for the fan-out limit).
    LiveChildren(RpcReplyPort<usize>),
}

/// A child's budget as carved ([`BudgetMsg::Reserve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildGrant {
    /// The child's limits.
    pub limits: BudgetLimits,
    /// The parent's absolute deadline, which bounds the child's.
    pub deadline_at: Option<Instant>,
}

/// Why a child's budget was not carved ([`BudgetMsg::Reserve`]).
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
pub struct BudgetArgs {
    /// Limits.
    pub limits: BudgetLimits,
    /// Already spent (a resumed run's spend before the restart).
    pub spent: Usage,
    /// The run's cancellation token; cancelled at the deadline.
    pub run_token: CancellationToken,
    /// When the run started (the deadline counts from here).
    pub started: Instant,
    /// For a child run: the parent's supervisor and this run's id there. Every
    /// spend is charged up to it; the unused allowance is released to it at stop.
    pub parent: Option<ParentLink>,
    /// For a child: the parent's absolute deadline, which bounds this run's.
    pub parent_deadline: Option<Instant>,
    /// Tool calls the run's conductor granted itself and has not reported yet.
    pub tool_calls: ToolCallTally,
}

/// A child's link to its parent's budget supervisor.
#[derive(Debug, Clone)]
pub struct ParentLink {
    /// The parent's budget supervisor.
    pub budget: ActorRef<BudgetMsg>,
    /// This run's id, as the parent knows it.
    pub child_id: String,
}
