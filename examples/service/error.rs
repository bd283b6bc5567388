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
}

impl ApiError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
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

    /// An input refused by the runtime: 409 when the run has stopped.
    pub(super) fn from_runtime(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Stopped { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            RuntimeError::NoPendingApproval { .. } | RuntimeError::NoPendingDecision { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, e.to_string())
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}
