//! What a run needs to start.

use std::path::PathBuf;
use std::time::Duration;

use agentry_protocol::accept::AcceptCheck;
use agentry_protocol::budget::BudgetLimits;
use serde::{Deserialize, Serialize};

use crate::registry::Grants;

/// Default step limit when none is given: runs always stop.
pub const DEFAULT_MAX_STEPS: u64 = 50;
/// Default no-progress window.
pub const DEFAULT_PROGRESS_WINDOW: usize = 3;
/// Default number of permission denials in a row that stop a run.
pub const DEFAULT_MAX_DENIED: usize = 3;

fn default_max_denied() -> usize {
    DEFAULT_MAX_DENIED
}

fn default_result_cap() -> usize {
    agentry_protocol::envelope::DEFAULT_RESULT_CAP
}

/// Default bound on concurrently running calls of one step.
pub const DEFAULT_MAX_PARALLEL: usize = 8;

/// Backoff between automatic retries: `base · 2^(attempt-1)`, capped, with jitter
/// drawn from the upper half so retries of parallel calls do not line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Backoff before the first retry.
    pub base: Duration,
    /// Upper bound of any backoff.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_millis(50),
            max: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// The backoff after failed attempt `attempt` (from 1).
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16));
        let full = exp.min(self.max);
        let half = full / 2;
        half + Duration::from_micros(fastrand::u64(0..=half.as_micros() as u64))
    }
}

/// The longest run id accepted, in bytes.
pub const MAX_RUN_ID_BYTES: usize = 128;

/// Checks a run id chosen by a caller: non-empty, at most
/// [`MAX_RUN_ID_BYTES`], no whitespace or control characters (ids are typed
/// back in commands such as `agentry resume ID`), no `/` or `\\` and not `.`
/// or `..` (an id must never read as a path).
pub fn check_run_id(id: &str) -> Result<(), crate::RuntimeError> {
    let why = if id.is_empty() {
        Some("it is empty")
    } else if id.len() > MAX_RUN_ID_BYTES {
        Some("it is longer than 128 bytes")
    } else if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("it contains whitespace or a control character")
    } else if id.contains(['/', '\\']) || id == "." || id == ".." {
        Some("it contains a path separator or is a path component (. or ..)")
    } else {
        None
    };
    match why {
        Some(why) => Err(crate::RuntimeError::InvalidRunId {
            run_id: id.to_string(),
            message: why.to_string(),
        }),
        None => Ok(()),
    }
}

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

/// Which calls need a human decision before they run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalConfig {
    /// Tools (by name, scope, `prefix.*`, `*`) whose calls wait for approval.
    pub require: Grants,
    /// Every `irreversible_external` tool needs approval too (default true).
    pub irreversible: bool,
    /// How long a call waits before it is refused (`EPERM`); `None` waits until
    /// the run's deadline.
    pub timeout: Option<Duration>,
    /// Tools the operator approved up front (CLI `--approve`): their calls run
    /// without parking, even when `require` or `irreversible` would park them.
    #[serde(default)]
    pub pre_approved: Grants,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            require: Grants::new(Vec::<String>::new()),
            irreversible: true,
            timeout: Some(Duration::from_secs(300)),
            pre_approved: Grants::new(Vec::<String>::new()),
        }
    }
}

impl ApprovalConfig {
    /// Whether a call of this tool must wait for a human.
    pub fn required_for(&self, contract: &agentry_protocol::ToolContract) -> bool {
        contract.name != agentry_tools::FINISH_TOOL
            && !self.pre_approved.matches(contract)
            && (self.require.matches(contract)
                || (self.irreversible
                    && contract.effect == agentry_protocol::Effect::IrreversibleExternal))
    }
}

/// How a run decides when to take its next step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Driver {
    /// Step after step until the run stops (the default).
    #[default]
    Pull,
    /// Sleep on the mailbox; each user message, custom event or timer tick wakes
    /// the agent for a turn: a step, and after a step that called tools another
    /// at once (the model sees the results), until the model answers with text.
    /// A final text answer is a reply: the agent sleeps again; only
    /// `task.finish` (or a budget, an abort, the deadline) ends the run.
    Events,
}

