//! The budget vector: limits, usage, and the check-before-spend rule.

use serde::{Deserialize, Serialize};

use crate::stop::StopReason;

/// Usage on every dimension of the budget vector (also used as a charge).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Steps (model turns).
    pub steps: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Input (prompt) tokens.
    pub tokens_in: u64,
    /// Output (completion) tokens.
    pub tokens_out: u64,
    /// Money, in micro-units.
    pub cost_micros: u64,
    /// Automatic retries of failed tool calls.
    #[serde(default)]
    pub retries: u64,
    /// Timer ticks that woke the agent.
    #[serde(default)]
    pub ticks: u64,
    /// Of `tokens_in`, those read from the provider's prompt cache. Not a
    /// limit: cached tokens are charged to the token budget as `tokens_in`.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Of `tokens_in`, those written to the provider's prompt cache. Not a
    /// limit, as `cache_read_tokens`.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// One step.
    pub fn step() -> Self {
        Usage {
            steps: 1,
            ..Usage::default()
        }
    }

    /// `n` tool calls.
    pub fn tool_calls(n: u64) -> Self {
        Usage {
            tool_calls: n,
            ..Usage::default()
        }
    }

    /// Nothing spent.
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// Component-wise saturating sum.
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage {
            steps: self.steps.saturating_add(other.steps),
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
            tokens_in: self.tokens_in.saturating_add(other.tokens_in),
            tokens_out: self.tokens_out.saturating_add(other.tokens_out),
            cost_micros: self.cost_micros.saturating_add(other.cost_micros),
            retries: self.retries.saturating_add(other.retries),
            ticks: self.ticks.saturating_add(other.ticks),
            cache_read_tokens: self
                .cache_read_tokens
                .saturating_add(other.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_add(other.cache_write_tokens),
        }
    }

    /// Component-wise saturating difference.
    pub fn minus(&self, other: &Usage) -> Usage {
        Usage {
            steps: self.steps.saturating_sub(other.steps),
            tool_calls: self.tool_calls.saturating_sub(other.tool_calls),
            tokens_in: self.tokens_in.saturating_sub(other.tokens_in),
            tokens_out: self.tokens_out.saturating_sub(other.tokens_out),
            cost_micros: self.cost_micros.saturating_sub(other.cost_micros),
            retries: self.retries.saturating_sub(other.retries),
            ticks: self.ticks.saturating_sub(other.ticks),
            cache_read_tokens: self
                .cache_read_tokens
                .saturating_sub(other.cache_read_tokens),
            cache_write_tokens: self
                .cache_write_tokens
                .saturating_sub(other.cache_write_tokens),
        }
    }

    /// Component-wise minimum.
    pub fn min(&self, other: &Usage) -> Usage {
        Usage {
            steps: self.steps.min(other.steps),
            tool_calls: self.tool_calls.min(other.tool_calls),
            tokens_in: self.tokens_in.min(other.tokens_in),
            tokens_out: self.tokens_out.min(other.tokens_out),
            cost_micros: self.cost_micros.min(other.cost_micros),
            retries: self.retries.min(other.retries),
            ticks: self.ticks.min(other.ticks),
            cache_read_tokens: self.cache_read_tokens.min(other.cache_read_tokens),
            cache_write_tokens: self.cache_write_tokens.min(other.cache_write_tokens),
        }
    }

    /// Total tokens, in and out.
    pub fn tokens(&self) -> u64 {
        self.tokens_in.saturating_add(self.tokens_out)
    }
}

/// Limits on each dimension; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetLimits {
    /// Maximum steps.
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// Maximum tool calls.
    #[serde(default)]
    pub max_tool_calls: Option<u64>,
    /// Maximum tokens (in + out).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Maximum money, in micro-units.
    #[serde(default)]
    pub max_cost_micros: Option<u64>,
    /// Wall-clock deadline, in milliseconds after the run starts.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Automatic tool-call retries for the whole run. Running out is not a stop
    /// reason: the failure is simply reported without another attempt.
    #[serde(default)]
    pub max_retries: Option<u64>,
    /// Timer ticks (time-driven agents).
    #[serde(default)]
    pub max_ticks: Option<u64>,
}

