//! The one shape every error answer has: a status and `{"error": {"code",
//! "message", "field"?}}`; and [`ServeError`], why a service cannot be set up
//! (a bad serve.toml, tokens file or flag value).

use std::path::PathBuf;

use agentry::RuntimeError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answer: a status and `{"error": {"code", "message", "field"?}}`
/// naming the problem (`code` follows the status: [`code_of`]; `field`, when
/// one field of the request is at fault, names it as `budget.max_steps`).
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    pub(super) field: Option<String>,
    /// Seconds for a `Retry-After` header (a busy run).
    retry_after: Option<u64>,
    /// A `WWW-Authenticate: Bearer` header (a missing or wrong token).
    bearer_challenge: bool,
    /// The body's `code` when the status's own would not say enough.
    code: Option<&'static str>,
}

/// The `code` of the 409 for an input a run refused because it was letting
/// its lease go (a cluster's hibernated run): the node the request reached
/// sends it on to whichever node takes the run next
/// ([`Answer::is_let_go`](crate::Answer::is_let_go)).
pub const LET_GO: &str = "let_go";

/// What a 429 asks a client to wait before it sends again, in seconds: a busy
/// run's inbox empties at its next decision, typically well within this.
const RETRY_AFTER_SECONDS: u64 = 1;

impl ApiError {
    /// An answer with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            field: None,
            retry_after: None,
            bearer_challenge: false,
            code: None,
        }
    }

    /// 401: no valid bearer token. The same answer whatever was wrong with it.
    pub fn unauthorized() -> Self {
        ApiError {
            bearer_challenge: true,
            ..ApiError::new(
                StatusCode::UNAUTHORIZED,
                "a valid bearer token is required: send Authorization: Bearer TOKEN",
            )
        }
    }

    /// 400 with this message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 400 about one field of the request: the message starts with its name.
    pub fn bad_field(field: impl Into<String>, message: impl std::fmt::Display) -> Self {
        let field = field.into();
        ApiError {
            field: Some(field.clone()),
            ..ApiError::bad_request(format!("{field}: {message}"))
        }
    }

    /// 404: no such run, in the one answer an unknown run and another
    /// tenant's run both get.
    pub fn no_such_run(id: &str) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, format!("no run with id {id:?}"))
    }

    /// With a `Retry-After` header of `seconds`.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// 500 with this message.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// An input refused by the runtime: 409 when the run has stopped, 429 with
    /// `Retry-After` when its inbox is full.
    // `RuntimeError` is non_exhaustive: any other kind is the service's fault.
    #[allow(clippy::wildcard_enum_match_arm)]
    pub fn from_runtime(e: RuntimeError) -> Self {
        match e {
            RuntimeError::Stopped { .. } => ApiError::new(StatusCode::CONFLICT, e.to_string()),
            RuntimeError::LetGo { .. } => ApiError {
                code: Some(LET_GO),
                ..ApiError::new(StatusCode::CONFLICT, e.to_string())
            },
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

/// The `code` of an error answer: the status's reason in snake case
/// (`not_found`, `too_many_requests`), stable for clients to branch on.
pub fn code_of(status: StatusCode) -> String {
    match status {
        StatusCode::INTERNAL_SERVER_ERROR => "internal".to_string(),
        other => other
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
            .replace([' ', '-'], "_")
            .replace('\'', ""),
    }
}

/// The JSON body of an error answer.
pub(crate) fn error_body(
    status: StatusCode,
    message: &str,
    field: Option<&str>,
) -> serde_json::Value {
    let mut error = json!({ "code": code_of(status), "message": message });
    if let Some(field) = field {
        error["field"] = json!(field);
    }
    json!({ "error": error })
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = error_body(self.status, &self.message, self.field.as_deref());
        if let Some(code) = self.code {
            body["error"]["code"] = json!(code);
        }
        let body = axum::Json(body);
        let mut response = (self.status, body).into_response();
        let headers = response.headers_mut();
        if let Some(seconds) = self.retry_after {
            headers.insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        if self.bearer_challenge {
            headers.insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

/// Why a service cannot be set up: its serve.toml, its tokens, its flags.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// serve.toml cannot be read.
    #[error("{}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// serve.toml is not what it should be; `key` names the setting at fault.
    #[error("{}: {key}: {message}", .path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// The key at fault (`agents.x.task`), or `(file)` for its syntax.
        key: String,
        /// What is wrong with it.
        message: String,
    },
    /// The tokens file cannot be used; `line` is 0 for the file as a whole.
    #[error("{}: line {line}: {message}", .path.display())]
    Tokens {
        /// The file.
        path: PathBuf,
        /// The line at fault (1-based), or 0.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// `AGENTRY_TOKEN` is set but unusable.
    #[error("AGENTRY_TOKEN: {0}")]
    TokenEnv(&'static str),
    /// An `--allow-host` value is not `NAME` or `NAME:PORT`.
    #[error("{0:?}: expected a host name, or NAME:PORT")]
    AllowHost(String),
    /// An `--allow-origin` value is not `scheme://host[:port]`.
    #[error("{0:?}: expected an origin, scheme://host or scheme://host:port (no path)")]
    AllowOrigin(String),
    /// The queue's tables in the store's file cannot be used.
    #[error("{}: the queue of runs: {message}", .path.display())]
    Queue {
        /// The file.
        path: PathBuf,
        /// What SQLite said.
        message: String,
    },
    /// `max_streams` leaves no connection for short requests.
    #[error(
        "max_streams ({streams}) must be below max_connections ({connections}): the connections beyond the streams are kept for short requests"
    )]
    StreamsTakeEveryConnection {
        /// The streams asked for.
        streams: usize,
        /// The connection limit.
        connections: usize,
    },
}
