//! Why a run stopped. Only the host decides this, never the model.

use serde::{Deserialize, Serialize};

/// The reason a run ended. Serialized in `snake_case` (`"max_steps"`, `"done"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The model finished and every acceptance check passed.
    Done,
    /// The model finished but an acceptance check failed (or evidence was missing).
    VerificationMissing,
    /// The step budget was exhausted: step `max_steps + 1` was refused.
    MaxSteps,
    /// The tool-call budget was exhausted.
    MaxToolCalls,
    /// The token budget was exhausted.
    MaxTokens,
    /// The money budget was exhausted.
    MaxCost,
    /// The tick budget of a time-driven agent was exhausted.
    MaxTicks,
    /// The run's wall-clock deadline passed; in-flight tools were cancelled.
    Deadline,
    /// The same (action, observation, world version) repeated over the whole window.
    NoProgress,
    /// The run cannot continue (policy exhausted or broken, an actor died).
    UnrecoverableError,
    /// A required permission was refused and the run cannot continue without it.
    PermissionDenied,
    /// The user aborted the run.
    UserAbort,
}

impl StopReason {
    /// The serialized name, e.g. `"max_steps"`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Done => "done",
            StopReason::VerificationMissing => "verification_missing",
            StopReason::MaxSteps => "max_steps",
            StopReason::MaxToolCalls => "max_tool_calls",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxCost => "max_cost",
            StopReason::MaxTicks => "max_ticks",
            StopReason::Deadline => "deadline",
            StopReason::NoProgress => "no_progress",
            StopReason::UnrecoverableError => "unrecoverable_error",
            StopReason::PermissionDenied => "permission_denied",
            StopReason::UserAbort => "user_abort",
        }
    }

    /// True for the reasons that mean "a budget dimension ran out".
    pub fn is_budget(self) -> bool {
        matches!(
            self,
            StopReason::MaxSteps
                | StopReason::MaxToolCalls
                | StopReason::MaxTokens
                | StopReason::MaxCost
                | StopReason::MaxTicks
                | StopReason::Deadline
        )
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serializes_snake_case_and_matches_as_str() {
        for r in [
            StopReason::Done,
            StopReason::VerificationMissing,
            StopReason::MaxSteps,
            StopReason::NoProgress,
            StopReason::UserAbort,
        ] {
            let v = serde_json::to_value(r).unwrap();
            assert_eq!(v, serde_json::Value::String(r.as_str().to_string()));
        }
    }
}
