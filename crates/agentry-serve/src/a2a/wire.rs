//! A2A 1.0's JSON-RPC wire: the envelope, the error codes (sent as HTTP
//! 200, with a google.rpc `ErrorInfo` as the SDKs send them), and a client's
//! message read into what agentry takes (text, an approval, a decision).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::error::ApiError;
use super::super::inputs::Verdict;

/// The protocol version this binding speaks (the `A2A-Version` header).
pub(super) const VERSION: &str = "1.0";

/// A JSON-RPC error of the A2A binding.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct RpcError {
    code: i64,
    message: String,
    reason: &'static str,
}

impl RpcError {
    fn new(code: i64, reason: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            reason,
        }
    }

    /// -32001: no such task (also another tenant's, or another agent's).
    pub(super) fn task_not_found(id: &str) -> RpcError {
        RpcError::new(-32001, "TASK_NOT_FOUND", format!("task {id} not found"))
    }

    /// -32002: the task is terminal.
    pub(super) fn not_cancelable(id: &str, state: &str) -> RpcError {
        RpcError::new(
            -32002,
            "TASK_NOT_CANCELABLE",
            format!("task {id} is in terminal state: {state}"),
        )
    }

    /// -32003: this service sends no push notifications.
    pub(super) fn push_not_supported() -> RpcError {
        RpcError::new(
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "push notifications need [serve] webhook_hosts",
        )
    }

    /// -32004.
    pub(super) fn unsupported(message: impl Into<String>) -> RpcError {
        RpcError::new(-32004, "UNSUPPORTED_OPERATION", message)
    }

    /// -32005.
    pub(super) fn content_type(message: impl Into<String>) -> RpcError {
        RpcError::new(-32005, "CONTENT_TYPE_NOT_SUPPORTED", message)
    }

    /// -32009: a request without `A2A-Version: 1.x`.
    pub(super) fn version(found: &str) -> RpcError {
        RpcError::new(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!(
                "A2A version '{found}' is not supported by this handler. Expected version '{VERSION}'."
            ),
        )
    }

    /// -32600.
    pub(super) fn invalid_request(message: impl Into<String>) -> RpcError {
        RpcError::new(-32600, "INVALID_REQUEST", message)
    }

    /// -32601.
    pub(super) fn method_not_found(method: &str) -> RpcError {
        RpcError::new(
            -32601,
            "METHOD_NOT_FOUND",
            format!("method not found: {method}"),
        )
    }

    /// -32602.
    pub(super) fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(-32602, "INVALID_PARAMS", message)
    }

    /// -32700.
    pub(super) fn parse(message: impl Into<String>) -> RpcError {
        RpcError::new(-32700, "PARSE_ERROR", message)
    }

    /// -32603.
    pub(super) fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(-32603, "INTERNAL_ERROR", message)
    }

    /// The error object of a JSON-RPC response.
    pub(super) fn body(&self) -> Value {
        json!({
            "code": self.code,
            "message": self.message,
            "data": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": self.reason,
                "domain": "a2a-protocol.org",
                "metadata": {},
            }],
        })
    }
}

/// Why a call failed: a JSON-RPC error, or an HTTP answer the native routes
/// give too (413 past a run's input limit, 429 with `Retry-After` for a full
/// queue or inbox), which a client retries by its status.
#[derive(Debug)]
pub(super) enum Failure {
    /// A JSON-RPC error (HTTP 200).
    Rpc(RpcError),
    /// The native route's answer.
    Http(ApiError),
}

impl From<RpcError> for Failure {
    fn from(e: RpcError) -> Failure {
        Failure::Rpc(e)
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Failure {
        match e.status() {
            StatusCode::PAYLOAD_TOO_LARGE | StatusCode::TOO_MANY_REQUESTS => Failure::Http(e),
            StatusCode::BAD_REQUEST
            | StatusCode::NOT_FOUND
            | StatusCode::CONFLICT
            | StatusCode::UNPROCESSABLE_ENTITY => {
                Failure::Rpc(RpcError::invalid_params(e.message()))
            }
            _ => Failure::Rpc(RpcError::internal(e.message())),
        }
    }
}

/// A JSON-RPC response: `result` or `error`, with the request's id.
pub(super) fn envelope(id: &Value, result: Result<Value, &RpcError>) -> Value {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.body()}),
    }
}

/// The HTTP answer of a call.
pub(super) fn reply(id: &Value, result: Result<Value, Failure>) -> Response {
    match result {
        Ok(value) => axum::Json(envelope(id, Ok(value))).into_response(),
        Err(Failure::Rpc(error)) => axum::Json(envelope(id, Err(&error))).into_response(),
        Err(Failure::Http(error)) => error.into_response(),
    }
}

/// What a client's message asks of a task.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Incoming {
    /// The task it continues (`message.taskId`), if any.
    pub(super) task_id: Option<String>,
    /// Its text parts, joined by newlines.
    pub(super) text: Option<String>,
    /// A data part `{"approval": {...}}`.
    pub(super) approval: Option<Approval>,
    /// A data part `{"decision": {...}}`.
    pub(super) decision: Option<Decision>,
}

/// A human's word on a call parked for approval: approve, deny, or the
/// text for a remote agent's question.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Approval {
    pub(super) call_id: String,
    pub(super) verdict: Verdict,
}

