//! Why `agentry replay` could not judge a run.

use std::path::PathBuf;

use agentry::RuntimeError;
use agentry_models::ModelError;

use serde::Serialize;

use crate::error::RunError;

/// One place where a recording contradicts itself (`check.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Contradiction {
    pub(crate) step: u64,
    /// The call concerned, when it is one call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) call_id: Option<String>,
    pub(crate) problem: String,
}

impl std::fmt::Display for Contradiction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.call_id {
            Some(id) => write!(f, "step {}, call {id:?}: {}", self.step, self.problem),
            None => write!(f, "step {}: {}", self.step, self.problem),
        }
    }
}

/// Why a replay produced no report (exit 2, like the other commands' bad input).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    /// The trace file cannot be read.
    #[error("cannot read the trace {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: agentry_files::FileProblem,
    },
    /// A line of the trace is not a trace record.
    #[error("{path}:{line}: not a trace record: {message}")]
    BadLine {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// The trace or store holds no such run (or none at all).
    #[error("{from} holds no {what}")]
    NoRun { from: String, what: String },
    /// The trace holds several root runs and no `--run-id` picks one.
    #[error("{from} holds {} runs ({}); pick one with --run-id", ids.len(), ids.join(", "))]
    SeveralRuns { from: String, ids: Vec<String> },
    /// The trace lacks step records of the run (sampled out, or cut short).
    #[error(
        "{from} holds {held} of run {run_id}'s {steps} step records (a run sampled out by [trace] sample keeps none when it stops done); replay needs every step"
    )]
    Incomplete {
        from: String,
        run_id: String,
        held: usize,
        steps: u64,
    },
    /// Nothing says which task the run came from.
    #[error(
        "the recorded run {run_id} does not say which task directory it came from (recorded by an older agentry, a child run, or not started by the CLI); pass --task DIR"
    )]
    NoTask { run_id: String },
    /// No scratch directory for the replay's own trace.
    #[error("cannot create a scratch directory for the replay's trace: {0}")]
    Scratch(std::io::Error),
    /// The replay's own trace could not be written completely: nothing to judge.
    #[error("the replay's trace {path} could not be written completely: {message}")]
    TraceLost { path: PathBuf, message: String },
    /// The trace's records contradict each other; `--force` replays it anyway.
    #[error(
        "the recording contradicts itself, so replay refuses it (--force replays it anyway, approvals still from its step records alone): {}",
        contradictions.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Contradicts { contradictions: Vec<Contradiction> },
    /// The replay would run calls that are not read-only and nobody said yes.
    #[error(
        "this replay runs calls that are not read-only in the task directory {task_dir} (listed above); pass --yes to run them, or --dry-run to only list them"
    )]
    NotConfirmed { task_dir: String },
    /// The person at the terminal did not say yes.
    #[error("not replayed: the calls listed above were not confirmed")]
    Declined,
    /// The question at the terminal could not be asked or answered.
    #[error("cannot ask at the terminal whether to run the listed calls: {0}")]
    Prompt(std::io::Error),
    /// The dry run's listing could not be written.
    #[error("cannot write the list of calls: {0}")]
    Listing(std::io::Error),
    /// The store, the task, or the run could not be used or started.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The fork's model policy cannot be used.
    #[error(transparent)]
    Model(#[from] ModelError),
}

impl From<RunError> for ReplayError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::BadInput(e) | RunError::Lost(e) => ReplayError::Runtime(e),
            RunError::Model(e) => ReplayError::Model(e),
        }
    }
}

impl From<agentry::store::StoreError> for ReplayError {
    fn from(e: agentry::store::StoreError) -> Self {
        ReplayError::Runtime(e.into())
    }
}

impl From<agentry::TaskError> for ReplayError {
    fn from(e: agentry::TaskError) -> Self {
        ReplayError::Runtime(e.into())
    }
}

impl From<agentry::insight::tracefile::TraceFileError> for ReplayError {
    fn from(e: agentry::insight::tracefile::TraceFileError) -> Self {
        use agentry::insight::tracefile::TraceFileError;
        match e {
            TraceFileError::Read { path, source } => ReplayError::Unreadable { path, source },
            TraceFileError::BadLine { path, line, source } => ReplayError::BadLine {
                path,
                line: usize::try_from(line).unwrap_or(usize::MAX),
                message: source.to_string(),
            },
        }
    }
}
