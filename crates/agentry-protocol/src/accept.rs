//! Acceptance checks: the host's evidence that a task is done.

use serde::{Deserialize, Serialize};

/// One acceptance check. A task is `done` only if all of them pass when the model finishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AcceptCheck {
    /// A file in the working directory must exist and match.
    File {
        /// Path relative to the working directory.
        file: String,
        /// The content must equal this, ignoring leading/trailing whitespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        equals: Option<String>,
        /// The content must contain this.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        contains: Option<String>,
    },
    /// A command run in the working directory must exit 0.
    Command {
        /// argv, run directly (task.toml turns a single string into `["sh", "-c", string]`).
        argv: Vec<String>,
        /// Timeout in milliseconds.
        timeout_ms: u64,
    },
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckOutcome {
    /// The check.
    pub check: AcceptCheck,
    /// Whether it passed.
    pub passed: bool,
    /// Why it failed (or a short confirmation).
    pub detail: String,
}

impl CheckOutcome {
    /// `check` passed; `detail` confirms it briefly.
    pub fn pass(check: &AcceptCheck, detail: impl Into<String>) -> CheckOutcome {
        CheckOutcome {
            check: check.clone(),
            passed: true,
            detail: detail.into(),
        }
    }

    /// `check` failed; `detail` says why.
    pub fn fail(check: &AcceptCheck, detail: impl Into<String>) -> CheckOutcome {
        CheckOutcome {
            check: check.clone(),
            passed: false,
            detail: detail.into(),
        }
    }
}