impl BudgetLimits {
    /// Checks whether `spent + charge` stays within every limit, *before* spending.
    /// Returns the stop reason of the first exhausted dimension otherwise. Retries
    /// are checked separately ([`BudgetLimits::allows_retry`]).
    ///
    /// Tokens and cost are checked as "already over": a model turn's token count is
    /// only known afterwards, so the next turn is refused once the limit is reached.
    pub fn check(&self, spent: &Usage, charge: &Usage) -> Result<(), StopReason> {
        let after = spent.plus(charge);
        let over = |limit: Option<u64>, value: u64| limit.is_some_and(|l| value > l);
        if charge.steps > 0 && over(self.max_steps, after.steps) {
            return Err(StopReason::MaxSteps);
        }
        if charge.tool_calls > 0 && over(self.max_tool_calls, after.tool_calls) {
            return Err(StopReason::MaxToolCalls);
        }
        if self
            .max_tokens
            .is_some_and(|l| spent.tokens() >= l && charge.steps > 0)
            || over(self.max_tokens, after.tokens())
        {
            return Err(StopReason::MaxTokens);
        }
        if self
            .max_cost_micros
            .is_some_and(|l| spent.cost_micros >= l && charge.steps > 0)
            || over(self.max_cost_micros, after.cost_micros)
        {
            return Err(StopReason::MaxCost);
        }
        if charge.ticks > 0 && over(self.max_ticks, after.ticks) {
            return Err(StopReason::MaxTicks);
        }
        Ok(())
    }
}

/// Why a child's budget does not fit in what its parent can give: the first
/// limited dimension that falls short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shortfall {
    /// The dimension (`steps`, `tool_calls`, `tokens`, `cost_micros`,
    /// `retries`, `ticks`).
    pub dimension: &'static str,
    /// What the child asked for on it; `None` when it named no amount and its
    /// share of what the parent can give came to nothing.
    pub asked: Option<u64>,
    /// What the parent has left of it.
    pub left: u64,
    /// What of that the parent keeps for itself (its reserve), never given away.
    pub kept: u64,
    /// The parent's limit on it.
    pub limit: u64,
}

impl Shortfall {
    /// What the parent can give a child on this dimension.
    pub fn available(&self) -> u64 {
        self.left.saturating_sub(self.kept)
    }
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (dim, left, limit, kept) = (self.dimension, self.left, self.limit, self.kept);
        match self.asked {
            Some(asked) if kept == 0 => write!(
                f,
                "{dim}: the child asked for {asked} but only {left} of {limit} are left"
            ),
            Some(asked) => write!(
                f,
                "{dim}: the child asked for {asked} but only {} are available ({left} of {limit} left, {kept} kept for the parent to wait and finish)",
                self.available()
            ),
            None => write!(
                f,
                "{dim}: nothing is available for a child ({left} of {limit} left, {kept} kept for the parent to wait and finish)"
            ),
        }
    }
}

impl std::error::Error for Shortfall {}

impl BudgetLimits {
    /// Whether `allowance` can be reserved for a child on top of `committed`
    /// (spent + already reserved): on every limited dimension the sum must stay
    /// within the limit. The error names the first dimension that does not fit.
    pub fn covers(&self, committed: &Usage, allowance: &Usage) -> Result<(), Shortfall> {
        let after = committed.plus(allowance);
        let dims = [
            ("steps", self.max_steps, after.steps, committed.steps),
            (
                "tool_calls",
                self.max_tool_calls,
                after.tool_calls,
                committed.tool_calls,
            ),
            (
                "tokens",
                self.max_tokens,
                after.tokens(),
                committed.tokens(),
            ),
            (
                "cost_micros",
                self.max_cost_micros,
                after.cost_micros,
                committed.cost_micros,
            ),
            (
                "retries",
                self.max_retries,
                after.retries,
                committed.retries,
            ),
            ("ticks", self.max_ticks, after.ticks, committed.ticks),
        ];
        for (name, limit, wanted, used) in dims {
            if let Some(limit) = limit
                && wanted > limit
            {
                return Err(Shortfall {
                    dimension: name,
                    asked: Some(wanted - used),
                    left: limit.saturating_sub(used),
                    kept: 0,
                    limit,
                });
            }
        }
        Ok(())
    }

    /// What is left on each limited dimension after `committed`, as a usage
    /// vector (unlimited dimensions are `u64::MAX`).
    pub fn left(&self, committed: &Usage) -> Usage {
        let left = |l: Option<u64>, v: u64| l.map_or(u64::MAX, |l| l.saturating_sub(v));
        Usage {
            steps: left(self.max_steps, committed.steps),
            tool_calls: left(self.max_tool_calls, committed.tool_calls),
            tokens_in: left(self.max_tokens, committed.tokens()),
            tokens_out: left(self.max_tokens, committed.tokens()),
            cost_micros: left(self.max_cost_micros, committed.cost_micros),
            retries: left(self.max_retries, committed.retries),
            ticks: left(self.max_ticks, committed.ticks),
            // Not limits of their own: part of the tokens above.
            cache_read_tokens: u64::MAX,
            cache_write_tokens: u64::MAX,
        }
    }

    /// Whether one more automatic retry fits.
    pub fn allows_retry(&self, spent: &Usage) -> bool {
        self.max_retries.is_none_or(|l| spent.retries < l)
    }
}

