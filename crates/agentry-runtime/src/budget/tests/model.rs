//! An independent model of the budget algebra: the oracle of the budget
//! property tests (`tree.rs`, `props.rs`).
//!
//! Written from the documented rules — README's `[budget]` keys ("step max+1 is
//! refused, never run"; tokens and money: the next model turn is refused once
//! the limit is reached, a turn that crosses it is still recorded) and
//! ARCHITECTURE.md "Budget supervisor" (per node and
//! dimension: limit L, subtree spent S, reserved for live children R; reserve
//! needs S + R + a ≤ L − K, where K is the parent's reserve (2 steps and 2 tool
//! calls by default, `[tree] parent_reserve`; nothing on other dimensions), an
//! unset request on a limited dimension gets half of L − K − S − R rounded down
//! but at least 1, and is refused when that is nothing (`[tree] child_share`);
//! charge-up S += c, R -= min(c, outstanding); release R -= outstanding) —
//! and never by calling `BudgetLimits::check`, `covers` or the supervisor, so a
//! mistake there cannot hide in the oracle as well. Deadlines are not modelled
//! (the properties set none).

use std::collections::BTreeMap;

use agentry_protocol::budget::{BudgetLimits, Usage};
use agentry_protocol::stop::StopReason;

/// A dimension of the budget vector. Tokens in and out are one figure, as
/// their limit counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dim {
    Steps,
    ToolCalls,
    Tokens,
    Cost,
    Retries,
    Ticks,
}

const DIMS: usize = 6;

impl Dim {
    pub(crate) const ALL: [Dim; DIMS] = [
        Dim::Steps,
        Dim::ToolCalls,
        Dim::Tokens,
        Dim::Cost,
        Dim::Retries,
        Dim::Ticks,
    ];

    /// The stop reason of a spend refused on this dimension (running out of
    /// retries stops nothing).
    pub(crate) fn stop_reason(self) -> Option<StopReason> {
        match self {
            Dim::Steps => Some(StopReason::MaxSteps),
            Dim::ToolCalls => Some(StopReason::MaxToolCalls),
            Dim::Tokens => Some(StopReason::MaxTokens),
            Dim::Cost => Some(StopReason::MaxCost),
            Dim::Retries => None,
            Dim::Ticks => Some(StopReason::MaxTicks),
        }
    }

    /// How a refused reservation names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Dim::Steps => "steps",
            Dim::ToolCalls => "tool_calls",
            Dim::Tokens => "tokens",
            Dim::Cost => "cost_micros",
            Dim::Retries => "retries",
            Dim::Ticks => "ticks",
        }
    }

    /// Tokens and money are known only after a model turn, so a turn may cross
    /// their limit; the other dimensions are checked before anything is spent.
    pub(crate) fn may_overshoot(self) -> bool {
        matches!(self, Dim::Tokens | Dim::Cost)
    }
}

/// On every dimension `limits` limits, `amounts` stays within it; tokens and
/// money may pass it by `slack` (what model turns that crossed it charged: a
/// turn's cost is known only once it is spent).
pub(crate) fn within(
    limits: &BudgetLimits,
    amounts: &Amounts,
    slack: &Amounts,
) -> Result<(), String> {
    let limits = Limits::of(limits);
    for d in Dim::ALL {
        let Some(l) = limits.get(d) else { continue };
        let allowed = if d.may_overshoot() {
            l + slack.get(d)
        } else {
            l
        };
        if amounts.get(d) > allowed {
            return Err(format!(
                "{} at {} over its limit {l} (+{} for turns that crossed it)",
                d.name(),
                amounts.get(d),
                allowed - l
            ));
        }
    }
    Ok(())
}

/// Whether a refusal for `reason` names one of the dimensions the model says
/// are exhausted.
pub(crate) fn justified(reason: StopReason, dims: &[Dim]) -> bool {
    dims.iter().any(|d| d.stop_reason() == Some(reason))
}

/// One figure per dimension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Amounts([u64; DIMS]);

