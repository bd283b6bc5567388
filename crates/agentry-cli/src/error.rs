//! Why `run` or `resume` produced no outcome, as the exit code will say it.

use agentry::{RuntimeError, ScriptError, TaskError};
use agentry_models::ModelError;

/// Why `agentry run` (or `resume`) produced no outcome.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The task, script, flags or working directory are unusable, or the run could
    /// not start: nothing ran (exit 2).
    BadInput(RuntimeError),
    /// The model policy cannot be used: missing key, unusable URL, server
    /// unreachable. Nothing ran (exit 2).
    Model(ModelError),
    /// The run started but its outcome was lost (exit 1).
    Lost(RuntimeError),
}

/// What went wrong, in the words of the error it carries.
impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::BadInput(e) | RunError::Lost(e) => e.fmt(f),
            RunError::Model(e) => e.fmt(f),
        }
    }
}

/// A task directory that does not load is bad input, in the runtime's words.
impl From<TaskError> for RunError {
    fn from(e: TaskError) -> Self {
        RunError::BadInput(e.into())
    }
}

/// A script that does not load is bad input, in the runtime's words.
impl From<ScriptError> for RunError {
    fn from(e: ScriptError) -> Self {
        RunError::BadInput(e.into())
    }
}
