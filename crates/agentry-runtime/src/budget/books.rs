//! The supervisor's books: the budget vector, what is reserved for children,
//! and every answer it gives (each a few comparisons, never a wait).

use std::collections::{HashMap, HashSet};

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Shortfall, Usage};
use agentry_protocol::stop::StopReason;
use ractor::ActorRef;
use tokio_util::sync::CancellationToken;

use super::allowance::{ToolCallAllowance, signed};
use super::deadline::DeadlineTimer;
use super::msg::{
    BudgetArgs, BudgetMsg, ChildBooks, ChildGrant, ParentLink, ReserveRefused, SpendReply,
};
use crate::clock::RunClock;
use crate::tree_limits::{ChildShare, TreeLimits};

/// Supervisor state.
#[derive(Debug)]
pub(crate) struct BudgetState {
    limits: BudgetLimits,
    spent: Usage,
    /// When the run started, and its absolute deadline.
    clock: RunClock,
    run_token: CancellationToken,
    cause: Option<StopReason>,
    timer: Option<DeadlineTimer>,
    parent: Option<ParentLink>,
    /// Allowances reserved for live children, minus what they have spent.
    reserved: Usage,
    /// Per live child: what is still reserved for it.
    children: HashMap<String, Usage>,
    /// Children whose unused allowance returns only when collected
    /// ([`BudgetMsg::HoldRelease`]): a model's, spawned through `agent.spawn`.
    held: HashSet<String>,
    /// Such children that ended, and what is still reserved for them until
    /// `agent.wait` or `agent.cancel` collects them ([`BudgetMsg::Collect`]).
    returning: HashMap<String, Usage>,
    /// Of `spent`, what children spent.
    delegated: Usage,
    /// Every child carved from this node, in order.
    spawned: Vec<String>,
    /// The run's tool-call allowance, and how many of its own calls are booked.
    tool_calls: ToolCallAllowance,
    booked: u64,
    /// What this node keeps and what share a child gets by default.
    rule: TreeLimits,
}

impl BudgetState {
    /// The books at start, with the deadline alarm armed.
    pub(super) fn start(args: BudgetArgs, myself: ActorRef<BudgetMsg>) -> BudgetState {
        let timer = args
            .clock
            .deadline_at
            .map(|at| DeadlineTimer::arm(at, myself, args.run_token.clone()));
        let booked = args
            .allowance
            .start(args.limits.max_tool_calls, args.spent.tool_calls);
        let mut books = BudgetState {
            parent: args.parent,
            reserved: Usage::default(),
            children: HashMap::new(),
            held: HashSet::new(),
            returning: HashMap::new(),
            delegated: args.delegated,
            spawned: Vec::new(),
            limits: args.limits,
            spent: args.spent,
            clock: args.clock,
            run_token: args.run_token,
            cause: None,
            timer,
            tool_calls: args.allowance,
            booked,
            rule: args.tree,
        };
        for child in args.children {
            books.readmit(child);
        }
        books
    }

    /// A resumed run's live child: what is still reserved for it is set aside
    /// again, as at its spawn.
    fn readmit(&mut self, child: ChildBooks) {
        let ChildBooks {
            child_id,
            limits,
            spent,
        } = child;
        let mut allowance = set_aside(&limits, &self.limits);
        if self.limits.max_tool_calls.is_some() {
            allowance.tool_calls = limits.max_tool_calls.unwrap_or(0);
        }
        let mut outstanding = allowance.minus(&spent);
        // Tokens are reserved as one figure (in tokens_in), as at the spawn.
        outstanding.tokens_in = allowance.tokens_in.saturating_sub(spent.tokens());
        outstanding.tokens_out = 0;
        self.tool_calls.shift(-signed(outstanding.tool_calls));
        self.reserved = self.reserved.plus(&outstanding);
        self.spawned.push(child_id.clone());
        self.children.insert(child_id, outstanding);
    }

