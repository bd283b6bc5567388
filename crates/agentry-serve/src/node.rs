//! The seam between a service and the nodes it shares its store with
//! (`cluster.rs` routes through it; `agentry serve` implements it on
//! Postgres): what a forwarded request is, what its answer is, and what a
//! cluster does for a node.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::error::ApiError;
use super::events::{EventFeed, FedEvent};

/// A request for a run this node does not hold, as another node applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forward {
    /// The run it is for.
    pub run_id: String,
    /// The tenant that sent it (`None`: a service without tokens).
    pub tenant: Option<String>,
    /// `GET` or `POST`.
    pub method: String,
    /// The path and query, as sent.
    pub path: String,
    /// The body, as sent.
    pub body: Vec<u8>,
}

impl Forward {
    /// A request that a route of ours makes itself of run `run_id` for
    /// `tenant` (A2A and AG-UI speak through the native routes), with a JSON
    /// body or none.
    pub(crate) fn made(
        run_id: &str,
        tenant: &super::tenants::Tenant,
        method: &str,
        path: String,
        body: Option<&serde_json::Value>,
    ) -> Forward {
        Forward {
            run_id: run_id.to_string(),
            tenant: tenant.name().map(str::to_string),
            method: method.to_string(),
            path,
            body: body.map(|b| b.to_string().into_bytes()).unwrap_or_default(),
        }
    }
}

/// An answer to a [`Forward`]: what the node holding the run answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body.
    pub body: Vec<u8>,
}

impl Answer {
    /// Whether this is the 409 of a run that was letting its lease go as
    /// the request came ([`LET_GO`](crate::LET_GO)): the request
    /// goes to whichever node takes the run next.
    pub fn is_let_go(&self) -> bool {
        self.status == StatusCode::CONFLICT.as_u16()
            && serde_json::from_slice::<serde_json::Value>(&self.body)
                .is_ok_and(|v| v["error"]["code"] == super::error::LET_GO)
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_GATEWAY);
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.body,
        )
            .into_response()
    }
}

/// The nodes a service shares its store with (see the module docs).
pub trait Cluster: Send + Sync + std::fmt::Debug + 'static {
    /// Answers `forward`, a request for a run this node does not hold: the
    /// answer of the node that does, or of the store when none does now.
    fn elsewhere(&self, forward: Forward) -> BoxFuture<'static, Response>;

    /// Keeps the events of run `run_id`, which entered this node's table,
    /// where every node reads them (`feed` ends when the run's log closes).
    fn keep_events(&self, run_id: String, feed: EventFeed);

    /// Answers `GET /runs/{id}/events` (`forward`) from the kept events, on
    /// whichever node it reached.
    fn stream(&self, forward: Forward, after: Option<u64>) -> BoxFuture<'static, Response>;

    /// The kept events of run `run_id` after event `after`, in batches as
    /// they are kept, numbered as [`stream`](Cluster::stream) numbers them;
    /// it ends after `run_stopped` (or when the events cannot be read). For
    /// those that read the events themselves (AG-UI), not as SSE.
    fn events(&self, run_id: String, after: u64) -> BoxStream<'static, Vec<FedEvent>>;

    /// The number of run `run_id`'s last kept event (0 for none).
    fn last_event(&self, run_id: String) -> BoxFuture<'static, Result<u64, ApiError>>;

    /// Places a new run (`forward` is its `POST /runs`): the answer of the
    /// node with the most room that started it, or `None` to start it here.
    fn place(&self, forward: Forward) -> BoxFuture<'static, Option<Response>>;
}

/// A run or call id as one path segment: every byte but the unreserved
/// ones percent-encoded (a client's id, a model's call id, may hold `/` or
/// `?`, and must not make the request another route's).
pub(crate) fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_id_is_one_path_segment() {
        assert_eq!(segment("call_1.a-b~"), "call_1.a-b~");
        assert_eq!(segment("a/b?c d"), "a%2Fb%3Fc%20d");
    }
}
