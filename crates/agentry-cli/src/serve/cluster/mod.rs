//! `agentry serve` on a Postgres store: one node of a cluster. Every node
//! runs its runs in lease mode, registers itself (`agentry.cluster_nodes`:
//! its id, the owner key its runs' owner rows carry, the address it
//! serves, a heartbeat), and
//!
//! - takes over the runs of nodes that are gone (`takeover`): a run whose
//!   owner is no live node and whose lease expired is resumed here by
//!   `agentry resume`'s rules, if this node can reach its working directory;
//!   a node that cannot says so in `agentry.cluster_notes` and leaves it;
//! - answers for runs other nodes hold (`inbox`): a request for one goes
//!   through `agentry.cluster_inbox`, `NOTIFY` wakes the node holding the
//!   run, which applies the requests of each run one at a time in the order
//!   they came and writes back the answer the request then gets;
//! - places new runs (`place`): a `POST /runs` goes to the live node with
//!   the fewest unfinished runs, when it holds two fewer than this one;
//! - keeps every run's events where every node reads them (`events`), so an
//!   event stream is served by whichever node a client reaches.

mod applier;
mod channels;
mod events;
mod inbox;
mod node;
mod place;
mod takeover;

pub(crate) use node::Node;
use node::node_id;

use std::sync::Arc;
use std::time::Duration;

use agentry::store::{Database, StoreError};
use agentry_serve::{ApiError, App, Cluster, EventFeed, FedEvent, Forward};
use axum::http::StatusCode;
use axum::response::Response;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::resume::Resumer;

/// The lease of a node's runs when `--lease` does not say: a node that stops
/// beating for this long is taken over.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The cluster's tables, beside the store's (made once, under its lock).
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS agentry.cluster_nodes (
    node_id      TEXT PRIMARY KEY,
    owner_key    TEXT NOT NULL,
    addr         TEXT NOT NULL,
    started_ms   BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL,
    load         BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS cluster_nodes_by_owner ON agentry.cluster_nodes (owner_key);
CREATE TABLE IF NOT EXISTS agentry.cluster_inbox (
    id          BIGSERIAL PRIMARY KEY,
    run_id      TEXT NOT NULL,
    tenant      TEXT,
    method      TEXT NOT NULL,
    path        TEXT NOT NULL,
    body        BYTEA NOT NULL,
    from_node   TEXT NOT NULL,
    created_ms  BIGINT NOT NULL,
    taken_by    TEXT,
    target_node TEXT,
    status      INTEGER,
    answer      BYTEA,
    answered_ms BIGINT
);
CREATE INDEX IF NOT EXISTS cluster_inbox_waiting ON agentry.cluster_inbox (run_id, id)
    WHERE status IS NULL;
-- Columns a node of an earlier build made its tables without.
ALTER TABLE agentry.cluster_nodes ADD COLUMN IF NOT EXISTS load BIGINT NOT NULL DEFAULT 0;
ALTER TABLE agentry.cluster_inbox ADD COLUMN IF NOT EXISTS target_node TEXT;
CREATE INDEX IF NOT EXISTS cluster_inbox_placed ON agentry.cluster_inbox (target_node, id)
    WHERE status IS NULL AND target_node IS NOT NULL;
CREATE TABLE IF NOT EXISTS agentry.run_events (
    run_id  TEXT NOT NULL,
    seq     BIGINT NOT NULL,
    epoch   BIGINT NOT NULL,
    run_seq BIGINT NOT NULL,
    kind    TEXT NOT NULL,
    data    TEXT NOT NULL,
    at_ms   BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq),
    UNIQUE (run_id, epoch, run_seq)
);
CREATE TABLE IF NOT EXISTS agentry.cluster_notes (
    run_id  TEXT PRIMARY KEY,
    node_id TEXT NOT NULL,
    note    TEXT NOT NULL,
    at_ms   BIGINT NOT NULL
);
";

/// Joins the cluster on `url`'s database as a node serving at `addr`, with
/// runs leased for `lease`: registers the node, routes requests for other
/// nodes' runs, and starts taking over the runs of nodes that are gone.
pub(crate) async fn join(
    app: &App,
    url: &str,
    addr: String,
    lease: Duration,
    resumer: Resumer,
) -> Result<Arc<Node>, StoreError> {
    let connect = url.to_string();
    let db = tokio::task::spawn_blocking(move || {
        let db = Database::connect(&connect)?;
        db.ensure(TABLES)?;
        Ok::<_, StoreError>(Arc::new(db))
    })
    .await
    .map_err(|e| StoreError::Io {
        path: "the cluster's tables".into(),
        message: e.to_string(),
    })??;
    let node = Arc::new(Node {
        db,
        url: url.to_string(),
        id: node_id(),
        owner_key: agentry::runtime::owner::process_key(),
        addr,
        lease,
    });
    let beating = Arc::clone(&node);
    tokio::task::spawn_blocking(move || beating.beat(0))
        .await
        .map_err(|e| StoreError::Io {
            path: node.db.location().to_string(),
            message: e.to_string(),
        })??;
    let resumer = Arc::new(resumer);
    let (routing, routed, resuming) = (Arc::clone(&node), app.clone(), Arc::clone(&resumer));
    // Its connections block while they connect: off the async workers.
    let routes =
        tokio::task::spawn_blocking(move || inbox::Routes::start(routing, routed, resuming))
            .await
            .map_err(|e| StoreError::Io {
                path: node.db.location().to_string(),
                message: e.to_string(),
            })??;
    app.join_cluster(Arc::new(routes));
    tokio::spawn(keep_beating(Arc::clone(&node), app.clone()));
    tokio::spawn(takeover::keep_taking_over(
        Arc::clone(&node),
        app.clone(),
        resumer,
    ));
    eprintln!(
        "agentry: serve: node {} of the cluster on {} (lease {:?})",
        node.id,
        node.db.location(),
        lease
    );
    Ok(node)
}

/// Beats every third of the lease until the process ends; a beat that
/// fails (the server away) is tried again at the next.
async fn keep_beating(node: Arc<Node>, app: App) {
    let every = (node.lease / 3).max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(every).await;
        let beating = Arc::clone(&node);
        let load = app.unfinished_count();
        match tokio::task::spawn_blocking(move || beating.beat(load)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "the node's heartbeat failed"),
            Err(e) => tracing::warn!(error = %e, "the node's heartbeat failed"),
        }
    }
}

/// The `Cluster` an `App` of this node routes through.
impl Cluster for inbox::Routes {
    fn elsewhere(&self, forward: Forward) -> BoxFuture<'static, Response> {
        Box::pin(self.request().answer(forward))
    }

    fn keep_events(&self, run_id: String, feed: EventFeed) {
        self.events.keep(run_id, feed);
    }

    fn stream(&self, forward: Forward, after: Option<u64>) -> BoxFuture<'static, Response> {
        let events = Arc::clone(&self.events);
        Box::pin(async move { events.stream(forward, after).await })
    }

    fn events(&self, run_id: String, after: u64) -> BoxStream<'static, Vec<FedEvent>> {
        self.events.feed(run_id, after)
    }

    fn last_event(&self, run_id: String) -> BoxFuture<'static, Result<u64, ApiError>> {
        let events = Arc::clone(&self.events);
        Box::pin(async move {
            events.last(run_id).await.map_err(|e| {
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("reading the run's kept events: {e}"),
                )
            })
        })
    }

    fn place(&self, forward: Forward) -> BoxFuture<'static, Option<Response>> {
        let request = self.request();
        Box::pin(async move { place::place(&request, forward, inbox::FORWARD_WAIT).await })
    }
}
