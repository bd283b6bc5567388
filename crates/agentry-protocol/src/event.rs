//! Past-tense facts about a run, for subscribers.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::budget::BudgetSnapshot;
use crate::decision::Decision;
use crate::envelope::ResultEnvelope;
use crate::stop::StopReason;

/// Something that happened in a run. Each carries the correlation ids it needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEvent {
    /// A step began (its budget was granted).
    StepStarted {
        /// Step number.
        step: u64,
    },
    /// The policy decided.
    DecisionMade {
        /// Step number.
        step: u64,
        /// The decision (the one the session holds, shared).
        decision: Arc<Decision>,
    },
    /// Text the model is streaming for the step being decided (for services that
    /// show the answer as it is written).
    TokenDelta {
        /// Step number.
        step: u64,
        /// The new text.
        text: String,
    },
    /// A call started executing (passed validation, grants and the idempotency
    /// table). Retries start again with a higher attempt number.
    ToolCallStarted {
        /// Step number.
        step: u64,
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool: String,
        /// Attempt number, from 1.
        attempt: u32,
    },
    /// A running call reported progress (an MCP server's progress notification).
    ToolProgress {
        /// Call id.
        tool_call_id: String,
        /// Progress so far.
        progress: f64,
        /// The total, when known.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What is happening, in words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A call finished (or was refused, cancelled, replayed).
    ToolCallFinished {
        /// Step number.
        step: u64,
        /// The envelope: the one the session holds, shared (and small: every
        /// event is as large as its largest variant, and events are kept in
        /// buffers).
        result: Arc<ResultEnvelope>,
    },
    /// The state keeper applied an update.
    StateUpdated {
        /// New state version.
        version: u64,
    },
    /// Budget was spent.
    BudgetSpent {
        /// Budget after the spend (boxed, as `result` above).
        budget: Box<BudgetSnapshot>,
    },
    /// An input from outside was applied (message, event, tick, pause, resume,
    /// approval decision).
    InputApplied {
        /// Input sequence number (the order inputs were applied).
        seq: u64,
        /// The input.
        input: crate::trace::RunInput,
    },
    /// A call is parked until a human approves or denies it.
    AwaitingApproval {
        /// Step number.
        step: u64,
        /// The call (boxed: with its preview this would be the largest
        /// variant, and every event is as large as the largest).
        call: Box<crate::tool::ToolCall>,
        /// The tool's effect.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        effect: Option<crate::tool::Effect>,
        /// What the call would change, when its tool can say without
        /// running it (`fs.write`: a unified diff of the file).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<String>,
    },
    /// After a restart, a call whose outcome is unknown and which must not run
    /// again silently waits for a human (`happened`, `retry`, `skip`).
    AwaitingDecision {
        /// Step number.
        step: u64,
        /// The call.
        call: crate::tool::ToolCall,
    },
    /// A user's interrupt cut the step short: the model's turn (`decision`)
    /// and/or these calls. The interrupt's input follows as `input_applied`.
    StepInterrupted {
        /// Step number.
        step: u64,
        /// What was cut short.
        interrupted: crate::trace::StepInterrupt,
    },
    /// A timer tick was skipped because the previous one was still running.
    TickSkipped {
        /// The skipped tick's number.
        n: u64,
    },
    /// The run stopped.
    RunStopped {
        /// Why.
        stop_reason: StopReason,
    },
}

/// An event with its run id and per-run sequence number (the order the runtime applied it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// Run id.
    pub run_id: Arc<str>,
    /// Sequence number within the run, from 1.
    pub seq: u64,
    /// The event.
    pub event: RunEvent,
}

// Every event is as large as its largest variant and is moved on every emit:
// a large payload goes behind a `Box` (as `AwaitingApproval::call`).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<RunEvent>() <= 88);