/// A human's settlement of a call a crash interrupted.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Decision {
    pub(super) call_id: String,
    pub(super) settle: String,
}

fn string_of(value: &Value, field: &str, path: &str) -> Result<String, RpcError> {
    match value.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(RpcError::invalid_params(format!(
            "{path}.{field}: expected a non-empty string"
        ))),
    }
}

/// `params.message` of SendMessage, read.
pub(super) fn incoming(params: &Value) -> Result<Incoming, RpcError> {
    let Some(message) = params.get("message").filter(|m| m.is_object()) else {
        return Err(RpcError::invalid_params("message: Field is required."));
    };
    let task_id = match message.get("taskId") {
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        _ => None,
    };
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut incoming = Incoming {
        task_id,
        text: None,
        approval: None,
        decision: None,
    };
    let mut texts = Vec::new();
    for part in &parts {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            texts.push(text.to_string());
        } else if let Some(data) = part.get("data") {
            read_data(data, &mut incoming)?;
        } else {
            return Err(RpcError::content_type(
                "only text parts and data parts are taken (no raw or url parts)",
            ));
        }
    }
    if !texts.is_empty() {
        incoming.text = Some(texts.join("\n"));
    }
    if incoming.text.is_none() && incoming.approval.is_none() && incoming.decision.is_none() {
        return Err(RpcError::invalid_params(
            "message.parts: expected a text part, or a data part with an approval or a decision",
        ));
    }
    Ok(incoming)
}

fn read_data(data: &Value, incoming: &mut Incoming) -> Result<(), RpcError> {
    if let Some(approval) = data.get("approval") {
        incoming.approval = Some(approval_of(approval)?);
        return Ok(());
    }
    if let Some(decision) = data.get("decision") {
        let path = "data.decision";
        incoming.decision = Some(Decision {
            call_id: string_of(decision, "call_id", path)?,
            settle: string_of(decision, "settle", path)?,
        });
        return Ok(());
    }
    Err(RpcError::invalid_params(
        "a data part holds {\"approval\": {...}} or {\"decision\": {...}}",
    ))
}

/// `{"call_id", "approve": bool, "reason"?}`, or `{"call_id", "answer"}`
/// for a remote agent's question (never both `approve` and `answer`).
fn approval_of(approval: &Value) -> Result<Approval, RpcError> {
    let path = "data.approval";
    let call_id = string_of(approval, "call_id", path)?;
    let verdict = match (approval.get("approve"), approval.get("answer")) {
        (Some(_), Some(_)) => {
            return Err(RpcError::invalid_params(format!(
                "{path}: either approve or answer, not both"
            )));
        }
        (None, Some(_)) => Verdict::Answer(string_of(approval, "answer", path)?),
        (approve, None) => match approve.and_then(Value::as_bool) {
            Some(true) => Verdict::Approve,
            Some(false) => Verdict::Deny(
                approval
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            None => {
                return Err(RpcError::invalid_params(format!(
                    "{path}.approve: expected a bool (or an answer: a non-empty string)"
                )));
            }
        },
    };
    Ok(Approval { call_id, verdict })
}

/// A task id parameter (`id`, or `taskId` for push configs).
pub(super) fn id_param(params: &Value, field: &str) -> Result<String, RpcError> {
    string_of(params, field, "params")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_as_text_an_approval_or_a_decision() {
        let text = json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "a"}, {"text": "b"}]}});
        let read = incoming(&text).map_err(|e| e.body()).ok();
        assert_eq!(read.and_then(|i| i.text), Some("a\nb".to_string()));
        let approval = json!({"message": {"taskId": "t", "parts": [
            {"data": {"approval": {"call_id": "c1", "approve": false, "reason": "no"}}}]}});
        let read = incoming(&approval).ok();
        assert_eq!(
            read.as_ref().and_then(|i| i.approval.clone()),
            Some(Approval {
                call_id: "c1".into(),
                verdict: Verdict::Deny(Some("no".into()))
            })
        );
        let answer = |approval: Value| {
            let message =
                json!({"message": {"taskId": "t", "parts": [{"data": {"approval": approval}}]}});
            incoming(&message)
                .map(|i| i.approval.map(|a| a.verdict))
                .map_err(|e| e.code)
        };
        assert_eq!(
            answer(json!({"call_id": "q1", "answer": "777"})),
            Ok(Some(Verdict::Answer("777".into())))
        );
        for bad in [
            json!({"call_id": "q1", "answer": "777", "approve": true}),
            json!({"call_id": "q1", "answer": ""}),
            json!({"call_id": "q1", "answer": 7}),
        ] {
            assert_eq!(answer(bad.clone()), Err(-32602), "{bad}");
        }
        assert_eq!(read.and_then(|i| i.task_id), Some("t".to_string()));
        let bad = json!({"message": {"parts": [{"data": {"approval": {"call_id": "c1"}}}]}});
        assert_eq!(incoming(&bad).map_err(|e| e.code), Err(-32602));
        let raw = json!({"message": {"parts": [{"raw": "aGk="}]}});
        assert_eq!(incoming(&raw).map_err(|e| e.code), Err(-32005));
    }
}