    /// The run is over: the alarm goes, the last tool calls are booked, and what
    /// this run did not use returns to its parent.
    pub(super) fn stop(&mut self) {
        if let Some(t) = self.timer.take() {
            t.disarm();
        }
        self.book_tool_calls();
        if let Some(p) = &self.parent {
            let _ = p.budget.cast(BudgetMsg::Release {
                child_id: p.child_id.clone(),
            });
        }
    }

    /// The budget now.
    #[inline]
    pub(super) fn snapshot(&self) -> BudgetSnapshot {
        BudgetSnapshot::new(self.limits, self.spent, self.elapsed_ms())
    }

    /// A child's limits and the allowance to reserve for them (see
    /// [`BudgetMsg::Reserve`]). On each dimension this node limits, the child
    /// gets what it asked for, or by default its share of what this node can
    /// give: what is left minus the reserve it keeps to wait and finish. Tool
    /// calls are taken from the tally, last, once everything else fits.
    fn carve(&self, request: &BudgetLimits) -> Result<Carved, Shortfall> {
        let mine = &self.limits;
        let left = mine.left(&self.committed());
        let give = Give {
            share: self.rule.child_share,
        };
        let wall_left = mine
            .deadline_ms
            .map(|d| d.saturating_sub(self.elapsed_ms()));
        let deadline_ms = match (request.deadline_ms, wall_left) {
            (Some(r), Some(w)) => Some(r.min(w)),
            (r, w) => r.or(w),
        };
        let reserve = self.rule.parent_reserve;
        let mut limits = BudgetLimits {
            max_steps: give.on(
                "steps",
                request.max_steps,
                mine.max_steps,
                left.steps,
                reserve.steps,
            )?,
            // Set from the tally below when limited here.
            max_tool_calls: request.max_tool_calls,
            max_tokens: give.on(
                "tokens",
                request.max_tokens,
                mine.max_tokens,
                left.tokens_in,
                0,
            )?,
            max_cost_micros: give.on(
                "cost_micros",
                request.max_cost_micros,
                mine.max_cost_micros,
                left.cost_micros,
                0,
            )?,
            deadline_ms,
            max_retries: give.on(
                "retries",
                request.max_retries,
                mine.max_retries,
                left.retries,
                0,
            )?,
            max_ticks: give.on("ticks", request.max_ticks, mine.max_ticks, left.ticks, 0)?,
        };
        let mut allowance = set_aside(&limits, mine);
        mine.covers(&self.committed(), &allowance)?;
        if let Some(max) = mine.max_tool_calls {
            let calls = self
                .tool_calls
                .carve(request.max_tool_calls, reserve.tool_calls, give.share)
                .map_err(|left| Shortfall {
                    dimension: "tool_calls",
                    asked: request.max_tool_calls,
                    left,
                    kept: reserve.tool_calls.min(left),
                    limit: max,
                })?;
            limits.max_tool_calls = Some(calls);
            allowance.tool_calls = calls;
        }
        Ok(Carved { limits, allowance })
    }

    /// Check-before-spend of `charge`: refused past the deadline, once the run
    /// is stopping, or when a limit would be passed; otherwise spent.
    #[inline]
    pub(super) fn spend(&mut self, charge: Usage) -> SpendReply {
        if self.deadline_passed() {
            self.cancel(StopReason::Deadline);
            return SpendReply::Refused(StopReason::Deadline);
        }
        if let Some(cause) = self.cause {
            return SpendReply::Refused(cause);
        }
        if let Err(reason) = self.limits.check(&self.committed(), &charge) {
            return SpendReply::Refused(reason);
        }
        // Tool calls in a spend come out of what the conductor takes from too.
        if charge.tool_calls > 0
            && self.limits.max_tool_calls.is_some()
            && self
                .tool_calls
                .carve(Some(charge.tool_calls), 0, self.rule.child_share)
                .is_err()
        {
            return SpendReply::Refused(StopReason::MaxToolCalls);
        }
        let before = self.snapshot();
        self.record(charge);
        SpendReply::Granted {
            before,
            delegated: self.delegated,
        }
    }