/// Everything a run needs besides its policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Run id; a fresh UUIDv7 when `None`.
    pub run_id: Option<String>,
    /// Task id, for the trace.
    pub task_id: String,
    /// The goal, the first session entry.
    pub goal: String,
    /// Acceptance checks; none means "done when the model finishes".
    pub accept: Vec<AcceptCheck>,
    /// Budget limits.
    pub limits: BudgetLimits,
    /// Tools this run may call (`task.finish` is always allowed).
    pub grants: Grants,
    /// No-progress window: that many identical step fingerprints in a row stop the
    /// run with `no_progress`. 0 (or 1, which would stop every run) disables it.
    pub progress_window: usize,
    /// That many `EPERM` results in a row stop the run with
    /// `permission_denied`, naming the denied calls: a model does not get to try
    /// variations of a forbidden call until its budget runs out. 0 disables it.
    #[serde(default = "default_max_denied")]
    pub max_denied: usize,
    /// The working directory file tools are confined to. Must exist.
    pub workdir: PathBuf,
    /// Where to write the JSONL trace, if anywhere.
    pub trace: Option<PathBuf>,
    /// Where tools keep large artifacts (full process output); default
    /// `<workdir>/.agentry`, readable by the model through `fs.read`.
    pub artifacts: Option<PathBuf>,
    /// A result whose `data` is longer than this as JSON (bytes) is also saved
    /// whole in the artifact directory (`results/<sha256>.json`, referenced by
    /// the envelope's `saved`), for the model to read back in parts with
    /// `result.read`; the envelope keeps the whole data. Default
    /// [`DEFAULT_RESULT_CAP`](agentry_protocol::envelope::DEFAULT_RESULT_CAP).
    #[serde(default = "default_result_cap")]
    pub result_cap: usize,
    /// Bound on concurrently running parallel-safe calls of one step.
    pub max_parallel: usize,
    /// Backoff between automatic retries.
    pub retry: RetryPolicy,
    /// Keep the run's events from its very start for the first
    /// [`RunHandle::subscribe`](crate::RunHandle::subscribe) call (default). When
    /// false, subscribers see events from the moment they subscribe, and a run
    /// nobody listens to builds no events at all.
    pub events_from_start: bool,
    /// Which calls wait for a human decision.
    pub approval: ApprovalConfig,
    /// When the run steps.
    pub driver: Driver,
    /// Periodic ticks (`every`): each wakes one step of an event-driven agent and
    /// spends one tick of the budget; a tick due while the previous one still runs
    /// is skipped and counted, never stacked.
    pub tick_every: Option<Duration>,
    /// Depth and fan-out limits of the agent tree this run roots (ignored for a
    /// child, which inherits its root's).
    pub tree: TreeLimits,
    /// How to rebuild this run's policy when it is resumed from a store (e.g.
    /// `script:/abs/path/script.json`); kept with the run, read by whoever resumes
    /// it (the CLI does). Not used by the runtime itself.
    #[serde(default)]
    pub policy_spec: Option<String>,
}

impl RunConfig {
    /// A run with default limits (50 steps), read-only built-in grants, and the
    /// default no-progress window.
    pub fn new(goal: impl Into<String>, workdir: impl Into<PathBuf>) -> Self {
        RunConfig {
            run_id: None,
            task_id: "task".to_string(),
            goal: goal.into(),
            accept: Vec::new(),
            limits: BudgetLimits {
                max_steps: Some(DEFAULT_MAX_STEPS),
                ..BudgetLimits::default()
            },
            grants: Grants::new(["fs.read"]),
            progress_window: DEFAULT_PROGRESS_WINDOW,
            max_denied: DEFAULT_MAX_DENIED,
            workdir: workdir.into(),
            trace: None,
            artifacts: None,
            result_cap: default_result_cap(),
            max_parallel: DEFAULT_MAX_PARALLEL,
            retry: RetryPolicy::default(),
            events_from_start: true,
            approval: ApprovalConfig::default(),
            driver: Driver::Pull,
            tick_every: None,
            tree: TreeLimits::default(),
            policy_spec: None,
        }
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