impl Amounts {
    pub(crate) fn of(u: &Usage) -> Self {
        Amounts([
            u.steps,
            u.tool_calls,
            u.tokens_in + u.tokens_out,
            u.cost_micros,
            u.retries,
            u.ticks,
        ])
    }

    pub(crate) fn get(&self, d: Dim) -> u64 {
        self.0[d as usize]
    }

    fn set(&mut self, d: Dim, v: u64) {
        self.0[d as usize] = v;
    }

    /// Per dimension, the larger of the two.
    pub(crate) fn max(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for d in Dim::ALL {
            out.set(d, self.get(d).max(other.get(d)));
        }
        out
    }

    pub(crate) fn plus(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for d in Dim::ALL {
            out.set(d, self.get(d) + other.get(d));
        }
        out
    }

    /// Per dimension, what is left of `self` after `other` (never below zero).
    pub(crate) fn less(&self, other: &Amounts) -> Amounts {
        let mut out = *self;
        for d in Dim::ALL {
            out.set(d, self.get(d).saturating_sub(other.get(d)));
        }
        out
    }
}

/// A limit per dimension; `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Limits([Option<u64>; DIMS]);

impl Limits {
    pub(crate) fn of(l: &BudgetLimits) -> Self {
        Limits([
            l.max_steps,
            l.max_tool_calls,
            l.max_tokens,
            l.max_cost_micros,
            l.max_retries,
            l.max_ticks,
        ])
    }

    pub(crate) fn get(&self, d: Dim) -> Option<u64> {
        self.0[d as usize]
    }

    fn budget(&self) -> BudgetLimits {
        limits_of(self.0)
    }
}

/// What a parent limited by `parent` sets aside for a child carved with
/// `child`: the child's limit on every dimension the parent limits.
/// The limits on the model's dimensions, in [`Dim`] order, no deadline.
pub(crate) fn limits_of(dims: [Option<u64>; DIMS]) -> BudgetLimits {
    let [s, t, k, c, r, i] = dims;
    BudgetLimits {
        max_steps: s,
        max_tool_calls: t,
        max_tokens: k,
        max_cost_micros: c,
        deadline_ms: None,
        max_retries: r,
        max_ticks: i,
    }
}

pub(crate) fn allowance(parent: &BudgetLimits, child: &BudgetLimits) -> Amounts {
    let (parent, child) = (Limits::of(parent), Limits::of(child));
    let mut out = Amounts::default();
    for d in Dim::ALL {
        if parent.get(d).is_some() {
            out.set(d, child.get(d).unwrap_or(0));
        }
    }
    out
}

/// Field-wise sum of two usage vectors (the model's own arithmetic).
pub(crate) fn add(a: &Usage, b: &Usage) -> Usage {
    Usage {
        steps: a.steps + b.steps,
        tool_calls: a.tool_calls + b.tool_calls,
        tokens_in: a.tokens_in + b.tokens_in,
        tokens_out: a.tokens_out + b.tokens_out,
        cost_micros: a.cost_micros + b.cost_micros,
        retries: a.retries + b.retries,
        ticks: a.ticks + b.ticks,
        cache_read_tokens: a.cache_read_tokens + b.cache_read_tokens,
        cache_write_tokens: a.cache_write_tokens + b.cache_write_tokens,
    }
}

/// One node of the tree.
#[derive(Debug, Clone)]
struct Node {
    limits: Limits,
    /// S: what this node and its whole subtree spent.
    spent: Usage,
    parent: Option<usize>,
    /// Per live child: what is still reserved for it (R is their sum).
    reserved: BTreeMap<usize, Amounts>,
}

/// What the model knows of a live node after a concurrent phase, to start from.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub(crate) id: usize,
    pub(crate) parent: Option<usize>,
    pub(crate) limits: BudgetLimits,
    /// What the parent reserved for it when it was carved.
    pub(crate) allowance: Amounts,
    pub(crate) spent: Usage,
}

/// The live nodes of a tree, by id.
#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    nodes: BTreeMap<usize, Node>,
}

impl Model {
    /// A tree of one root that has already spent `spent` (a resumed run).
    pub(crate) fn root(limits: &BudgetLimits, spent: Usage) -> Self {
        let mut nodes = BTreeMap::new();
        let root = Node {
            limits: Limits::of(limits),
            spent,
            parent: None,
            reserved: BTreeMap::new(),
        };
        nodes.insert(0, root);
        Model { nodes }
    }

