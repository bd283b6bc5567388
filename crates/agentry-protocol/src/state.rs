//! The four state layers: world, task, session, control.

use std::collections::BTreeMap;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::accept::AcceptCheck;
use crate::budget::{BudgetLimits, Usage};
use crate::decision::Decision;
use crate::envelope::{ResourceRef, ResultEnvelope};
use crate::stop::StopReason;

/// External facts, held as versioned references, never copied wholesale.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorldState {
    /// Bumped whenever a tool with a world effect succeeds.
    pub version: u64,
    /// The latest known reference for each path the run has read or written.
    pub refs: BTreeMap<String, ResourceRef>,
}

/// The task layer: goal, constraints and answer. Never lossy-compressed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskState {
    /// Task id (the task directory name, or one the embedder chose).
    pub task_id: String,
    /// The goal, as the user wrote it.
    pub goal: String,
    /// Acceptance checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accept: Vec<AcceptCheck>,
    /// The model's final answer, once it gave one.
    pub answer: Option<String>,
    /// True once the run stopped with `done`.
    pub done: bool,
}

/// One entry of the conversation (session layer).
///
/// A failed turn (the adapter gave up on a request, the stream stalled, a text
/// reply where `task.finish` was required, an empty list of calls) is recorded
/// as what it is: the step's [`SessionEntry::Assistant`] entry holding a
/// [`Decision::Failed`] or an empty [`Decision::ToolCalls`], and nothing else —
/// never a tool result answering no call. Model adapters show it to the model as
/// a note from the host ([`SessionEntry::host_note`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum SessionEntry {
    /// A user message (the goal, or a message injected while running).
    User {
        /// Text.
        text: String,
    },
    /// What the policy decided at a step.
    Assistant {
        /// Step number.
        step: u64,
        /// The decision, shared by the session and the policy's view of it.
        /// Serialized as the decision itself.
        decision: Arc<Decision>,
    },
    /// The result of one call.
    Tool {
        /// The envelope, shared: the session (state keeper), the policy's view of
        /// it and the executor's idempotency table hold one envelope, not three
        /// copies. Serialized as the envelope itself.
        result: Arc<ResultEnvelope>,
    },
    /// An event from outside the run (a webhook payload, a timer tick).
    Event {
        /// Event name, e.g. `webhook` or `tick`.
        name: String,
        /// Payload.
        payload: serde_json::Value,
    },
    /// A note from the host (agentry) to the model: not the user's words and
    /// not a tool result (e.g. that older entries were elided to fit the
    /// context). Model adapters send it as user text.
    Note {
        /// Text.
        text: String,
    },
}

impl SessionEntry {
    /// What the host tells the model about this entry in a note of its own, if
    /// the entry is one: a [`SessionEntry::Note`], or a failed turn (a
    /// [`Decision::Failed`] or an empty call list), which the model did not say
    /// and which answers no call. Every adapter sends these as user text.
    pub fn host_note(&self) -> Option<String> {
        match self {
            SessionEntry::Note { text } => Some(text.clone()),
            SessionEntry::Assistant { decision, .. } => match &**decision {
                Decision::Failed { message, .. } => {
                    Some(format!("[agentry] your previous turn failed: {message}"))
                }
                Decision::ToolCalls { calls } if calls.is_empty() => Some(
                    "[agentry] your previous turn proposed an empty list of tool calls; \
                     propose tool calls with valid JSON arguments, or a final answer"
                        .to_string(),
                ),
                Decision::ToolCalls { .. } | Decision::Final { .. } => None,
            },
            SessionEntry::User { .. } | SessionEntry::Tool { .. } | SessionEntry::Event { .. } => {
                None
            }
        }
    }
}

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Stepping (or about to).
    #[default]
    Running,
    /// Paused by the user; resumes on `resume`.
    Paused,
    /// Parked on a call that needs a human decision.
    AwaitingApproval,
    /// An event- or time-driven agent waiting for its next event.
    Sleeping,
    /// Stopped; see `stop_reason`.
    Stopped,
    /// Resumed after a crash with a call whose outcome is unknown and which must
    /// not silently run again (an `irreversible_external` tool without an
    /// idempotency key): parked until a human says it happened, to retry it, or
    /// to skip it.
    AwaitingDecision,
}

impl RunStatus {
    /// The serialized name, e.g. `"awaiting_approval"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Sleeping => "sleeping",
            RunStatus::Stopped => "stopped",
            RunStatus::AwaitingDecision => "awaiting_decision",
        }
    }
}

