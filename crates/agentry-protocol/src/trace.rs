//! Trace records: one JSONL line per step, then one closing line.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::budget::BudgetSnapshot;
use crate::decision::{Compaction, Decision, TokenUsage};
use crate::envelope::{ErrorCode, ResultEnvelope};
use crate::state::{RunSnapshot, WorldChange, WorldState};
use crate::stop::StopReason;

/// One step of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStep {
    /// Run id (shared by the run's records: a record is written every step).
    pub run_id: Arc<str>,
    /// Task id.
    pub task_id: Arc<str>,
    /// Parent run id, for child agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<Arc<str>>,
    /// W3C traceparent: one trace id per agent tree, one span id per run.
    pub traceparent: Arc<str>,
    /// Step number, from 1.
    pub step: u64,
    /// Attempt number of the step.
    pub attempt: u32,
    /// Model name.
    pub model: Arc<str>,
    /// Hash of the prompt, when the policy reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_hash: Option<String>,
    /// The tokens the model turn reported, cached ones included (absent when
    /// the policy reported none, as a script does).
    #[serde(default, skip_serializing_if = "TokenUsage::is_empty")]
    pub usage: TokenUsage,
    /// Older session entries the policy summarized this step, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// What the policy proposed (the session's decision, shared).
    pub decision: Arc<Decision>,
    /// One envelope per call, in request order (the session's, shared).
    pub results: Vec<Arc<ResultEnvelope>>,
    /// The kernel sandbox each process tool's call of this step ran under
    /// (in the order of `results`); empty when no call started a process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sandboxes: Vec<CallSandbox>,
    /// Every execution attempt of the step's calls, retries included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// What a user's interrupt cut short in this step, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<StepInterrupt>,
    /// Budget before the step.
    pub budget_before: BudgetSnapshot,
    /// Budget after the step.
    pub budget_after: BudgetSnapshot,
    /// State version after the step's update was applied.
    pub state_version: u64,
    /// hash(action, observation, world version).
    pub fingerprint: String,
    /// State key fields after the step; of the world, only the refs that changed
    /// since the previous step line ([`WorldChange`]).
    pub state: RunSnapshot<WorldChange>,
    /// When the record was written.
    pub at: UnixMillis,
}

/// What a user's interrupt cut short in one step. The interrupt's message is
/// the next input line (its sequence number orders it among all inputs).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepInterrupt {
    /// The model's turn was cut off before it decided (its stream dropped);
    /// the step's decision is then a non-fatal failure saying so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub decision: bool,
    /// The calls it cancelled, kept from starting, or withdrew from approval,
    /// in request order; each result says so (`ECANCELED`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<String>,
    /// Irreversible calls it cut short: their outcome is unknown, so each
    /// waited for a human's settlement (`awaiting_decision`) before the step ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsettled: Vec<String>,
}

/// One execution attempt of a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// Call id.
    pub tool_call_id: String,
    /// Tool name.
    pub tool: String,
    /// Tool contract version.
    pub tool_version: String,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// Whether this attempt succeeded.
    pub ok: bool,
    /// The error code, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorCode>,
    /// How long the attempt ran.
    pub latency_ms: u64,
    /// Backoff waited before the next attempt, if one followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
}

/// The kernel sandbox one call's processes ran under, as the trace records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSandbox {
    /// The call.
    pub tool_call_id: String,
    /// `agentry_sandbox::SandboxSummary` as JSON: `mode`, `network` and (unless
    /// the mode is `off`) `limits`.
    pub sandbox: serde_json::Value,
}

/// The last record of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEnd {
    /// Run id.
    pub run_id: String,
    /// Parent run id, for child agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
    /// W3C traceparent: one trace id per agent tree, one span id per run.
    pub traceparent: String,
    /// Child runs this run spawned, in spawn order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// Task id.
    pub task_id: String,
    /// Steps taken.
    pub steps: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Why the run stopped.
    pub stop_reason: StopReason,
    /// Detail for the stop (which check failed, what broke).
    pub detail: String,
    /// The answer, if any.
    pub answer: Option<String>,
    /// Final budget.
    pub budget: BudgetSnapshot,
    /// Final state version.
    pub state_version: u64,
    /// The whole world layer at the stop (every ref), so a reader need not fold
    /// the step lines' changes.
    #[serde(default)]
    pub world: WorldState,
    /// When the run stopped.
    pub at: UnixMillis,
    /// Where the run came from, when its starter said (the CLI does): what
    /// `agentry replay` needs to run it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<TraceOrigin>,
    /// The run's kernel sandbox (`agentry_sandbox::SandboxSummary` as JSON:
    /// `mode`, `network`, `limits`): a run with `mode = "off"` says so here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_json::Value>,
}

/// Where a run came from: set by whoever starts it (`RunConfig::origin`),
/// written on its stop line so that the trace alone can be replayed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceOrigin {
    /// The task directory the run was started from, absolute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_dir: Option<String>,
    /// The run's working directory, absolute: results that name it are
    /// compared with the replay's own in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Tools approved up front (the CLI's `--approve`), so their calls do not
    /// park in a replay either.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved: Vec<String>,
}

/// Something that entered a run from outside, in the order it was applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunInput {
    /// A user message; it is in the session before the next decision.
    Message {
        /// Text.
        text: String,
    },
    /// The user interrupted the step in progress (its stream dropped, its
    /// tools cancelled). With a message, the message is in the session before
    /// the next decision and the run goes on; without one the run is paused
    /// until the user resumes it (a terminal asking what to say).
    Interrupt {
        /// What the user said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// A custom event (e.g. a webhook payload).
    Event {
        /// Name.
        name: String,
        /// Payload.
        payload: serde_json::Value,
    },
    /// A timer tick that woke the agent.
    Tick {
        /// Tick number, from 1.
        n: u64,
        /// Ticks skipped just before this one (the previous tick was still running).
        skipped: u64,
    },
    /// The run was paused.
    Pause,
    /// The run was resumed.
    Resume,
    /// A human decided on a pending call.
    Approval {
        /// The call.
        tool_call_id: String,
        /// Approved or denied.
        approved: bool,
        /// Why (for a denial or a timeout).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A human settled a call whose outcome a crash left unknown.
    Settlement {
        /// The call.
        tool_call_id: String,
        /// What the human said.
        settlement: crate::state::Settlement,
    },
}

/// A trace line for an input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceInput {
    /// Run id.
    pub run_id: String,
    /// Input sequence number within the run, from 1: the single order in which
    /// inputs were applied.
    pub seq: u64,
    /// State version after the input was applied.
    pub state_version: u64,
    /// The input.
    pub input: RunInput,
    /// When it was applied.
    pub at: UnixMillis,
}

/// A line of the JSONL trace, tagged by `kind` (`"step"`, `"input"` or `"stop"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TraceLine {
    /// A step record.
    Step(Box<TraceStep>),
    /// An input from outside.
    Input(Box<TraceInput>),
    /// The closing record.
    Stop(Box<TraceEnd>),
}
