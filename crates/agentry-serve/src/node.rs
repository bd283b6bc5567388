//! The seam between a service and the nodes it shares its store with
//! (`cluster.rs` routes through it; `agentry serve` implements it on
//! Postgres): what a forwarded request is, what its answer is, and what a
//! cluster does for a node.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;

use super::events::EventFeed;

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

    /// Places a new run (`forward` is its `POST /runs`): the answer of the
    /// node with the most room that started it, or `None` to start it here.
    fn place(&self, forward: Forward) -> BoxFuture<'static, Option<Response>>;
}
