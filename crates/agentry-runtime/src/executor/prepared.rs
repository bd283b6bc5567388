//! What the pipeline decides for each call before anything runs, and a call
//! on its way to running.

use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::tool::ToolCall;
use serde_json::Value;

use crate::registry::RegisteredTool;

/// How a call that passed the pipeline runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Approval if required, then run.
    Fresh,
    /// A human approved it before a restart: run without asking again.
    Approved,
    /// Started before a restart, safe to run again by its contract.
    Rerun,
    /// Started before a restart, must not run again silently: a human settles it.
    Unsettled,
    /// Started before a restart, and it recorded the task it started on
    /// another system: run again to follow that task to its end.
    Follow,
}

/// What the pipeline decided for one call before anything ran.
pub(super) enum Prepared<'a> {
    Done(ResultEnvelope),
    Run {
        tool: &'a RegisteredTool,
        args: Value,
        digest: u128,
        mode: Mode,
    },
    /// A keyed action already done under another call id: its recorded outcome,
    /// recorded again under this id.
    Keyed {
        env: ResultEnvelope,
        digest: u128,
    },
}

/// One call as it goes to `run_with_retries`.
pub(super) struct Job<'a> {
    pub(super) step: u64,
    pub(super) position: usize,
    pub(super) call: &'a ToolCall,
    pub(super) tool: &'a RegisteredTool,
    pub(super) digest: u128,
    pub(super) mode: Mode,
}

/// Whether the call may run beside its neighbours.
#[inline]
pub(super) fn is_parallel_safe(p: &Prepared<'_>) -> bool {
    matches!(p, Prepared::Run { tool, .. } if tool.contract.is_parallel_safe())
}
