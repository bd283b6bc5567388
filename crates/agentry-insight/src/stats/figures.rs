//! The figures of a set of runs.

use std::collections::BTreeMap;

use serde::Serialize;

use super::facts::RunFacts;

/// The figures of a set of runs (a group, or its runs with one stop reason).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Runs counted.
    pub runs: u64,
    /// Of those, runs that stopped `done`.
    pub done: u64,
    /// `done / runs` (0 for no runs).
    pub success_rate: f64,
    /// Steps per run.
    pub steps: Distribution,
    /// Tool calls and their errors.
    pub tool_calls: ToolCalls,
    /// Tokens.
    pub tokens: Tokens,
    /// Money.
    pub cost: Cost,
    /// Wall time per run, in milliseconds.
    pub wall_ms: Distribution,
    /// Automatic retries of failed tool calls.
    pub retries: Retries,
}

/// Mean, nearest-rank p50 and p95, and the maximum of one number per run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// Arithmetic mean (0 for no runs).
    pub mean: f64,
    /// Nearest-rank median.
    pub p50: u64,
    /// Nearest-rank 95th percentile.
    pub p95: u64,
    /// Largest value.
    pub max: u64,
}

impl Distribution {
    /// The distribution of `values` (all zero for none).
    pub fn of(mut values: Vec<u64>) -> Self {
        values.sort_unstable();
        let total: u128 = values.iter().map(|&v| u128::from(v)).sum();
        Distribution {
            mean: per(total, values.len()),
            p50: nearest_rank(&values, 50).unwrap_or(0),
            p95: nearest_rank(&values, 95).unwrap_or(0),
            max: values.last().copied().unwrap_or(0),
        }
    }
}

/// Tool calls of a set of runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCalls {
    /// Calls made.
    pub calls: u64,
    /// Calls per run.
    pub per_run: f64,
    /// Calls that failed.
    pub errors: u64,
    /// `errors / calls` (0 for no calls).
    pub error_rate: f64,
    /// Per tool name.
    pub by_tool: BTreeMap<String, ToolFigures>,
}

/// One tool's calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ToolFigures {
    /// Calls made.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// `errors / calls`.
    pub error_rate: f64,
    /// Failed calls per error code (`"EPERM"`, ...).
    pub by_code: BTreeMap<String, u64>,
}

/// Tokens of a set of runs: totals and per run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tokens {
    /// Prompt tokens, cached ones included.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Of `input`, read from the provider's prompt cache.
    pub cached: u64,
    /// `input` per run.
    pub input_per_run: f64,
    /// `output` per run.
    pub output_per_run: f64,
    /// `cached` per run.
    pub cached_per_run: f64,
}

/// Money spent by a set of runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cost {
    /// Total, in micro-units.
    pub total_micros: u64,
    /// Per run, in micro-units.
    pub per_run_micros: f64,
    /// Per run, in units (as `max_cost` is written).
    pub per_run: f64,
}

/// Automatic retries of a set of runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Retries {
    /// Total.
    pub total: u64,
    /// Per run.
    pub per_run: f64,
}

impl Figures {
    /// The figures of `runs`; with `only_tool`, the tool figures count that
    /// tool's calls only.
    pub fn of(runs: &[&RunFacts], only_tool: Option<&str>) -> Self {
        let n = runs.len();
        let done = runs
            .iter()
            .filter(|r| r.stop_reason == agentry_protocol::stop::StopReason::Done)
            .count();
        let sum = |f: fn(&RunFacts) -> u64| -> u64 { runs.iter().map(|r| f(r)).sum() };
        let (input, output, cached) = (
            sum(|r| r.tokens_in),
            sum(|r| r.tokens_out),
            sum(|r| r.tokens_cached),
        );
        let cost = sum(|r| r.cost_micros);
        let retries = sum(|r| r.retries);
        Figures {
            runs: n as u64,
            done: done as u64,
            success_rate: per(done as u128, n),
            steps: Distribution::of(runs.iter().map(|r| r.steps).collect()),
            tool_calls: ToolCalls::of(runs, only_tool),
            tokens: Tokens {
                input,
                output,
                cached,
                input_per_run: per(input.into(), n),
                output_per_run: per(output.into(), n),
                cached_per_run: per(cached.into(), n),
            },
            cost: Cost {
                total_micros: cost,
                per_run_micros: per(cost.into(), n),
                per_run: per(cost.into(), n) / 1_000_000.0,
            },
            wall_ms: Distribution::of(runs.iter().map(|r| r.wall_ms).collect()),
            retries: Retries {
                total: retries,
                per_run: per(retries.into(), n),
            },
        }
    }
}

impl ToolCalls {
    fn of(runs: &[&RunFacts], only_tool: Option<&str>) -> Self {
        let mut by_tool: BTreeMap<String, ToolFigures> = BTreeMap::new();
        let calls = runs
            .iter()
            .flat_map(|r| &r.calls)
            .filter(|c| only_tool.is_none_or(|t| c.tool == t));
        for call in calls {
            let tool = by_tool.entry(call.tool.clone()).or_default();
            tool.calls += 1;
            if let Some(code) = call.error {
                tool.errors += 1;
                *tool.by_code.entry(code.as_str().to_string()).or_default() += 1;
            }
        }
        for tool in by_tool.values_mut() {
            tool.error_rate = per(tool.errors.into(), tool.calls as usize);
        }
        let calls: u64 = by_tool.values().map(|t| t.calls).sum();
        let errors: u64 = by_tool.values().map(|t| t.errors).sum();
        ToolCalls {
            calls,
            per_run: per(calls.into(), runs.len()),
            errors,
            error_rate: per(errors.into(), calls as usize),
            by_tool,
        }
    }
}

/// `total / n`, 0 for `n == 0`.
fn per(total: u128, n: usize) -> f64 {
    if n == 0 { 0.0 } else { total as f64 / n as f64 }
}

/// The p-th percentile of `sorted` (ascending), nearest-rank: the value at
/// 1-based rank `ceil(p * n / 100)`, at least 1. `None` for no values.
pub fn nearest_rank(sorted: &[u64], p: u32) -> Option<u64> {
    let n = sorted.len() as u64;
    if n == 0 {
        return None;
    }
    let rank = (u64::from(p) * n).div_ceil(100).clamp(1, n);
    sorted.get(usize::try_from(rank - 1).ok()?).copied()
}
