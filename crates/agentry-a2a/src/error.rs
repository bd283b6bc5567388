//! [`A2aError`], the crate's one error, and [`RpcErrorKind`], the A2A 1.0
//! JSON-RPC error codes by name.

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use serde_json::Value;

/// What went wrong reaching or talking to a remote A2A agent.
#[derive(Debug, thiserror::Error)]
pub enum A2aError {
    /// The HTTP client could not be built (TLS setup, an unreadable `ca_cert`).
    #[error("A2A client for {url}: {reason}")]
    Setup {
        /// The agent's URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A configured header's `${VAR}` is not set in the environment.
    #[error("A2A client for {url}: header {name}: ${{{var}}} is not set in the environment")]
    MissingHeaderVar {
        /// The agent's URL.
        url: String,
        /// The header's name.
        name: String,
        /// The variable.
        var: String,
    },
    /// A configured header name or value is not valid HTTP.
    #[error("A2A client for {url}: header {name:?} is not valid HTTP")]
    BadHeader {
        /// The agent's URL.
        url: String,
        /// The header's name.
        name: String,
    },
    /// The agent card's URL answered with a non-success status.
    #[error("agent card at {url}: HTTP status {status}")]
    CardStatus {
        /// The card's URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The agent card's body is not JSON, or not an agent card.
    #[error("agent card at {url} is not an A2A agent card (JSON): {reason}")]
    CardNotJson {
        /// The card's URL.
        url: String,
        /// The parser's message.
        reason: String,
    },
    /// The card offers no `supportedInterfaces[]` entry with
    /// `protocolBinding` "JSONRPC" and `protocolVersion` "1.0".
    #[error(
        "agent card at {url} has no JSON-RPC interface of A2A protocol version 1.0 (it offers: {offered})"
    )]
    NoJsonRpc10 {
        /// The card's URL.
        url: String,
        /// What it offers instead, e.g. `JSONRPC 0.3 at http://…`, or `none`.
        offered: String,
    },
    /// The agent answered a request with a non-success HTTP status (401
    /// when its bearer token is missing or wrong).
    #[error("A2A agent at {url}: {method} got HTTP status {status}{}", status_hint(*status))]
    HttpStatus {
        /// The interface URL.
        url: String,
        /// The JSON-RPC method.
        method: &'static str,
        /// The status code.
        status: u16,
        /// The start of the body, for the log.
        body: String,
    },
    /// The request did not get an answer: connection refused, reset, or
    /// past the per-request timeout (`timed_out`).
    #[error("A2A agent at {url}: {method} failed: {reason}")]
    Transport {
        /// The URL.
        url: String,
        /// The JSON-RPC method, or `agent card`.
        method: &'static str,
        /// The HTTP client's error chain.
        reason: String,
        /// Whether the per-request timeout ran out.
        timed_out: bool,
    },
    /// The answer is not a JSON-RPC response, or its result not the shape
    /// the method returns.
    #[error("A2A agent at {url}: {method} answered with an invalid response: {reason}")]
    InvalidResponse {
        /// The interface URL.
        url: String,
        /// The JSON-RPC method.
        method: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The agent answered with a JSON-RPC error.
    #[error("A2A agent at {url}: {method} failed: {kind:?} ({code}): {message}")]
    Rpc {
        /// The interface URL.
        url: String,
        /// The JSON-RPC method.
        method: &'static str,
        /// The error code by name.
        kind: RpcErrorKind,
        /// The error code.
        code: i64,
        /// The agent's message.
        message: String,
        /// `error.data` (google.rpc details), if any.
        data: Option<Value>,
    },
}

fn status_hint(status: u16) -> &'static str {
    match status {
        401 => " (Unauthorized: the agent wants credentials; check the Authorization header)",
        403 => " (Forbidden: the credentials do not allow this)",
        _ => "",
    }
}

/// A2A 1.0's JSON-RPC error codes, and JSON-RPC 2.0's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcErrorKind {
    /// -32001: no such task (or not visible to these credentials).
    TaskNotFound,
    /// -32002: the task is in a state that cannot be cancelled.
    TaskNotCancelable,
    /// -32003.
    PushNotificationNotSupported,
    /// -32004: e.g. subscribing to a terminal task.
    UnsupportedOperation,
    /// -32005.
    ContentTypeNotSupported,
    /// -32006: the agent's own executor broke the protocol.
    InvalidAgentResponse,
    /// -32007.
    ExtendedAgentCardNotConfigured,
    /// -32008.
    ExtensionSupportRequired,
    /// -32009: the `A2A-Version` header names a version the agent does not serve.
    VersionNotSupported,
    /// -32700.
    ParseError,
    /// -32600.
    InvalidRequest,
    /// -32601.
    MethodNotFound,
    /// -32602: a parameter is missing or wrong (the data names the field).
    InvalidParams,
    /// -32603.
    InternalError,
    /// Any other code.
    Other,
}

