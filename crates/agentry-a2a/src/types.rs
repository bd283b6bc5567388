//! The A2A 1.0 messages this client sends and reads, in their ProtoJSON
//! form: camelCase fields, enums as their `ROLE_*` / `TASK_STATE_*` names,
//! parts without a `kind`. Fields the client does not use are not modelled;
//! unknown ones are ignored.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The client (this side).
    #[serde(rename = "ROLE_USER")]
    User,
    /// The remote agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
    /// `ROLE_UNSPECIFIED` or a name this client does not know.
    #[serde(rename = "ROLE_UNSPECIFIED", other)]
    Unspecified,
}

/// One piece of a message or artifact: exactly one of `text`, `raw`
/// (base64), `url` or `data` is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// A file by URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Any JSON value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The file name of a `raw` or `url` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// The media type of the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    /// A part other than text as [`Task::other_parts`] shows it; `None` for
    /// an empty part.
    fn shown(&self) -> Option<Value> {
        let mut out = Map::new();
        if let Some(data) = &self.data {
            out.insert("data".into(), data.clone());
        } else if let Some(url) = &self.url {
            out.insert("url".into(), Value::String(url.clone()));
        } else if let Some(raw) = &self.raw {
            // Base64: four characters carry three bytes.
            let bytes = raw.trim_end_matches('=').len() * 3 / 4;
            out.insert("raw_bytes".into(), Value::from(bytes));
        } else {
            return None;
        }
        for (key, value) in [
            ("filename", &self.filename),
            ("media_type", &self.media_type),
        ] {
            if let Some(v) = value.as_ref().filter(|v| !v.is_empty()) {
                out.insert(key.into(), Value::String(v.clone()));
            }
        }
        Some(Value::Object(out))
    }

    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }
}

/// A message between client and agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Unique per message (the client makes one per send).
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it continues, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
}

impl Message {
    /// The text parts, joined by newlines.
    pub fn text(&self) -> String {
        join_text(&self.parts)
    }
}

/// The text parts of `parts`, joined by newlines.
pub(crate) fn join_text(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| p.text.as_deref())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Received, not started.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Running.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Done (terminal).
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Failed (terminal).
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Cancelled (terminal).
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// Refused by the agent (terminal).
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Waits for the client's answer (interrupted).
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Waits for credentials (interrupted).
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
    /// `TASK_STATE_UNSPECIFIED`, or a state this client does not know.
    #[serde(rename = "TASK_STATE_UNSPECIFIED", other)]
    Unspecified,
}

impl TaskState {
    /// The ProtoJSON name, e.g. `TASK_STATE_COMPLETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
            TaskState::Unspecified => "TASK_STATE_UNSPECIFIED",
        }
    }

    /// Whether the task has ended for good.
    pub fn is_terminal(self) -> bool {
        match self {
            TaskState::Completed
            | TaskState::Failed
            | TaskState::Canceled
            | TaskState::Rejected => true,
            TaskState::Submitted
            | TaskState::Working
            | TaskState::InputRequired
            | TaskState::AuthRequired
            | TaskState::Unspecified => false,
        }
    }
}

/// A task's state and the agent's latest word on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// What the agent says with it (its question, for INPUT_REQUIRED).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// An output of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Its id.
    #[serde(default)]
    pub artifact_id: String,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
}

/// A unit of work on the remote agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Its id (the agent's).
    pub id: String,
    /// Its conversation.
    #[serde(default)]
    pub context_id: String,
    /// Where it is.
    pub status: TaskStatus,
    /// What it produced so far.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// The messages exchanged, when asked for.
    #[serde(default)]
    pub history: Vec<Message>,
    /// The agent's own metadata.
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

impl Task {
    /// The text parts of all artifacts, joined by newlines.
    pub fn artifact_text(&self) -> String {
        self.artifacts
            .iter()
            .map(|a| join_text(&a.parts))
            .filter(|t| !t.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The artifacts' parts that are not text, as the model is shown them:
    /// `{"data": …}`, `{"url", "filename"?, "media_type"?}`, and for bytes
    /// only their size (`{"raw_bytes", …}`): bytes are not inlined.
    pub fn other_parts(&self) -> Vec<Value> {
        self.artifacts
            .iter()
            .flat_map(|a| &a.parts)
            .filter(|p| p.text.is_none())
            .filter_map(Part::shown)
            .collect()
    }

    /// The text of the status message (the agent's question or reason), or "".
    pub fn status_text(&self) -> String {
        self.status
            .message
            .as_ref()
            .map(Message::text)
            .unwrap_or_default()
    }
}

/// What `SendMessage` returns: a task, or a direct reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SendResult {
    /// `{"task": …}`: the agent made (or continued) a task.
    Task(Task),
    /// `{"message": …}`: the agent answered at once, with no task.
    Message(Message),
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_task_result_parses_with_protojson_names() {
        let r: SendResult = serde_json::from_value(json!({"task": {
            "id": "t1", "contextId": "c1",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {
                "messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "which one?"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"text": "x"}, {"data": {"k": 1}}]}],
            "extra": true
        }}))
        .unwrap();
        let SendResult::Task(task) = r else {
            panic!("not a task")
        };
        assert_eq!(task.status.state, TaskState::InputRequired);
        assert_eq!(task.status_text(), "which one?");
        assert_eq!(task.artifact_text(), "x");
        assert_eq!(task.other_parts(), vec![json!({"data": {"k": 1}})]);
    }

    #[test]
    fn an_unknown_state_is_unspecified_and_parts_carry_no_kind() {
        let s: TaskState = serde_json::from_value(json!("TASK_STATE_SOMETHING_NEW")).unwrap();
        assert_eq!(s, TaskState::Unspecified);
        assert_eq!(
            serde_json::to_value(Part::text("hi")).unwrap(),
            json!({"text": "hi"})
        );
    }
}
