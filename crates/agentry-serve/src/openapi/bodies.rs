//! The request and answer bodies of the routes, as the document describes
//! them (see the parent module).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// An error: a stable code, a message for a person, the field at fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// The status's reason in snake case (`not_found`, `too_many_requests`,
    /// `internal` for a 500): stable for clients to branch on.
    pub code: String,
    /// What is wrong, naming what to change.
    pub message: String,
    /// The request field at fault (`budget.max_steps`), when one is.
    #[schema(nullable = false)]
    pub field: Option<String>,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// `ok`; with a 503 `draining` (the service is stopping) or
    /// `unavailable` (the store does not answer).
    pub status: String,
    /// `ok`, or `unavailable`.
    pub store: String,
    /// With a 503: what is wrong, as every error says it.
    #[schema(nullable = false)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDetail>,
}

/// `POST /runs` for an operator's agent (`[agents.NAME]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentRunRequest {
    /// The agent's name in serve.toml.
    #[schema(min_length = 1)]
    pub agent: String,
    /// The first user message (the task's goal stays the operator's).
    #[schema(nullable = false)]
    pub input: Option<String>,
    /// Files written into the run's working directory: relative path → text.
    #[schema(nullable = false)]
    pub files: Option<BTreeMap<String, String>>,
    /// A budget narrower than the agent's (`[budget]`'s fields); a wider value is 400 naming the field.
    #[schema(nullable = false)]
    pub budget: Option<BTreeMap<String, Value>>,
    /// Grants narrower than the agent's (`[tools]`'s fields); a tool the agent lacks is 400.
    #[schema(nullable = false)]
    pub tools: Option<BTreeMap<String, Value>>,
    /// A URL (its host in `[serve] webhook_hosts`) that gets one signed POST
    /// (Standard Webhooks) when the run stops.
    #[schema(nullable = false)]
    pub webhook: Option<String>,
}

/// `POST /runs` for an inline task: task.toml's fields as JSON, a scripted
/// policy's `script` and the initial `files`. No command tools, MCP servers or
/// model policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InlineRunRequest {
    /// What the run is for.
    #[schema(min_length = 1)]
    pub goal: String,
    /// The scripted policy's script: its decisions, in order.
    pub script: Value,
    /// Files written into the run's working directory: relative path → text.
    #[schema(nullable = false)]
    pub files: Option<BTreeMap<String, String>>,
    /// `[budget]`.
    #[schema(nullable = false)]
    pub budget: Option<BTreeMap<String, Value>>,
    /// `[tools]`: built-in grants only.
    #[schema(nullable = false)]
    pub tools: Option<BTreeMap<String, Value>>,
    /// `[accept]`.
    #[schema(nullable = false)]
    pub accept: Option<BTreeMap<String, Value>>,
    /// `[progress]`.
    #[schema(nullable = false)]
    pub progress: Option<BTreeMap<String, Value>>,
    /// `[driver]`: `steps`, or event-driven.
    #[schema(nullable = false)]
    pub driver: Option<BTreeMap<String, Value>>,
    /// `[tree]`.
    #[schema(nullable = false)]
    pub tree: Option<BTreeMap<String, Value>>,
    /// `[redact]`.
    #[schema(nullable = false)]
    pub redact: Option<BTreeMap<String, Value>>,
    /// `[trace]`.
    #[schema(nullable = false)]
    pub trace: Option<BTreeMap<String, Value>>,
    /// A URL (its host in `[serve] webhook_hosts`) that gets one signed POST
    /// (Standard Webhooks) when the run stops.
    #[schema(nullable = false)]
    pub webhook: Option<String>,
}

/// What `POST /runs` takes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CreateRunRequest {
    /// A run of an operator's agent.
    Agent(AgentRunRequest),
    /// An inline scripted task.
    Inline(InlineRunRequest),
}

/// `201` to `POST /runs` (`Location: /runs/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCreated {
    /// The new run.
    pub run_id: String,
    /// Its W3C traceparent.
    pub traceparent: String,
}

/// `201` to `POST /runs` past `[serve] max_running`: the run waits for a slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunQueued {
    /// The run, known before it starts.
    pub run_id: String,
    /// `queued`.
    pub status: RunStatusName,
    /// Its place in the queue, from 1.
    pub position: u64,
}

/// What `POST /runs` answers with `201`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum CreatedAnswer {
    /// Started.
    Started(RunCreated),
    /// Queued behind `[serve] max_running`.
    Queued(RunQueued),
}

/// `GET /runs/{id}` of a run still in the queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueuedRunView {
    /// The run.
    pub run_id: String,
    /// `queued`.
    pub status: RunStatusName,
    /// Its place in the queue, from 1.
    #[schema(nullable = false)]
    pub position: Option<u64>,
    /// The operator's agent it runs, if any.
    #[schema(nullable = false)]
    pub agent: Option<String>,
    /// The named model it runs on, if any.
    #[schema(nullable = false)]
    pub model: Option<String>,
}

/// What `GET /runs/{id}` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum RunAnswer {
    // Boxed: far larger than a queued run's view.
    /// A run that started.
    Run(Box<RunView>),
    /// A run waiting for a slot.
    Queued(QueuedRunView),
}