impl RpcErrorKind {
    /// The kind of JSON-RPC error `code`.
    pub fn from_code(code: i64) -> Self {
        match code {
            -32001 => RpcErrorKind::TaskNotFound,
            -32002 => RpcErrorKind::TaskNotCancelable,
            -32003 => RpcErrorKind::PushNotificationNotSupported,
            -32004 => RpcErrorKind::UnsupportedOperation,
            -32005 => RpcErrorKind::ContentTypeNotSupported,
            -32006 => RpcErrorKind::InvalidAgentResponse,
            -32007 => RpcErrorKind::ExtendedAgentCardNotConfigured,
            -32008 => RpcErrorKind::ExtensionSupportRequired,
            -32009 => RpcErrorKind::VersionNotSupported,
            -32700 => RpcErrorKind::ParseError,
            -32600 => RpcErrorKind::InvalidRequest,
            -32601 => RpcErrorKind::MethodNotFound,
            -32602 => RpcErrorKind::InvalidParams,
            -32603 => RpcErrorKind::InternalError,
            _ => RpcErrorKind::Other,
        }
    }
}

/// A client error as the error of a call of agent `agent`.
pub(crate) fn call_error(agent: &str, e: A2aError) -> ToolError {
    let code = match &e {
        A2aError::HttpStatus {
            status: 401 | 403, ..
        } => ErrorCode::Eperm,
        A2aError::HttpStatus { .. } => ErrorCode::Eunavail,
        A2aError::Transport {
            timed_out: true, ..
        } => ErrorCode::Etimedout,
        A2aError::Transport { .. } => ErrorCode::Eunavail,
        A2aError::Rpc { kind, .. } => match kind {
            RpcErrorKind::TaskNotFound
            | RpcErrorKind::TaskNotCancelable
            | RpcErrorKind::InvalidParams
            | RpcErrorKind::ContentTypeNotSupported => ErrorCode::Einval,
            RpcErrorKind::PushNotificationNotSupported
            | RpcErrorKind::UnsupportedOperation
            | RpcErrorKind::ExtendedAgentCardNotConfigured
            | RpcErrorKind::ExtensionSupportRequired
            | RpcErrorKind::VersionNotSupported
            | RpcErrorKind::ParseError
            | RpcErrorKind::InvalidRequest
            | RpcErrorKind::MethodNotFound
            | RpcErrorKind::InvalidAgentResponse => ErrorCode::Einternal,
            RpcErrorKind::InternalError | RpcErrorKind::Other => ErrorCode::Eunavail,
        },
        A2aError::MissingHeaderVar { .. } => ErrorCode::Einval,
        A2aError::InvalidResponse { .. }
        | A2aError::CardNotJson { .. }
        | A2aError::NoJsonRpc10 { .. }
        | A2aError::Setup { .. }
        | A2aError::BadHeader { .. } => ErrorCode::Einternal,
        A2aError::CardStatus { .. } => ErrorCode::Eunavail,
    };
    ToolError::new(code, format!("A2A agent {agent}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_kinds() {
        assert_eq!(RpcErrorKind::from_code(-32001), RpcErrorKind::TaskNotFound);
        assert_eq!(
            RpcErrorKind::from_code(-32002),
            RpcErrorKind::TaskNotCancelable
        );
        assert_eq!(
            RpcErrorKind::from_code(-32009),
            RpcErrorKind::VersionNotSupported
        );
        assert_eq!(RpcErrorKind::from_code(-32602), RpcErrorKind::InvalidParams);
        assert_eq!(RpcErrorKind::from_code(-1), RpcErrorKind::Other);
    }

    #[test]
    fn a_401_is_named() {
        let e = A2aError::HttpStatus {
            url: "http://127.0.0.1:1/".into(),
            method: "SendMessage",
            status: 401,
            body: String::new(),
        };
        let text = e.to_string();
        assert!(
            text.contains("401") && text.contains("Unauthorized"),
            "{text}"
        );
    }
}