/// What is left on each dimension; `None` means unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remaining {
    /// Steps left.
    pub steps_left: Option<u64>,
    /// Tool calls left.
    pub tool_calls_left: Option<u64>,
    /// Tokens left.
    pub tokens_left: Option<u64>,
    /// Money left, in micro-units.
    pub cost_micros_left: Option<u64>,
    /// Milliseconds until the deadline.
    pub wall_ms_left: Option<u64>,
}

/// A point-in-time view of the budget, as written to the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetSnapshot {
    /// The limits.
    pub limits: BudgetLimits,
    /// What has been spent.
    pub spent: Usage,
    /// What is left.
    pub remaining: Remaining,
    /// Milliseconds since the run started.
    pub elapsed_ms: u64,
}

impl BudgetSnapshot {
    /// Builds a snapshot from limits, usage and elapsed time.
    pub fn new(limits: BudgetLimits, spent: Usage, elapsed_ms: u64) -> Self {
        let left = |l: Option<u64>, v: u64| l.map(|l| l.saturating_sub(v));
        BudgetSnapshot {
            limits,
            spent,
            remaining: Remaining {
                steps_left: left(limits.max_steps, spent.steps),
                tool_calls_left: left(limits.max_tool_calls, spent.tool_calls),
                tokens_left: left(limits.max_tokens, spent.tokens()),
                cost_micros_left: left(limits.max_cost_micros, spent.cost_micros),
                wall_ms_left: left(limits.deadline_ms, elapsed_ms),
            },
            elapsed_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortfall_names_the_dimension_what_was_asked_and_what_is_left() {
        let limits = BudgetLimits {
            max_steps: Some(10),
            ..Default::default()
        };
        let committed = Usage {
            steps: 4,
            ..Default::default()
        };
        let allowance = Usage {
            steps: 7,
            ..Default::default()
        };
        let short = limits.covers(&committed, &allowance).unwrap_err();
        assert_eq!(
            short.to_string(),
            "steps: the child asked for 7 but only 6 of 10 are left"
        );
    }

    #[test]
    fn a_shortfall_under_a_reserve_names_what_is_available() {
        let short = Shortfall {
            dimension: "tool_calls",
            asked: Some(9),
            left: 10,
            kept: 2,
            limit: 20,
        };
        assert_eq!(short.available(), 8);
        assert_eq!(
            short.to_string(),
            "tool_calls: the child asked for 9 but only 8 are available (10 of 20 left, 2 kept for the parent to wait and finish)"
        );
        let none = Shortfall {
            asked: None,
            left: 2,
            ..short
        };
        assert!(
            none.to_string()
                .starts_with("tool_calls: nothing is available")
        );
    }

    #[test]
    fn step_max_plus_one_is_refused() {
        let limits = BudgetLimits {
            max_steps: Some(3),
            ..Default::default()
        };
        let mut spent = Usage::default();
        for _ in 0..3 {
            limits.check(&spent, &Usage::step()).unwrap();
            spent = spent.plus(&Usage::step());
        }
        assert_eq!(
            limits.check(&spent, &Usage::step()),
            Err(StopReason::MaxSteps)
        );
    }

    #[test]
    fn tick_max_plus_one_is_refused() {
        let limits = BudgetLimits {
            max_ticks: Some(2),
            ..Default::default()
        };
        let tick = Usage {
            ticks: 1,
            ..Default::default()
        };
        let spent = tick.plus(&tick);
        assert_eq!(limits.check(&spent, &tick), Err(StopReason::MaxTicks));
        assert_eq!(limits.check(&tick, &tick), Ok(()));
    }

    #[test]
    fn tokens_at_limit_refuse_the_next_step() {
        let limits = BudgetLimits {
            max_tokens: Some(100),
            ..Default::default()
        };
        let spent = Usage {
            tokens_in: 60,
            tokens_out: 40,
            ..Default::default()
        };
        assert_eq!(
            limits.check(&spent, &Usage::step()),
            Err(StopReason::MaxTokens)
        );
        let spent = Usage {
            tokens_in: 60,
            ..Default::default()
        };
        assert_eq!(limits.check(&spent, &Usage::step()), Ok(()));
    }

    #[test]
    fn snapshot_reports_what_is_left() {
        let limits = BudgetLimits {
            max_steps: Some(8),
            deadline_ms: Some(1000),
            ..Default::default()
        };
        let snap = BudgetSnapshot::new(
            limits,
            Usage {
                steps: 3,
                ..Default::default()
            },
            250,
        );
        assert_eq!(snap.remaining.steps_left, Some(5));
        assert_eq!(snap.remaining.wall_ms_left, Some(750));
        assert_eq!(snap.remaining.tool_calls_left, None);
    }
}