    /// Check, then spend, one automatic retry.
    pub(super) fn spend_retry(&mut self) -> bool {
        let ok = self.cause.is_none()
            && !self.deadline_passed()
            && self.limits.allows_retry(&self.committed());
        if ok {
            self.record(Usage {
                retries: 1,
                ..Usage::default()
            });
        }
        ok
    }

    /// Records usage already incurred (a model turn), with no check.
    pub(super) fn charge(&mut self, usage: Usage) {
        self.tool_calls.shift(-signed(usage.tool_calls));
        self.record(usage);
    }

    /// Carves a child's budget ([`BudgetMsg::Reserve`]) and sets it aside: the
    /// child's limits and this node's absolute deadline, or why not.
    pub(super) fn reserve(
        &mut self,
        child_id: String,
        request: &BudgetLimits,
    ) -> Result<ChildGrant, ReserveRefused> {
        let answer = match self.cause {
            Some(cause) => Err(ReserveRefused::ParentStopping(cause)),
            None => self.carve(request).map_err(ReserveRefused::Uncovered),
        };
        let deadline_at = self.clock.deadline_at;
        answer.map(|Carved { limits, allowance }| {
            self.spawned.push(child_id.clone());
            self.reserved = self.reserved.plus(&allowance);
            let entry = self.children.entry(child_id).or_default();
            *entry = entry.plus(&allowance);
            ChildGrant {
                limits,
                deadline_at,
            }
        })
    }

    /// A child (or a descendant through it) spent `usage`.
    pub(super) fn child_spent(&mut self, child_id: &str, usage: Usage) {
        // The child's reservation shrinks by what it spent; what it spent
        // beyond it (tokens known only after a model turn) is spent here too.
        let covered = if let Some(outstanding) = self.children.get_mut(child_id) {
            let mut covered = outstanding.min(&usage);
            // Tokens are reserved as one figure (in tokens_in).
            covered.tokens_in = outstanding.tokens_in.min(usage.tokens());
            covered.tokens_out = 0;
            *outstanding = outstanding.minus(&covered);
            self.reserved = self.reserved.minus(&covered);
            covered
        } else {
            Usage::default()
        };
        // Calls beyond the reservation are not left here any more.
        let beyond = usage.tool_calls - covered.tool_calls;
        self.tool_calls.shift(-signed(beyond));
        self.delegated = self.delegated.plus(&usage);
        self.record(usage);
    }

    /// A child ended: what it did not use of its reservation returns — at
    /// once, or for a held child when it is collected.
    pub(super) fn release(&mut self, child_id: &str) {
        let held = self.held.remove(child_id);
        if let Some(outstanding) = self.children.remove(child_id) {
            if held {
                self.returning.insert(child_id.to_string(), outstanding);
            } else {
                self.give_back(outstanding);
            }
        }
    }

    /// Child `child_id`'s release waits for [`BudgetState::collect`].
    pub(super) fn hold(&mut self, child_id: String) {
        self.held.insert(child_id);
    }

    /// The parent's model learnt that held child `child_id` ended: what it did
    /// not use returns (or will, at once, when it ends).
    pub(super) fn collect(&mut self, child_id: &str) {
        match self.returning.remove(child_id) {
            Some(outstanding) => self.give_back(outstanding),
            None => {
                self.held.remove(child_id);
            }
        }
    }

    fn give_back(&mut self, outstanding: Usage) {
        self.reserved = self.reserved.minus(&outstanding);
        self.tool_calls.shift(signed(outstanding.tool_calls));
    }

    /// Every child ever carved from this node, in spawn order.
    pub(super) fn spawned(&self) -> Vec<String> {
        self.spawned.clone()
    }

    /// The most a child could be given now ([`BudgetMsg::Delegable`]).
    pub(super) fn delegable(&self) -> BudgetLimits {
        let (mine, keep) = (&self.limits, self.rule.parent_reserve);
        let left = mine.left(&self.committed());
        let give =
            |limit: Option<u64>, left: u64, kept: u64| limit.map(|_| left.saturating_sub(kept));
        BudgetLimits {
            max_steps: give(mine.max_steps, left.steps, keep.steps),
            max_tool_calls: give(mine.max_tool_calls, self.tool_calls.left(), keep.tool_calls),
            max_tokens: give(mine.max_tokens, left.tokens_in, 0),
            max_cost_micros: give(mine.max_cost_micros, left.cost_micros, 0),
            deadline_ms: mine
                .deadline_ms
                .map(|d| d.saturating_sub(self.elapsed_ms())),
            max_retries: give(mine.max_retries, left.retries, 0),
            max_ticks: give(mine.max_ticks, left.ticks, 0),
        }
    }

