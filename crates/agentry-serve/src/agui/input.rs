//! AG-UI's `RunAgentInput` (the body `HttpAgent` POSTs), checked field by
//! field: a bad one is 400 naming it, as AG-UI's own schema would refuse it.
//! What agentry takes from it: the thread, the run id to echo, the last user
//! message, and `resume` (answers to the interrupts a segment ended with:
//! approve, deny, settle, or the text for a remote agent's question).
//! Client-side `tools`, `context`, `state` and `forwardedProps` are checked
//! for their shape and not used: the agent's tools are its own.

use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::inputs::Verdict;

/// The parts of a `RunAgentInput` agentry acts on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunAgentInput {
    pub thread_id: String,
    pub run_id: String,
    /// The text of the last message with role `user`, if any.
    pub last_user_text: Option<String>,
    pub resume: Vec<Resume>,
}

/// One answer to an interrupt.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resume {
    /// The interrupt's id: the parked call's id.
    pub interrupt_id: String,
    /// `resolved` (true) or `cancelled` (false).
    pub resolved: bool,
    pub payload: Option<Value>,
    /// The payload's `answer`: the text for a remote agent's question.
    pub answer: Option<String>,
}

fn bad(field: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::bad_field(field, message)
}

fn string(fields: &Map<String, Value>, name: &str, at: &str) -> Result<String, ApiError> {
    match fields.get(name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(bad(at, format!("expected a string, found {other}"))),
        None => Err(bad(at, "missing")),
    }
}

fn optional_string(fields: &Map<String, Value>, name: &str) -> Result<(), ApiError> {
    match fields.get(name) {
        None | Some(Value::String(_)) => Ok(()),
        Some(other) => Err(bad(name, format!("expected a string, found {other}"))),
    }
}

/// An optional array field (absent means empty); `null` is refused as
/// AG-UI's schema refuses it.
fn array<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<&'a [Value], ApiError> {
    match fields.get(name) {
        None => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(bad(name, format!("expected an array, found {other}"))),
    }
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, ApiError> {
    value
        .as_object()
        .ok_or_else(|| bad(at, format!("expected an object, found {value}")))
}

impl RunAgentInput {
    /// Checks a body: every field AG-UI requires, with its type.
    pub(crate) fn parse(body: &[u8]) -> Result<RunAgentInput, ApiError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON: {e}")))?;
        let fields = value.as_object().ok_or_else(|| {
            ApiError::bad_request("the body must be AG-UI's RunAgentInput, a JSON object")
        })?;
        let thread_id = string(fields, "threadId", "threadId")?;
        let run_id = string(fields, "runId", "runId")?;
        for name in ["parentRunId", "protocolVersion"] {
            optional_string(fields, name)?;
        }
        if fields.get("forwardedProps") == Some(&Value::Null) {
            return Err(bad("forwardedProps", "must not be null (leave it out)"));
        }
        if !matches!(fields.get("messages"), Some(Value::Array(_))) {
            return Err(bad("messages", "expected an array of messages"));
        }
        let last_user_text = messages(array(fields, "messages")?)?;
        for (i, tool) in array(fields, "tools")?.iter().enumerate() {
            let tool = object(tool, &format!("tools[{i}]"))?;
            string(tool, "name", &format!("tools[{i}].name"))?;
            string(tool, "description", &format!("tools[{i}].description"))?;
        }
        for (i, context) in array(fields, "context")?.iter().enumerate() {
            let context = object(context, &format!("context[{i}]"))?;
            string(context, "description", &format!("context[{i}].description"))?;
            string(context, "value", &format!("context[{i}].value"))?;
        }
        let resume = array(fields, "resume")?
            .iter()
            .enumerate()
            .map(|(i, r)| Resume::parse(r, i))
            .collect::<Result<_, _>>()?;
        Ok(RunAgentInput {
            thread_id,
            run_id,
            last_user_text,
            resume,
        })
    }
}

