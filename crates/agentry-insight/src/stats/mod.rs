//! Run statistics, split by stop reason.
//!
//! Two steps: collect one [`RunFacts`] per finished run ([`runs_from_store`],
//! [`runs_from_traces`]), then [`aggregate`] them into a [`Report`]: one
//! [`Group`] per task (or model, or tool, [`GroupBy`]), each with its
//! [`Figures`] over all its runs and the same figures per stop reason.
//! [`from_store`] and [`from_traces`] do both.
//!
//! # Definitions
//! - **Success rate**: runs that stopped `done` / runs.
//! - **Percentiles** are nearest-rank: of `n` values sorted ascending, the
//!   p-th percentile is the value at 1-based rank `ceil(p / 100 * n)` (at
//!   least 1). It is always one of the values, so p50 ≤ p95 ≤ max holds.
//! - **Tool calls** are the results the run recorded, one per call the model
//!   proposed (refused ones too: an `EPERM` or `EINVAL` is a tool error of the
//!   call's tool); a call's error code is its result's. A replayed result
//!   counts as a call.
//! - **A run's spend** (steps, tokens, cost, retries) is its own: what its
//!   children spent is charged to its budget too, but counted under the
//!   children's own runs, never twice.
//! - **Wall time** runs from the run's start to its stop.
//! - **`since`** keeps the runs that stopped within that long before now.
//! - **By tool**: a run counts in the group of every tool it called (once per
//!   tool), and the group's tool figures are that tool's only; a run that
//!   called no tool is in the group [`NO_TOOL`].
//! - Runs that have not stopped are left out and counted in
//!   [`Report::unfinished`].

mod facts;
mod figures;
mod store;
mod trace;

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use agentry_protocol::UnixMillis;
use serde::Serialize;

pub use facts::{CallFact, RunFacts, Runs, StatsError};
pub use figures::{
    Cost, Distribution, Figures, Retries, Tokens, ToolCalls, ToolFigures, nearest_rank,
};
pub use store::runs_from_store;
pub use trace::runs_from_traces;

/// The group of runs that called no tool, when grouping by tool.
pub const NO_TOOL: &str = "(none)";

/// What the runs are grouped by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The task id (the default).
    #[default]
    Task,
    /// The model that took the run's turns.
    Model,
    /// Each tool the run called.
    Tool,
}

/// Which runs to count and how to group them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsOptions {
    /// Grouping.
    pub by: GroupBy,
    /// Keep only runs that stopped within this long before `now_ms`.
    pub since: Option<Duration>,
    /// "Now", for `since` (Unix ms).
    pub now_ms: UnixMillis,
}

impl StatsOptions {
    /// Grouped by `by`, every run, now being the wall clock.
    pub fn new(by: GroupBy) -> Self {
        StatsOptions {
            by,
            since: None,
            now_ms: agentry_protocol::now_millis(),
        }
    }

    /// Only runs that stopped within `since` before now.
    pub fn since(mut self, since: Duration) -> Self {
        self.since = Some(since);
        self
    }

    /// The earliest stop time counted, if `since` is set.
    fn cutoff_ms(&self) -> Option<UnixMillis> {
        let since = self.since?;
        let ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
        Some(self.now_ms.saturating_sub(ms))
    }
}

/// One group's figures: over all its runs, and per stop reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    /// The task id, model or tool name.
    pub key: String,
    /// Over every run of the group.
    pub all: Figures,
    /// The same figures over the runs that stopped for each reason (keyed by
    /// the reason's name, e.g. `"max_steps"`), only reasons some run had.
    pub by_stop_reason: BTreeMap<String, Figures>,
}

/// Statistics over a set of runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// How the groups are formed.
    pub by: GroupBy,
    /// The earliest stop time counted (Unix ms), with `since`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<UnixMillis>,
    /// Finished runs counted.
    pub runs: u64,
    /// Runs found that have not stopped (not counted anywhere else).
    pub unfinished: u64,
    /// Finished runs left out because they stopped before `since`.
    pub excluded: u64,
    /// The groups, by key.
    pub groups: Vec<Group>,
}

/// Statistics over every run of `store`.
pub fn from_store(
    store: &dyn agentry_store::Store,
    options: &StatsOptions,
) -> Result<Report, StatsError> {
    Ok(aggregate(&runs_from_store(store)?, options))
}

/// Statistics over the runs of these trace files.
pub fn from_traces<P: AsRef<std::path::Path>>(
    paths: &[P],
    options: &StatsOptions,
) -> Result<Report, StatsError> {
    Ok(aggregate(&runs_from_traces(paths)?, options))
}

/// Groups the finished runs and computes each group's figures.
pub fn aggregate(runs: &Runs, options: &StatsOptions) -> Report {
    let cutoff = options.cutoff_ms();
    let kept: Vec<&RunFacts> = runs
        .finished
        .iter()
        .filter(|r| cutoff.is_none_or(|c| r.finished_at_ms >= c))
        .collect();
    // Per group: the runs, and (by tool) the tool the figures are limited to.
    let mut groups: BTreeMap<String, Vec<&RunFacts>> = BTreeMap::new();
    for run in &kept {
        for key in keys(run, options.by) {
            groups.entry(key).or_default().push(run);
        }
    }
    let groups = groups
        .into_iter()
        .map(|(key, runs)| {
            let only = (options.by == GroupBy::Tool && key != NO_TOOL).then_some(key.as_str());
            group(&key, &runs, only)
        })
        .collect();
    Report {
        by: options.by,
        since_ms: cutoff,
        runs: kept.len() as u64,
        unfinished: runs.unfinished,
        excluded: (runs.finished.len() - kept.len()) as u64,
        groups,
    }
}

/// The groups a run belongs to.
fn keys(run: &RunFacts, by: GroupBy) -> Vec<String> {
    match by {
        GroupBy::Task => vec![run.task_id.clone()],
        GroupBy::Model => vec![run.model.clone()],
        GroupBy::Tool => {
            let mut tools: Vec<String> = run.calls.iter().map(|c| c.tool.clone()).collect();
            tools.sort();
            tools.dedup();
            if tools.is_empty() {
                tools.push(NO_TOOL.to_string());
            }
            tools
        }
    }
}

fn group(key: &str, runs: &[&RunFacts], only_tool: Option<&str>) -> Group {
    let mut by_reason: BTreeMap<String, Vec<&RunFacts>> = BTreeMap::new();
    for run in runs {
        by_reason
            .entry(run.stop_reason.as_str().to_string())
            .or_default()
            .push(run);
    }
    Group {
        key: key.to_string(),
        all: Figures::of(runs, only_tool),
        by_stop_reason: by_reason
            .into_iter()
            .map(|(reason, runs)| (reason, Figures::of(&runs, only_tool)))
            .collect(),
    }
}