    /// How many children are still running.
    pub(super) fn live_children(&self) -> usize {
        self.children.len()
    }

    /// Why the run's token was cancelled (or is about to be: the deadline
    /// passed), if it was.
    pub(super) fn stop_cause(&self) -> Option<StopReason> {
        self.cause
            .or_else(|| self.deadline_passed().then_some(StopReason::Deadline))
    }

    /// Spent plus reserved for children: what this node's own checks count.
    #[inline]
    fn committed(&self) -> Usage {
        self.spent.plus(&self.reserved)
    }

    /// Records a spend and charges it to every ancestor (accounting only: the
    /// spend already fits this node's allowance, which the ancestors reserved).
    fn record(&mut self, usage: Usage) {
        self.spent = self.spent.plus(&usage);
        if let Some(p) = &self.parent {
            let _ = p.budget.cast(BudgetMsg::ChildSpent {
                child_id: p.child_id.clone(),
                usage,
            });
        }
    }

    /// Books the tool calls the conductor granted since the last message.
    #[inline]
    pub(super) fn book_tool_calls(&mut self) {
        let n = self.tool_calls.take_booked(&mut self.booked);
        if n > 0 {
            self.record(Usage::tool_calls(n));
        }
    }

    #[inline]
    fn elapsed_ms(&self) -> u64 {
        self.clock.elapsed_ms()
    }

    #[inline]
    fn deadline_passed(&self) -> bool {
        self.clock.deadline_passed()
    }

    /// Stops the run for `reason` (the first cause given stays).
    pub(super) fn cancel(&mut self, reason: StopReason) {
        if self.cause.is_none() {
            self.cause = Some(reason);
        }
        self.run_token.cancel();
    }
}

/// What to set aside for a child with these `limits`: only what `mine` limits
/// (tool calls are taken from the tally separately).
fn set_aside(limits: &BudgetLimits, mine: &BudgetLimits) -> Usage {
    let on = |child: Option<u64>, limit: Option<u64>| limit.and(child).unwrap_or(0);
    Usage {
        steps: on(limits.max_steps, mine.max_steps),
        tool_calls: 0,
        tokens_in: on(limits.max_tokens, mine.max_tokens),
        tokens_out: 0,
        cost_micros: on(limits.max_cost_micros, mine.max_cost_micros),
        retries: on(limits.max_retries, mine.max_retries),
        ticks: on(limits.max_ticks, mine.max_ticks),
        ..Usage::default()
    }
}

/// How a child's amount on one dimension is chosen.
struct Give {
    share: ChildShare,
}

impl Give {
    /// The child's limit on one dimension: unlimited when this node does not
    /// limit it and the child asked for no limit; what it asked for when that
    /// fits in what this node can give (`left` minus the `kept` reserve); by
    /// default its share of that. Asking for more, or a share of nothing, is
    /// refused naming the dimension.
    fn on(
        &self,
        dimension: &'static str,
        asked: Option<u64>,
        limit: Option<u64>,
        left: u64,
        kept: u64,
    ) -> Result<Option<u64>, Shortfall> {
        let Some(limit) = limit else {
            return Ok(asked);
        };
        let kept = kept.min(left);
        let available = left - kept;
        let amount = asked.unwrap_or_else(|| self.share.of(available));
        if amount > available || amount == 0 && asked.is_none() {
            return Err(Shortfall {
                dimension,
                asked,
                left,
                kept,
                limit,
            });
        }
        Ok(Some(amount))
    }
}

/// A child's limits as carved, and what to set aside here for them.
struct Carved {
    limits: BudgetLimits,
    allowance: Usage,
}
