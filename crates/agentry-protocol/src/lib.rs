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
//! - [`stored_policy`]: how a stored run's policy is rebuilt when it is resumed.
//! - [`state`]: the four state layers (world, task, session, control).
//! - [`decision`]: what a policy proposes.
//! - [`trace`]: one JSONL record per step, and the closing record.
//! - [`event`]: past-tense run events for subscribers.
//! - [`accept`]: acceptance checks that decide `done`.
//! - [`fingerprint`]: canonical hashing for no-progress detection and idempotency.
//! - [`terminal`]: untrusted text escaped for a terminal (controls, bidi overrides).
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
pub mod stored_policy;
pub mod terminal;
pub mod tool;
pub mod trace;

pub use accept::AcceptCheck;
pub use budget::{BudgetLimits, BudgetSnapshot, Usage};
pub use child::ChildRequest;
pub use decision::{Compaction, Decision, PolicyOutput, TokenUsage};
pub use envelope::{CallCost, CutData, ErrorCode, ResourceRef, ResultEnvelope, ToolError};
pub use event::RunEvent;
pub use state::{
    ControlState, PendingApproval, RunSnapshot, RunStatus, SessionEntry, Settlement, TaskState,
    WorldChange, WorldState,
};
pub use stop::StopReason;
pub use stored_policy::{ChildSpec, RootSpec, StoredFallback, StoredPolicy};
pub use tool::{
    Effect, Idempotency, ProcessGroupRecord, RemoteRef, ToolArguments, ToolCall, ToolContract,
    ToolSpec,
};
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

/// `ms` as an RFC 3339 UTC time to the second (`2026-12-01T11:22:45Z`), for
/// messages that name a moment (a run's owner, since when).
pub fn rfc3339_seconds(ms: UnixMillis) -> String {
    let secs = ms / 1000;
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
    // `civil_from_days`); u64 milliseconds stay far inside i64 days.
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::rfc3339_seconds;

    #[test]
    fn rfc3339_seconds_names_the_utc_second() {
        assert_eq!(rfc3339_seconds(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_seconds(951_782_400_999), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_seconds(1_798_716_165_000), "2026-12-31T11:22:45Z");
        assert_eq!(rfc3339_seconds(4_102_444_799_000), "2099-12-31T23:59:59Z");
    }
}