    /// The tree as observed (parents listed before their children): each live
    /// child's outstanding reservation is its allowance minus what its subtree
    /// spent, on the dimensions its parent limits.
    pub(crate) fn observed(nodes: &[Observed]) -> Self {
        let mut model = Model::default();
        for o in nodes {
            let node = Node {
                limits: Limits::of(&o.limits),
                spent: o.spent,
                parent: o.parent,
                reserved: BTreeMap::new(),
            };
            model.nodes.insert(o.id, node);
            if let Some(p) = o.parent.and_then(|p| model.nodes.get_mut(&p)) {
                let outstanding = o.allowance.less(&Amounts::of(&o.spent));
                p.reserved.insert(o.id, outstanding);
            }
        }
        model
    }

    pub(crate) fn is_live(&self, v: usize) -> bool {
        self.nodes.contains_key(&v)
    }

    pub(crate) fn live(&self) -> Vec<usize> {
        self.nodes.keys().copied().collect()
    }

    pub(crate) fn parent(&self, v: usize) -> Option<usize> {
        self.nodes.get(&v).and_then(|n| n.parent)
    }

    pub(crate) fn children(&self, v: usize) -> Vec<usize> {
        self.nodes
            .get(&v)
            .map(|n| n.reserved.keys().copied().collect())
            .unwrap_or_default()
    }

    /// S of node `v`.
    pub(crate) fn spent(&self, v: usize) -> Usage {
        self.nodes.get(&v).map(|n| n.spent).unwrap_or_default()
    }

    /// R of node `v`.
    pub(crate) fn reserved(&self, v: usize) -> Amounts {
        self.nodes.get(&v).map_or_else(Amounts::default, |n| {
            n.reserved
                .values()
                .fold(Amounts::default(), |r, a| r.plus(a))
        })
    }

    /// S + R: what the node's own checks count.
    pub(crate) fn committed(&self, v: usize) -> Amounts {
        Amounts::of(&self.spent(v)).plus(&self.reserved(v))
    }

    fn limits_of(&self, v: usize) -> Limits {
        self.nodes.get(&v).map(|n| n.limits).unwrap_or_default()
    }

    /// L of node `v`.
    pub(crate) fn limits(&self, v: usize) -> BudgetLimits {
        self.limits_of(v).budget()
    }

    /// The dimensions that refuse a spend of `charge` at `v` (none: granted).
    /// Check before spend: after the spend every limited dimension (retries
    /// aside, which have their own rule) must stay within its limit; a model
    /// turn is refused as soon as tokens or money have reached theirs.
    fn refusals(&self, v: usize, charge: &Amounts, turn: bool) -> Vec<Dim> {
        let (limits, committed) = (self.limits_of(v), self.committed(v));
        Dim::ALL
            .into_iter()
            .filter(|&d| d != Dim::Retries)
            .filter(|&d| {
                limits.get(d).is_some_and(|l| {
                    let c = committed.get(d);
                    c + charge.get(d) > l || (turn && d.may_overshoot() && c >= l)
                })
            })
            .collect()
    }

    /// Why a spend of `charge` at `v` would be refused (empty: it is granted);
    /// a charge with steps is a model turn.
    pub(crate) fn refusals_of(&self, v: usize, charge: &Usage) -> Vec<Dim> {
        self.refusals(v, &Amounts::of(charge), charge.steps > 0)
    }

    /// Why a step at `v` would be refused (empty: it is granted).
    pub(crate) fn step_refusals(&self, v: usize) -> Vec<Dim> {
        self.refusals_of(v, &Usage::step())
    }

    /// Why a tick at `v` would be refused (empty: it is granted).
    pub(crate) fn tick_refusals(&self, v: usize) -> Vec<Dim> {
        let tick = Usage {
            ticks: 1,
            ..Usage::default()
        };
        self.refusals_of(v, &tick)
    }

