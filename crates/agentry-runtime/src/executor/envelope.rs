//! The envelopes the executor writes itself, for calls it refuses, replays or
//! lost, and which outcomes the idempotency table keeps.

use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::tool::ToolCall;

/// The envelope of a call that failed with `error`.
#[inline]
pub(super) fn fail(call: &ToolCall, error: ToolError) -> ResultEnvelope {
    ResultEnvelope::failure(&call.id, &call.name, error)
}

/// Transient outcomes are not recorded, so the same call id may be tried again.
#[inline]
pub(super) fn is_recordable(env: &ResultEnvelope) -> bool {
    !matches!(
        env.error_code(),
        Some(ErrorCode::Ecanceled | ErrorCode::Etimedout | ErrorCode::Eunavail)
    )
}

/// A call id used again for a different call.
pub(super) fn conflict(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(
            ErrorCode::Einval,
            format!(
                "call id \"{}\" was already used for a different call; nothing was run",
                call.id
            ),
        )
        .with_action("use a fresh call id for a new call"),
    )
}

/// A call whose id an earlier call of the same decision already took.
pub(super) fn duplicate(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(
            ErrorCode::Einval,
            format!(
                "call id \"{}\" is already taken by an earlier call of this turn; this call was not run",
                call.id
            ),
        )
        .with_action("give every call of a turn its own id, and call again if it is still needed"),
    )
}

/// A call that reached the executor without an id (the adapters give one to
/// every call; this is defence in depth).
pub(super) fn no_id(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(ErrorCode::Einval, "the call has no id; it was not run")
            .with_action("give every call a non-empty id"),
    )
}

/// A recorded outcome handed back for `call` (the same call id, or the same
/// keyed action under a fresh id), marked `replayed`.
pub(super) fn replay(recorded: &ResultEnvelope, call: &ToolCall) -> ResultEnvelope {
    let mut env = recorded.clone();
    env.tool_call_id.clone_from(&call.id);
    env.replayed = true;
    env.observed_at = agentry_protocol::now_millis();
    env.cost.latency_ms = 0;
    env
}

/// A call whose result went missing (a bug, never expected).
pub(super) fn lost(call: &ToolCall) -> ResultEnvelope {
    fail(
        call,
        ToolError::new(ErrorCode::Einternal, "the executor lost this call's result"),
    )
}