/// Checks each message's `id` and `role`; the last user message's text.
fn messages(items: &[Value]) -> Result<Option<String>, ApiError> {
    let mut last = None;
    for (i, message) in items.iter().enumerate() {
        let at = format!("messages[{i}]");
        let fields = object(message, &at)?;
        string(fields, "id", &format!("{at}.id"))?;
        let role = string(fields, "role", &format!("{at}.role"))?;
        match role.as_str() {
            "user" => last = Some(user_text(fields.get("content"), &format!("{at}.content"))?),
            "assistant" | "system" | "developer" | "tool" | "activity" | "reasoning" => {}
            other => {
                return Err(bad(
                    &format!("{at}.role"),
                    format!("unknown role {other:?}"),
                ));
            }
        }
    }
    Ok(last)
}

/// A user message's text: the string, or its text parts joined (other parts,
/// images and files, are not taken: agentry's messages are text).
fn user_text(content: Option<&Value>, at: &str) -> Result<String, ApiError> {
    match content {
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = Vec::new();
            for (i, part) in parts.iter().enumerate() {
                let part = object(part, &format!("{at}[{i}]"))?;
                let kind = string(part, "type", &format!("{at}[{i}].type"))?;
                if kind == "text" {
                    text.push(string(part, "text", &format!("{at}[{i}].text"))?);
                }
            }
            Ok(text.join("\n"))
        }
        Some(other) => Err(bad(
            at,
            format!("expected a string or content parts, found {other}"),
        )),
        None => Err(bad(at, "missing")),
    }
}

impl Resume {
    fn parse(value: &Value, i: usize) -> Result<Resume, ApiError> {
        let at = format!("resume[{i}]");
        let fields = object(value, &at)?;
        let interrupt_id = string(fields, "interruptId", &format!("{at}.interruptId"))?;
        let status = string(fields, "status", &format!("{at}.status"))?;
        let resolved = match status.as_str() {
            "resolved" => true,
            "cancelled" => false,
            other => {
                return Err(bad(
                    &format!("{at}.status"),
                    format!("expected \"resolved\" or \"cancelled\", found {other:?}"),
                ));
            }
        };
        let payload = fields.get("payload").cloned();
        let answer = answer_of(payload.as_ref(), resolved, &format!("{at}.payload"))?;
        Ok(Resume {
            interrupt_id,
            resolved,
            payload,
            answer,
        })
    }

    /// What the answer says of a call parked for approval.
    pub(crate) fn verdict(&self) -> Verdict {
        match &self.answer {
            Some(answer) => Verdict::Answer(answer.clone()),
            None if self.approves() => Verdict::Approve,
            None => Verdict::Deny(self.reason()),
        }
    }

    /// Whether the answer approves the call: `resolved`, and its payload's
    /// `approved` is not `false`.
    pub(crate) fn approves(&self) -> bool {
        let denied = self
            .payload
            .as_ref()
            .and_then(|p| p.get("approved"))
            .is_some_and(|a| a == &Value::Bool(false));
        self.resolved && !denied
    }

    /// The payload's `reason`, for a denial.
    pub(crate) fn reason(&self) -> Option<String> {
        let reason = self.payload.as_ref().and_then(|p| p.get("reason"));
        match reason.and_then(Value::as_str) {
            Some(reason) => Some(reason.to_string()),
            None if !self.resolved => Some("cancelled from the AG-UI client".to_string()),
            None => None,
        }
    }

    /// The payload's `decision` (`happened`, `retry`, `skip`) for a call a
    /// crash cut; a cancelled interrupt skips it.
    pub(crate) fn settlement(&self) -> Result<agentry::Settlement, ApiError> {
        if !self.resolved {
            return Ok(agentry::Settlement::Skip);
        }
        let decision = self.payload.as_ref().and_then(|p| p.get("decision"));
        let decision = decision.and_then(Value::as_str).unwrap_or_default();
        decision
            .parse()
            .map_err(|m: String| bad("resume.payload.decision", m))
    }
}

