//! What every workload shares: options (with the durable workloads' [`Mode`]),
//! the run configuration, the warm-up episode and the W1/W2 outcome check.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry::{Durability, Grants, RunConfig, RunOutcome, Runtime, StopReason};

use crate::model::{AddModel, Probe};
use crate::tools::SCOPE;

/// The error type of the harness: anything that stops a workload from running
/// at all (as opposed to a failed check, which is reported as `ok: false`).
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// Result alias for [`BenchError`].
pub type BenchResult<T> = Result<T, BenchError>;

/// Workload parameters, already defaulted per workload by the CLI.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Steps per agent (W1, W2).
    pub m: u64,
    /// Agents (W2).
    pub n: u64,
    /// Calls per parallel step (W3, parallel).
    pub k: u64,
    /// Parallel steps (W3).
    pub steps: u64,
    /// Repetitions (cancel, parallel).
    pub runs: u64,
    /// Write the JSONL trace here (W1).
    pub trace: Option<PathBuf>,
    /// W4 through agentry's process tools, with a shell forking two grandchildren.
    pub grandchildren: bool,
    /// W4: the tool also kills its child on the cancel token, not only on drop.
    pub watch_cancel: bool,
    /// Run deadline in milliseconds (W4: 200, cancel: 100).
    pub deadline_ms: u64,
    /// W2 stops starting agents and aborts once RSS passes this (MiB).
    pub max_rss_mib: f64,
    /// W2 aborts after this many seconds.
    pub timeout_s: u64,
    /// Tokio worker threads (reported in params).
    pub threads: usize,
    /// W1/W2: `RunConfig::events_from_start = false`, so a run nobody
    /// subscribes to builds no events and allocates no event buffer.
    pub events_off: bool,
    /// durable, durable-w2: where the stores' temporary directory is created
    /// (`None`: the current directory).
    pub store_dir: Option<PathBuf>,
    /// durable, durable-w2: commit to this Postgres database instead of a
    /// SQLite file per mode.
    pub store_url: Option<String>,
    /// durable, durable-w2: keep the store files for inspection.
    pub keep_store: bool,
    /// durable, durable-w2: measure only this mode.
    pub only: Option<Mode>,
    /// idle: the store's `synchronous`.
    pub sync: agentry::store::SyncMode,
    /// W3: `sleep_echo` and the floor sleep with [`crate::tools::precise_sleep`].
    pub precise_sleep: bool,
    /// W1: run it again with its spans exported to a local OTLP receiver.
    pub otlp: bool,
}

/// How a run is kept (the durable workloads measure each; an [`Options`] field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// No store.
    Memory,
    /// SQLite store, [`Durability::Strict`].
    Strict,
    /// SQLite store, [`Durability::Grouped`].
    Grouped,
}

impl Mode {
    /// All three, in the order they are measured.
    pub const ALL: [Mode; 3] = [Mode::Memory, Mode::Strict, Mode::Grouped];

    /// The suffix of this mode's metrics (`memory`, `strict`, `grouped`).
    pub fn name(self) -> &'static str {
        match self {
            Mode::Memory => "memory",
            Mode::Strict => "strict",
            Mode::Grouped => "grouped",
        }
    }

    /// The durability of its store; `None`: no store.
    pub fn durability(self) -> Option<Durability> {
        match self {
            Mode::Memory => None,
            Mode::Strict => Some(Durability::Strict),
            Mode::Grouped => Some(Durability::Grouped),
        }
    }
}

/// A run configuration for the benchmark tools: goal `go`, the bench scope
/// granted, at most `max_steps` steps, everything else as an embedder's default.
pub fn config(workdir: &Path, max_steps: u64) -> RunConfig {
    let mut config = RunConfig::new("go", workdir);
    config.task_id = "bench".to_string();
    config.grants = Grants::new([SCOPE]);
    config.limits.max_steps = Some(max_steps);
    // The bench tools start no process, so no sandbox is ever applied; off
    // also lets the start run under valgrind (the perf guard), which does not
    // know Landlock's system calls, where the default's kernel check would
    // refuse the start. The sandbox's own cost is the `sandbox` workload's.
    config.sandbox.mode = agentry::sandbox::Mode::Off;
    config
}

/// The untimed 3-step `add` episode every process runs first (WORKLOAD.md
/// "Warm-up"), through the same code path as W1.
pub async fn warm_up(runtime: &Runtime, workdir: &Path) -> BenchResult<()> {
    let probe = Probe::new(0);
    let outcome = runtime
        .run(config(workdir, 3), AddModel::new(3, Arc::clone(&probe)))
        .await?;
    check_add(&outcome, &probe, 3).map_err(|e| format!("warm-up failed: {e}"))?;
    Ok(())
}

/// WORKLOAD.md's end-of-run check for an M-step `add` run: stopped `done` after
/// M steps with the final text `done:<M−1>`; the state holds M−1 tool results
/// (session = goal + M model messages + M−1 results), the last one `"M−1"`
/// (checked by the model at turn M, as every result before it).
pub fn check_add(outcome: &RunOutcome, probe: &Probe, m: u64) -> Result<(), String> {
    if let Some(f) = probe.failure() {
        return Err(f);
    }
    let want_answer = format!("done:{}", m - 1);
    let mut wrong = Vec::new();
    if outcome.stop_reason != StopReason::Done {
        wrong.push(format!(
            "stop_reason {} ({})",
            outcome.stop_reason, outcome.detail
        ));
    }
    if outcome.answer.as_deref() != Some(want_answer.as_str()) {
        wrong.push(format!("answer {:?}", outcome.answer));
    }
    if outcome.steps != m || outcome.tool_calls != m - 1 {
        wrong.push(format!(
            "{} steps, {} tool calls",
            outcome.steps, outcome.tool_calls
        ));
    }
    if outcome.state.session_len != 2 * m {
        wrong.push(format!("session of {} entries", outcome.state.session_len));
    }
    if probe.results_seen() != m - 1 || (m > 1 && probe.last_result() != m - 1) {
        wrong.push(format!(
            "the model saw {} results, the last {}",
            probe.results_seen(),
            probe.last_result()
        ));
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join(", "))
    }
}

/// A fresh working directory for the runs (they touch no file).
pub fn workdir() -> BenchResult<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix("agentry-bench").tempdir()?)
}

/// Milliseconds as a float.
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
