//! The agent tree's shape limits and how budgets pass down it: a leaf module
//! (the budget supervisor and the run configuration both name it).

use serde::{Deserialize, Serialize};

/// Shape limits of an agent tree and how budgets are passed down it, set on the
/// root and inherited by every child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeLimits {
    /// Deepest allowed child (the root is depth 0).
    pub max_depth: u32,
    /// Most children one run may have running at once.
    pub max_children: usize,
    /// What a parent keeps for itself when it starts a child (`[tree] parent_reserve`).
    #[serde(default)]
    pub parent_reserve: ParentReserve,
    /// A child's default share of what its parent can give (`[tree] child_share`).
    #[serde(default)]
    pub child_share: ChildShare,
}

impl Default for TreeLimits {
    fn default() -> Self {
        TreeLimits {
            max_depth: 4,
            max_children: 8,
            parent_reserve: ParentReserve::default(),
            child_share: ChildShare::default(),
        }
    }
}

/// Steps and tool calls a parent never gives to a child, so that it can always
/// wait on its children and finish: one step of `agent.wait` (one call waits on
/// them all), one step for `task.finish`. Applies to dimensions the parent limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentReserve {
    /// Steps kept (default 2).
    pub steps: u64,
    /// Tool calls kept (default 2).
    pub tool_calls: u64,
}

impl Default for ParentReserve {
    fn default() -> Self {
        ParentReserve {
            steps: 2,
            tool_calls: 2,
        }
    }
}

/// The share of what a parent can give (what it has left minus its reserve)
/// that a child gets on a dimension its request leaves unset: at least one
/// unit when anything is available. Kept in thousandths so it compares exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildShare {
    per_mille: u16,
}

impl ChildShare {
    /// `per_mille` thousandths, clamped to 1..=1000.
    pub fn per_mille(per_mille: u16) -> ChildShare {
        ChildShare {
            per_mille: per_mille.clamp(1, 1000),
        }
    }

    /// The share as thousandths.
    pub fn as_per_mille(self) -> u16 {
        self.per_mille
    }

    /// A child's default amount out of `available`: the share, rounded down,
    /// but at least 1 when anything is available.
    pub fn of(self, available: u64) -> u64 {
        let share = u128::from(available) * u128::from(self.per_mille) / 1000;
        u64::try_from(share)
            .unwrap_or(available)
            .clamp(available.min(1), available)
    }
}

impl Default for ChildShare {
    /// One half.
    fn default() -> Self {
        ChildShare { per_mille: 500 }
    }
}

#[cfg(test)]
mod tests {
    use super::ChildShare;

    #[test]
    fn a_childs_share_rounds_down_but_is_never_nothing_when_something_is_available() {
        let half = ChildShare::default();
        assert_eq!([0, 1, 2, 7, 17].map(|n| half.of(n)), [0, 1, 1, 3, 8]);
        let all = ChildShare::per_mille(1000);
        assert_eq!(all.of(9), 9);
        // Clamped: a share never exceeds what is available.
        assert_eq!(ChildShare::per_mille(5000).of(4), 4);
        assert_eq!(ChildShare::per_mille(0).as_per_mille(), 1);
        assert_eq!(half.of(u64::MAX), u64::MAX / 2);
    }
}