/// A call waiting for a human decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// Step number.
    pub step: u64,
    /// The call.
    pub call: crate::tool::ToolCall,
    /// When the approval was requested.
    pub requested_at: crate::UnixMillis,
    /// The tool's effect, for the human deciding (absent for a call parked
    /// again by a resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<crate::tool::Effect>,
    /// What the call would change, when its tool can say without running it
    /// (`fs.write`: a unified diff of the file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
}

/// How the preview of a remote A2A agent's question begins (a call of
/// `[[tools.a2a]] input_required = "human"` parks as an approval whose
/// preview is the question; a human answers it with text).
pub const QUESTION_PREVIEW: &str = "question from the remote agent: ";

/// The remote agent's question a preview carries, if it is one.
pub fn question_of(preview: Option<&str>) -> Option<&str> {
    preview.and_then(|p| p.strip_prefix(QUESTION_PREVIEW))
}

impl PendingApproval {
    /// The remote agent's question, when this approval is one: it is
    /// answered with text (`RunHandle::answer`), not only approved or denied.
    pub fn question(&self) -> Option<&str> {
        question_of(self.preview.as_deref())
    }
}

/// A human's word on a call a crash interrupted (intent recorded, no outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settlement {
    /// It took effect: record it as done, do not run it again.
    Happened,
    /// It did not take effect: run it again.
    Retry,
    /// Do not run it; tell the model it was skipped.
    Skip,
}

impl std::str::FromStr for Settlement {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "happened" => Ok(Settlement::Happened),
            "retry" => Ok(Settlement::Retry),
            "skip" => Ok(Settlement::Skip),
            other => Err(format!(
                "unknown decision {other:?}: expected happened, retry or skip"
            )),
        }
    }
}

/// The control layer: exact, written only by the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlState {
    /// Budget limits.
    pub limits: BudgetLimits,
    /// What has been spent.
    pub spent: Usage,
    /// Of `spent`, what its children (and their descendants) spent, as of the
    /// last step: a resume after a crash counts the children from their own
    /// records instead (they may have spent more since).
    #[serde(default, skip_serializing_if = "Usage::is_zero")]
    pub delegated: Usage,
    /// Why the run stopped, once it has.
    pub stop_reason: Option<StopReason>,
}

/// The world layer as a trace step line carries it: only the refs that changed
/// since the run's previous step line. Folding `refs_changed` over a run's step
/// lines, in order, gives the world after each step (the first step line a
/// process writes for a run carries every ref); the stop line carries the whole
/// map ([`crate::trace::TraceEnd::world`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorldChange {
    /// The world version after the step.
    pub version: u64,
    /// Paths whose reference is new or changed, with the reference.
    pub refs_changed: BTreeMap<String, ResourceRef>,
}

/// Comparable key fields of the run state (the session layer is summarized by
/// its length; its entries are in the session itself). `W` is how the world
/// layer is held: the whole [`WorldState`], or in a trace step line only what
/// changed ([`WorldChange`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSnapshot<W = WorldState> {
    /// State version: bumped once per applied update.
    pub version: u64,
    /// World layer.
    pub world: W,
    /// Task layer.
    pub task: TaskState,
    /// Number of session entries.
    pub session_len: u64,
    /// Control layer.
    pub control: ControlState,
    /// Where the run is in its life.
    #[serde(default)]
    pub status: RunStatus,
    /// Calls waiting for a human decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<PendingApproval>,
    /// Calls a crash interrupted, waiting for a human to settle them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_decisions: Vec<PendingApproval>,
    /// Inputs from outside applied so far (user messages, events, ticks).
    #[serde(default)]
    pub inputs: u64,
    /// Timer ticks skipped because the previous one was still running.
    #[serde(default)]
    pub ticks_skipped: u64,
}

#[cfg(test)]
mod status_tests {
    use super::RunStatus;

    #[test]
    fn as_str_is_the_serialized_name() {
        for status in [
            RunStatus::Running,
            RunStatus::Paused,
            RunStatus::AwaitingApproval,
            RunStatus::Sleeping,
            RunStatus::Stopped,
            RunStatus::AwaitingDecision,
        ] {
            let v = serde_json::to_value(status).expect("serializes");
            assert_eq!(v, serde_json::Value::String(status.as_str().to_string()));
        }
    }
}
