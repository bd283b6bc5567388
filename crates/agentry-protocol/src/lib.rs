//! Plain data types shared by every part of agentry.
//!
//! This crate has no async runtime and no actor framework in it: everything here
//! is serde data that can be written to a trace, stored, or sent to another
//! machine. The runtime (`agentry-runtime`) moves these values between actors.
//!
//! # Layout
//! - [`tool`]: the tool contract (what the model sees and what only the host sees),
//!   tool calls as the model proposes them.
//! - [`envelope`]: the result envelope and the error codes.
//! - [`budget`]: the budget vector, limits, spends and snapshots.
//! - [`child`]: what a model asks for when it delegates to a child agent.
//! - [`stop`]: stop reasons.
//! - [`state`]: the four state layers (world, task, session, control).
//! - [`decision`]: what a policy proposes.
//! - [`trace`]: one JSONL record per step, and the closing record.
//! - [`event`]: past-tense run events for subscribers.
//! - [`accept`]: acceptance checks that decide `done`.
//! - [`fingerprint`]: canonical hashing for no-progress detection and idempotency.
//!
//! ```
//! use agentry_protocol::envelope::{ErrorCode, ToolError};
//! let err = ToolError::new(ErrorCode::Enotool, "no tool named fs.delete");
//! assert_eq!(serde_json::to_value(&err).unwrap()["code"], "ENOTOOL");
//! ```

pub mod accept;
pub mod budget;
pub mod child;
pub mod decision;
pub mod envelope;
pub mod event;
pub mod fingerprint;
pub mod state;
pub mod stop;
pub mod tool;
pub mod trace;

pub use accept::AcceptCheck;
pub use budget::{BudgetLimits, BudgetSnapshot, Usage};
pub use child::ChildRequest;
pub use decision::{Decision, PolicyOutput, TokenUsage};
pub use envelope::{CallCost, ErrorCode, ResourceRef, ResultEnvelope, ToolError};
pub use event::RunEvent;
pub use state::{
    ControlState, PendingApproval, RunSnapshot, RunStatus, SessionEntry, Settlement, TaskState,
    WorldChange, WorldState,
};
pub use stop::StopReason;
pub use tool::{Effect, Idempotency, ToolArguments, ToolCall, ToolContract, ToolSpec};
pub use trace::{RunInput, TraceEnd, TraceInput, TraceLine, TraceStep};

/// Milliseconds since the Unix epoch; the one clock format used in records.
pub type UnixMillis = u64;

/// Current wall-clock time as [`UnixMillis`].
pub fn now_millis() -> UnixMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