/// Where a run is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatusName {
    /// Waiting for a slot (`[serve] max_running`).
    Queued,
    /// Stepping (or about to).
    Running,
    /// Paused by an interrupt.
    Paused,
    /// Parked on a call that needs an approval.
    AwaitingApproval,
    /// An event-driven agent waiting for its next input.
    Sleeping,
    /// Stopped: see its outcome.
    Stopped,
    /// Resumed after a crash with a call whose outcome is unknown.
    AwaitingDecision,
}

/// One row of `GET /runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRow {
    /// The run.
    pub run_id: String,
    /// `running` until it stopped.
    pub status: RunStatusName,
    /// The operator's agent it runs, if any.
    #[schema(nullable = false)]
    pub agent: Option<String>,
    /// The named model it runs on, if any.
    #[schema(nullable = false)]
    pub model: Option<String>,
    /// When it was created (Unix ms).
    pub created_at_ms: u64,
    /// Why it stopped, once it has.
    #[schema(nullable = false)]
    pub stop_reason: Option<String>,
}

/// `GET /runs?status=`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ListStatus {
    /// Not stopped yet.
    Running,
    /// Stopped.
    Stopped,
}

/// `GET /runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunList {
    /// The caller's runs, newest first.
    pub runs: Vec<RunRow>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[schema(nullable = false)]
    pub next_cursor: Option<String>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomeView {
    /// Why it stopped (`done`, `max_steps`, `deadline`, `user_abort`, ...).
    pub stop_reason: String,
    /// The model's final answer, if it gave one.
    pub answer: Option<String>,
    /// What stopped it, in words, if more than the reason.
    pub detail: Option<String>,
    /// Steps taken.
    pub steps: u64,
    /// Tool calls made.
    pub tool_calls: u64,
}

/// `GET /runs/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Where it is.
    pub status: RunStatusName,
    /// Steps taken.
    pub steps: u64,
    /// Tool calls made.
    pub tool_calls: u64,
    /// Model tokens read, its whole tree's (what its budget counts).
    pub tokens_in: u64,
    /// Model tokens written.
    pub tokens_out: u64,
    /// What its model calls cost, in millionths of the priced currency.
    pub cost_micros: u64,
    /// Inputs (messages, events, redirects) applied.
    pub inputs: u64,
    /// Calls parked for an approval: `{"step", "call": {"id", "tool", "arguments"}, "requested_at"}`.
    pub pending_approvals: Vec<Value>,
    /// Calls a crash left with an unknown outcome, waiting for a decision.
    #[schema(nullable = false)]
    pub pending_decisions: Option<Vec<Value>>,
    /// The answer so far, while it has not stopped (an event-driven
    /// agent's between inputs); a stopped run's is in `outcome`.
    #[schema(nullable = false)]
    pub answer: Option<String>,
    /// How it ended, once it has.
    #[schema(nullable = false)]
    pub outcome: Option<OutcomeView>,
    /// Its W3C traceparent.
    pub traceparent: String,
    /// The operator's agent it runs, if any.
    #[schema(nullable = false)]
    pub agent: Option<String>,
    /// The named model it runs on, if any.
    #[schema(nullable = false)]
    pub model: Option<String>,
}

/// `POST /runs/{id}/messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageRequest {
    /// The user message.
    #[schema(min_length = 1)]
    pub text: String,
}

/// `POST /runs/{id}/events`: a custom event for an event-driven agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EventRequest {
    /// The event's name.
    #[schema(min_length = 1)]
    pub name: String,
    /// Any JSON.
    pub payload: Option<Value>,
}

/// What `POST /runs/{id}/interrupt` does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptAction {
    /// Stop stepping after the current step.
    Pause,
    /// Go on after a pause.
    Resume,
    /// Stop the run (`user_abort`).
    Abort,
    /// Cut the current step and hand the model `message`.
    Redirect,
}

/// `POST /runs/{id}/interrupt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InterruptRequest {
    /// What to do.
    pub action: InterruptAction,
    /// The message of a redirect (only a redirect takes one).
    #[schema(nullable = false)]
    pub message: Option<String>,
}

/// `202`: the input is the run's; it applies it at its next decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Accepted {
    /// The run.
    pub run_id: String,
    /// `true`.
    pub accepted: bool,
}

/// An approval's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDecision {
    /// Run the call.
    Approve,
    /// Refuse it: the model sees `EPERM` with the reason.
    Deny,
    /// Answer the question a running call put to a human (a remote A2A
    /// agent's, with `input_required = "human"`): `answer` goes on to it.
    Answer,
}

/// `POST /runs/{id}/approvals/{call_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    /// Approve or deny.
    pub decision: ApprovalDecision,
    /// Why, for a denial (the model sees it).
    #[schema(nullable = false)]
    pub reason: Option<String>,
    /// The text, with `"decision": "answer"` (and only then).
    #[schema(nullable = false)]
    pub answer: Option<String>,
}

/// A crash decision's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SettlementName {
    /// The call took effect: record it as done, never run it again.
    Happened,
    /// It did not: run it again.
    Retry,
    /// Leave it: the model is told it did not run.
    Skip,
}

/// `POST /runs/{id}/decisions/{call_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// What happened to the call.
    pub decision: SettlementName,
}

/// `200` to an approval or a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Decided {
    /// The run.
    pub run_id: String,
    /// The call decided.
    pub tool_call_id: String,
    /// The decision, as sent.
    pub decision: String,
    /// The sequence number of the event that records it.
    pub seq: u64,
}
