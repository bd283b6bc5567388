//! AG-UI 1.0's events as they go on the wire (`@ag-ui/core`'s schemas): a
//! `type` in SCREAMING_SNAKE_CASE, fields in camelCase, and every optional
//! field left out when unset, never `null` (the client's schemas refuse
//! `null` for an optional field).

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

/// The query parameter of `GET /runs/{id}/events` that picks the format.
pub(crate) const FORMAT_PARAM: &str = "format";

/// Its value for AG-UI.
pub(crate) const AG_UI: &str = "ag-ui";

/// Whether `?format=ag-ui` asks for AG-UI; another format is 400.
pub(crate) fn wanted(query: Option<&str>) -> Result<bool, ApiError> {
    for pair in query.unwrap_or("").split('&') {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if name == FORMAT_PARAM {
            if value != AG_UI {
                return Err(ApiError::bad_field(
                    FORMAT_PARAM,
                    format!(
                        "{value:?}: the only format is {AG_UI:?} (leave it out for agentry's events)"
                    ),
                ));
            }
            return Ok(true);
        }
    }
    Ok(false)
}

/// One AG-UI event (the ones agentry sends).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum AgUiEvent {
    /// The first event of an AG-UI run (a segment of an agentry run).
    #[serde(rename_all = "camelCase")]
    RunStarted {
        thread_id: String,
        run_id: String,
    },
    /// The segment ended: the run stopped `done`, sleeps, or waits for a human.
    #[serde(rename_all = "camelCase")]
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<Outcome>,
    },
    /// The run stopped for another reason than `done` or `user_abort`.
    RunError {
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    StepStarted {
        step_name: String,
    },
    #[serde(rename_all = "camelCase")]
    StepFinished {
        step_name: String,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageStart {
        message_id: String,
        role: Role,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageEnd {
        message_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallEnd {
        tool_call_id: String,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: ToolRole,
    },
    StateSnapshot {
        snapshot: Value,
    },
    /// RFC 6902 operations.
    StateDelta {
        delta: Value,
    },
    Custom {
        name: String,
        value: Value,
    },
}

/// A text message's author; agentry's text is the model's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    Assistant,
}

/// The only role a tool result takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ToolRole {
    Tool,
}

/// How a segment ended, as `RUN_FINISHED.outcome` says it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub(crate) enum Outcome {
    Success,
    /// Calls wait for a human: the next `RunAgentInput` answers them in `resume`.
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    /// The user aborted the run.
    Cancelled,
}

/// A call parked for approval, as an AG-UI interrupt: its `id` is the call's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Interrupt {
    pub id: String,
    pub reason: String,
    pub tool_call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why an interrupt is raised: a call waits for approval.
pub(crate) const APPROVAL_REQUIRED: &str = "approval_required";

/// The CUSTOM event that carries a parked call's effect and preview.
pub(crate) const APPROVAL_EVENT: &str = "agentry.approval";

/// The CUSTOM event that names the agentry run a thread maps to.
pub(crate) const RUN_EVENT: &str = "agentry.run";

/// `data: <json>\n\n`, as axum's SSE writes it (LF framing: AG-UI's client
/// splits frames on `\n\n` only).
pub(crate) fn sse(event: &AgUiEvent) -> axum::response::sse::Event {
    let json = serde_json::to_string(event).unwrap_or_default();
    axum::response::sse::Event::default().data(json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unset_optional_fields_are_left_out_and_names_are_agui_s() {
        let finished = AgUiEvent::RunFinished {
            thread_id: "t".into(),
            run_id: "r".into(),
            result: None,
            outcome: Some(Outcome::Interrupt {
                interrupts: vec![Interrupt {
                    id: "c1".into(),
                    reason: APPROVAL_REQUIRED.into(),
                    tool_call_id: "c1".into(),
                    message: None,
                }],
            }),
        };
        assert_eq!(
            serde_json::to_value(&finished).unwrap(),
            json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r",
                   "outcome": {"type": "interrupt", "interrupts": [
                       {"id": "c1", "reason": "approval_required", "toolCallId": "c1"}]}})
        );
        let start = AgUiEvent::ToolCallStart {
            tool_call_id: "c".into(),
            tool_call_name: "fs.read".into(),
            parent_message_id: None,
        };
        assert_eq!(
            serde_json::to_value(&start).unwrap(),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "fs.read"})
        );
        let text = AgUiEvent::TextMessageStart {
            message_id: "m".into(),
            role: Role::Assistant,
        };
        assert_eq!(serde_json::to_value(&text).unwrap()["role"], "assistant");
    }
}
