//! What one finished run contributes to the statistics, and why collecting
//! it can fail.

use std::path::PathBuf;

use agentry_protocol::UnixMillis;
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope};
use agentry_protocol::stop::StopReason;
use serde::Serialize;

/// The facts of one finished run that the figures are made of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunFacts {
    /// Run id.
    pub run_id: String,
    /// Task id.
    pub task_id: String,
    /// Parent run, for a child agent.
    pub parent_id: Option<String>,
    /// The model (or policy) that took its turns.
    pub model: String,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// Steps it took.
    pub steps: u64,
    /// One per result it recorded, in order.
    pub calls: Vec<CallFact>,
    /// Prompt tokens, cached ones included.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Of `tokens_in`, those read from the provider's prompt cache.
    pub tokens_cached: u64,
    /// Money, in micro-units.
    pub cost_micros: u64,
    /// Automatic retries of failed tool calls.
    pub retries: u64,
    /// When it started (Unix ms).
    pub started_at_ms: UnixMillis,
    /// When it stopped (Unix ms).
    pub finished_at_ms: UnixMillis,
    /// From start to stop.
    pub wall_ms: u64,
}

/// One tool call of a run: its tool, and its error code if it failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallFact {
    /// The tool name as the model wrote it.
    pub tool: String,
    /// `None` when the call succeeded.
    pub error: Option<ErrorCode>,
}

impl CallFact {
    /// The call a recorded result answers.
    pub fn of(result: &ResultEnvelope) -> Self {
        CallFact {
            tool: result.tool.clone(),
            // A failed result without an error body still failed.
            error: if result.ok {
                None
            } else {
                Some(
                    result
                        .error
                        .as_ref()
                        .map_or(ErrorCode::Einternal, |e| e.code),
                )
            },
        }
    }
}

/// The runs found: the finished ones, and how many had not stopped.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Runs {
    /// Finished runs.
    pub finished: Vec<RunFacts>,
    /// Runs that have not stopped (running, parked, or cut off by a crash).
    pub unfinished: u64,
}

/// Why the runs could not be collected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// The store could not be read.
    #[error(transparent)]
    Store(#[from] agentry_store::StoreError),
    /// A trace file could not be read.
    #[error("cannot read the trace {}: {source}", path.display())]
    TraceRead {
        /// The file.
        path: PathBuf,
        /// What failed: missing, not a regular file, a line over the cap.
        source: agentry_files::FileProblem,
    },
    /// A line of a trace file is not a trace record.
    #[error("{}:{line}: not an agentry trace line: {source}", path.display())]
    TraceLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        source: serde_json::Error,
    },
}

impl From<crate::tracefile::TraceFileError> for StatsError {
    fn from(e: crate::tracefile::TraceFileError) -> Self {
        match e {
            crate::tracefile::TraceFileError::Read { path, source } => {
                StatsError::TraceRead { path, source }
            }
            crate::tracefile::TraceFileError::BadLine { path, line, source } => {
                StatsError::TraceLine { path, line, source }
            }
        }
    }
}