/// `payload.answer`: a non-empty string on a resolved interrupt that does
/// not also say `approved: false`.
fn answer_of(
    payload: Option<&Value>,
    resolved: bool,
    at: &str,
) -> Result<Option<String>, ApiError> {
    let Some(answer) = payload.and_then(|p| p.get("answer")) else {
        return Ok(None);
    };
    let at = format!("{at}.answer");
    let Some(answer) = answer.as_str().filter(|a| !a.is_empty()) else {
        return Err(bad(
            &at,
            format!("expected a non-empty string, found {answer}"),
        ));
    };
    let denied = payload.and_then(|p| p.get("approved")) == Some(&Value::Bool(false));
    if !resolved || denied {
        return Err(bad(
            &at,
            "an answer resolves the interrupt (not with status cancelled or approved: false)",
        ));
    }
    Ok(Some(answer.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field_of(body: Value) -> Option<String> {
        RunAgentInput::parse(body.to_string().as_bytes())
            .err()
            .and_then(|e| e.field)
    }

    #[test]
    fn what_agui_refuses_is_400_naming_the_field() {
        let ok = json!({"threadId": "t", "runId": "r", "messages": [
            {"id": "u1", "role": "user", "content": "hi"},
            {"id": "a1", "role": "assistant", "content": "hello"},
            {"id": "u2", "role": "user", "content": [{"type": "text", "text": "again"}]}],
            "tools": [], "context": [], "forwardedProps": {}, "state": null});
        let input = RunAgentInput::parse(ok.to_string().as_bytes()).unwrap();
        assert_eq!(input.last_user_text.as_deref(), Some("again"));
        let with = |key: &str, value: Value| {
            let mut body = ok.clone();
            body[key] = value;
            body
        };
        assert_eq!(
            field_of(with("forwardedProps", Value::Null)).as_deref(),
            Some("forwardedProps")
        );
        assert_eq!(field_of(with("runId", json!(7))).as_deref(), Some("runId"));
        assert_eq!(
            field_of(with("messages", json!([{"id": "x"}]))).as_deref(),
            Some("messages[0].role")
        );
        assert_eq!(
            field_of(with("tools", json!([{"name": "t"}]))).as_deref(),
            Some("tools[0].description")
        );
        let resume = json!([{"interruptId": "c", "status": "maybe"}]);
        assert_eq!(
            field_of(with("resume", resume)).as_deref(),
            Some("resume[0].status")
        );
        let mut missing = ok.clone();
        missing.as_object_mut().unwrap().remove("runId");
        assert_eq!(field_of(missing).as_deref(), Some("runId"));
    }

    #[test]
    fn a_resolved_interrupt_approves_unless_its_payload_says_no() {
        let resume = |resolved, payload| Resume {
            interrupt_id: "c".into(),
            resolved,
            payload,
            answer: None,
        };
        assert!(resume(true, None).approves());
        assert!(resume(true, Some(json!({"approved": true}))).approves());
        assert!(!resume(true, Some(json!({"approved": false}))).approves());
        assert!(!resume(false, Some(json!({"approved": true}))).approves());
        assert!(resume(false, None).reason().is_some());
    }

    #[test]
    fn a_payloads_answer_is_the_text_for_a_remote_agents_question() {
        let body = |resume: Value| {
            json!({"threadId": "t", "runId": "r", "messages": [], "resume": [resume]}).to_string()
        };
        let read = RunAgentInput::parse(
            body(json!({"interruptId": "q1", "status": "resolved",
                "payload": {"answer": "777"}}))
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(read.resume[0].verdict(), Verdict::Answer("777".into()));
        for bad in [
            json!({"interruptId": "q1", "status": "resolved", "payload": {"answer": 7}}),
            json!({"interruptId": "q1", "status": "resolved", "payload": {"answer": ""}}),
            json!({"interruptId": "q1", "status": "cancelled", "payload": {"answer": "x"}}),
            json!({"interruptId": "q1", "status": "resolved",
                "payload": {"answer": "x", "approved": false}}),
        ] {
            let refused = RunAgentInput::parse(body(bad.clone()).as_bytes()).err();
            assert_eq!(
                refused.and_then(|e| e.field).as_deref(),
                Some("resume[0].payload.answer"),
                "{bad}"
            );
        }
    }
}
