//! The one shape every error answer has: a status and `{"error": "..."}`.

use agentry::RuntimeError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer: a status and `{"error": "..."}` naming the problem.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// Seconds for a `Retry-After` header (a busy run).
    retry_after: Option<u64>,
}

/// What a 429 asks a client to wait before it sends again, in seconds: a busy
/// run's inbox empties at its next decision, typically well within this.
const RETRY_AFTER_SECONDS: u64 = 1;

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400 with this message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 500 with this message.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// An input refused by the runtime: 409 when the run has stopped, 429 with
    /// `Retry-After` when its inbox is full.
    // `RuntimeError` is non_exhaustive: any other kind is the service's fault.
    #[allow(clippy::wildcard_enum_match_arm)]
    pub(super) fn from_runtime(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Stopped { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            RuntimeError::InboxFull { .. } => ApiError {
                retry_after: Some(RETRY_AFTER_SECONDS),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, e.to_string())
            },
            RuntimeError::NoPendingApproval { .. } | RuntimeError::NoPendingDecision { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, e.to_string())
            }
            other @ (RuntimeError::InvalidTask { .. }
            | RuntimeError::InvalidTool { .. }
            | RuntimeError::Workdir { .. }
            | RuntimeError::Redaction(_)
            | RuntimeError::Trace { .. }
            | RuntimeError::Spawn { .. }
            | RuntimeError::ChildRefused { .. }
            | RuntimeError::Store(_)
            | RuntimeError::NoStore
            | RuntimeError::NoSuchRun { .. }
            | RuntimeError::AlreadyStopped { .. }
            | RuntimeError::NotResumable { .. }
            | RuntimeError::ProcessesAlive(_)
            | RuntimeError::Owned { .. }
            | RuntimeError::UnsafePath { .. }
            | RuntimeError::InvalidRunId { .. }
            | RuntimeError::Lost { .. }
            | _) => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = axum::Json(json!({ "error": self.message }));
        match self.retry_after {
            Some(seconds) => (
                self.status,
                [(axum::http::header::RETRY_AFTER, seconds.to_string())],
                body,
            )
                .into_response(),
            None => (self.status, body).into_response(),
        }
    }
}