    /// Whether one more automatic retry fits at `v`.
    pub(crate) fn retry_allowed(&self, v: usize) -> bool {
        let c = self.committed(v).get(Dim::Retries);
        self.limits_of(v).get(Dim::Retries).is_none_or(|l| c < l)
    }

    /// Tool calls `v` may still make (`None`: unlimited).
    pub(crate) fn tool_calls_left(&self, v: usize) -> Option<u64> {
        let c = self.committed(v).get(Dim::ToolCalls);
        self.limits_of(v)
            .get(Dim::ToolCalls)
            .map(|l| l.saturating_sub(c))
    }

    /// A child's limits carved at `v`, and what `v` reserves for it; or the
    /// dimensions that do not fit.
    pub(crate) fn carve(
        &self,
        v: usize,
        request: &BudgetLimits,
    ) -> Result<(BudgetLimits, Amounts), Vec<Dim>> {
        let (limits, committed) = (self.limits_of(v), self.committed(v));
        let wanted = Limits::of(request);
        let mut child = Limits::default();
        let mut allowance = Amounts::default();
        let mut misfits = Vec::new();
        for d in Dim::ALL {
            let Some(l) = limits.get(d) else {
                child.0[d as usize] = wanted.get(d);
                continue;
            };
            let kept = match d {
                Dim::Steps | Dim::ToolCalls => 2,
                Dim::Tokens | Dim::Cost | Dim::Retries | Dim::Ticks => 0,
            };
            let available = l.saturating_sub(committed.get(d)).saturating_sub(kept);
            let a = wanted.get(d).unwrap_or(if available == 0 {
                0
            } else {
                (available / 2).max(1)
            });
            child.0[d as usize] = Some(a);
            allowance.set(d, a);
            // An overdrawn node (a turn crossed its token limit) gives nothing,
            // not even a zero allowance.
            let overdrawn = committed.get(d) + a > l;
            if overdrawn || a > available || (a == 0 && wanted.get(d).is_none()) {
                misfits.push(d);
            }
        }
        if misfits.is_empty() {
            Ok((child.budget(), allowance))
        } else {
            Err(misfits)
        }
    }

    /// What `v` has left of its own on the dimensions a parent keeps a reserve
    /// on (steps, tool calls): L − S − R, `None` where unlimited.
    pub(crate) fn own_left(&self, v: usize) -> [Option<u64>; 2] {
        let (limits, committed) = (self.limits_of(v), self.committed(v));
        [Dim::Steps, Dim::ToolCalls]
            .map(|d| limits.get(d).map(|l| l.saturating_sub(committed.get(d))))
    }

    /// Records child `c` of `v`, carved with these limits and this allowance.
    pub(crate) fn add_child(
        &mut self,
        v: usize,
        c: usize,
        limits: &BudgetLimits,
        allowance: Amounts,
    ) {
        if let Some(p) = self.nodes.get_mut(&v) {
            p.reserved.insert(c, allowance);
        }
        let node = Node {
            limits: Limits::of(limits),
            spent: Usage::default(),
            parent: Some(v),
            reserved: BTreeMap::new(),
        };
        self.nodes.insert(c, node);
    }

    /// `v` spent `usage` (granted, or charged after a turn): S grows at `v` and
    /// at every ancestor, and each ancestor's reservation for the child on the
    /// path shrinks by what it covers.
    pub(crate) fn spend(&mut self, v: usize, usage: &Usage) {
        let amounts = Amounts::of(usage);
        let mut below = None;
        let mut at = Some(v);
        while let Some(n) = at.and_then(|a| self.nodes.get_mut(&a)) {
            n.spent = add(&n.spent, usage);
            if let Some(out) = below.and_then(|c| n.reserved.get_mut(&c)) {
                *out = out.less(&amounts);
            }
            below = at;
            at = n.parent;
        }
    }

    /// `v` ended (its children first): what its parent still reserved for it
    /// returns.
    pub(crate) fn release(&mut self, v: usize) {
        if let Some(node) = self.nodes.remove(&v)
            && let Some(p) = node.parent.and_then(|p| self.nodes.get_mut(&p))
        {
            p.reserved.remove(&v);
        }
    }
}
