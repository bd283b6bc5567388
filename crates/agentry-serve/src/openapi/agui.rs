//! The AG-UI route's body (`POST /agents/{name}/ag-ui`): AG-UI 1.0's
//! `RunAgentInput`, the fields agentry reads and the ones it checks.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::bodies::ErrorBody;

/// AG-UI's `RunAgentInput`, as `@ag-ui/client`'s `HttpAgent` POSTs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    /// The thread: new starts a run of the agent, known goes on with its run
    /// (a run id is a known thread).
    pub thread_id: String,
    /// Echoed in `RUN_STARTED` and `RUN_FINISHED`.
    pub run_id: String,
    /// Checked, not used.
    #[schema(nullable = false)]
    pub parent_run_id: Option<String>,
    /// Checked, not used.
    #[schema(nullable = false)]
    pub protocol_version: Option<String>,
    /// The client's state: not used (the state is the run's).
    pub state: Option<Value>,
    /// The conversation; the last `user` message's text is the input.
    pub messages: Vec<AgUiMessage>,
    /// Client-side tools: checked, not offered to the model.
    #[schema(nullable = false)]
    pub tools: Option<Vec<AgUiTool>>,
    /// Checked, not used.
    #[schema(nullable = false)]
    pub context: Option<Vec<AgUiContext>>,
    /// Not used; must not be `null`.
    #[schema(nullable = false)]
    pub forwarded_props: Option<Value>,
    /// Answers to the interrupts the last segment ended with.
    #[schema(nullable = false)]
    pub resume: Option<Vec<AgUiResume>>,
}

/// A message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgUiMessage {
    /// The message's id.
    pub id: String,
    /// `user`, `assistant`, `system`, `developer`, `tool`, `activity` or `reasoning`.
    pub role: AgUiRole,
    /// A string, or content parts (`{"type": "text", "text"}`, …); required for `user`.
    pub content: Option<Value>,
}

/// A message's author.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgUiRole {
    /// The person at the front end.
    User,
    /// The agent.
    Assistant,
    /// A system prompt.
    System,
    /// A developer prompt.
    Developer,
    /// A tool's result.
    Tool,
    /// A front end's activity.
    Activity,
    /// The model's reasoning.
    Reasoning,
}

/// A client-side tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgUiTool {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
}

/// A piece of context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgUiContext {
    /// What it is.
    pub description: String,
    /// The context.
    pub value: String,
}

/// An answer to an interrupt (a parked call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgUiResume {
    /// The interrupt's id: the call's.
    pub interrupt_id: String,
    /// `resolved` approves (unless `payload.approved` is false, or answers with `payload.answer`); `cancelled` denies.
    pub status: AgUiResumeStatus,
    /// `{"approved", "reason"?}`; `{"answer"}` (a non-empty string) for a remote A2A agent's question (`input_required = "human"`), sent on to that agent; or `{"decision"}` for a call a crash cut.
    pub payload: Option<Value>,
}

/// How an interrupt was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgUiResumeStatus {
    /// Answered.
    Resolved,
    /// Withdrawn.
    Cancelled,
}

/// Starts or continues a run of the named agent from AG-UI's `RunAgentInput`; the answer is the AG-UI event stream of what the run does until it stops, parks calls for a human or sleeps (docs/src/ag-ui.md).
#[utoipa::path(post, path = "/agents/{name}/ag-ui", operation_id = "runAgentAgUi",
    params(("name" = String, Path, description = "The named agent")),
    request_body(content = RunAgentInput, content_type = "application/json"),
    responses(
        (status = 200, description = "AG-UI events, one `data:` JSON event per frame", content_type = "text/event-stream", body = String),
        (status = 400, description = "A field is wrong (named in `field`)", body = ErrorBody),
        (status = 401, description = "No or a wrong token", body = ErrorBody),
        (status = 404, description = "No such agent, or the thread's run is gone", body = ErrorBody),
        (status = 409, description = "The thread's run has stopped, or a call is decided", body = ErrorBody),
        (status = 413, description = "Over the body or the run's input limit", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 429, description = "The queue is full, the tenant's day is spent, or the run's inbox is full (Retry-After)", body = ErrorBody),
        (status = 503, description = "On a cluster's node, the node that holds the thread's run did not answer in time (Retry-After)", body = ErrorBody),
        (status = 504, description = "On a cluster's node, the node a new thread's run was placed on took it and did not answer", body = ErrorBody)))]
#[allow(dead_code)] // documents its route; never called
pub(super) fn run_agent_ag_ui() {}
