//! Why a tool call failed, in the caller's terms: each variant names the
//! argument, field or run at fault (the text of an `isError` result).

use std::path::PathBuf;

use super::args::ShapeError;
use super::inline::InlineError;
use super::runs::StartError;

/// Why a tool call's arguments cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArgError {
    /// An argument of the wrong type, or one the schema does not have.
    #[error(transparent)]
    Shape(#[from] ShapeError),
    /// Both or neither of `task_dir` and `task`.
    #[error("give exactly one of task_dir (a task directory) and task (inline task.toml fields)")]
    TaskSource,
    /// `script` or `files` with `task_dir`.
    #[error("{0}: applies to an inline task (task) only; a task directory has its own")]
    InlineOnly(&'static str),
    /// An inline task with no way to decide.
    #[error(
        "script: missing; an inline task needs its script ({{\"turns\": [...]}}), a policy argument, or [policy] in task"
    )]
    NoPolicy,
    /// A budget override out of range.
    #[error("max_steps: expected 1 to {max}, found {found}", max = agentry::task::MAX_COUNT)]
    MaxSteps {
        /// As given.
        found: u64,
    },
    /// A deadline that does not parse.
    #[error("deadline: {value:?}: {why}")]
    Deadline {
        /// As given.
        value: String,
        /// Why not.
        why: String,
    },
    /// The inline task cannot be written as a task directory.
    #[error(transparent)]
    Inline(#[from] InlineError),
    /// The run did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// No run with this id, here or in the store.
    #[error("no run {run_id:?}: this server did not start it{}", in_store(.store))]
    NoSuchRun {
        /// As given.
        run_id: String,
        /// The store looked in.
        store: Option<PathBuf>,
    },
    /// A stored run another process started.
    #[error(
        "run {run_id:?} was not started by this server (it is in the store {}); cancel_run aborts only this server's runs",
        .store.display()
    )]
    NotOurs {
        /// As given.
        run_id: String,
        /// The store holding it.
        store: PathBuf,
    },
    /// The store could not be read.
    #[error("{0}")]
    Store(String),
}

fn in_store(store: &Option<PathBuf>) -> String {
    match store {
        Some(path) => format!(" and the store {} holds no such run", path.display()),
        None => " (runs are not stored: --no-store)".into(),
    }
}
