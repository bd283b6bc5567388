//! Placing new runs: a `POST /runs` goes to the live node that holds the
//! fewest unfinished runs, when that is at least two fewer than this node
//! holds (a closer call is not worth the hop); there it is started through
//! that node's own routes (its limits, its queue) and its answer comes back.
//! A node that does not take the request within the forwarding wait (it
//! died) gets it taken back, and the run starts here.

use std::time::Duration;

use agentry::store::StoreError;
use agentry_serve::Forward;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::inbox::{Request, Sent};
use super::node::{Node, blocking, now_ms};

/// How much lighter another node must be for a new run to go there.
const MARGIN: i64 = 2;

/// Where `forward` (a `POST /runs`) runs: another node's answer, or `None`
/// to start it here.
pub(super) async fn place(request: &Request, forward: Forward, wait: Duration) -> Option<Response> {
    let load = i64::try_from(request.app.unfinished_count()).unwrap_or(i64::MAX);
    let target = match lighter_node(&request.node, load).await {
        Ok(Some(target)) => target,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "cannot compare the nodes' loads; the run starts here");
            return None;
        }
    };
    match request.forward(forward, wait, Some(target.clone())).await {
        Ok(Sent::Answered(answer)) => Some(answer.into_response()),
        Ok(Sent::Withdrawn) => None,
        Ok(Sent::Waiting) => Some(
            agentry_serve::ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                format!("node {target} took the new run and has not answered; it may have started it (GET /runs lists it if so)"),
            )
            .into_response(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot place the run on another node; it starts here");
            None
        }
    }
}

/// The live node with the fewest unfinished runs, if it holds at least
/// [`MARGIN`] fewer than `load`; its count is raised by one at once, so a
/// burst of new runs spreads before the nodes' next heartbeats.
async fn lighter_node(node: &Node, load: i64) -> Result<Option<String>, StoreError> {
    let me = node.id.clone();
    let fresh = now_ms() - node.lease_ms();
    blocking(&node.db, move |tx| {
        let row = tx.query_opt(
            "UPDATE agentry.cluster_nodes SET load = load + 1
             WHERE node_id = (SELECT node_id FROM agentry.cluster_nodes
                              WHERE node_id <> $1 AND heartbeat_ms >= $2 AND load + $3 <= $4
                              ORDER BY load, node_id LIMIT 1 FOR UPDATE SKIP LOCKED)
             RETURNING node_id",
            &[&me, &fresh, &MARGIN, &load],
        )?;
        Ok(row.map(|row| row.get(0)))
    })
    .await
}
