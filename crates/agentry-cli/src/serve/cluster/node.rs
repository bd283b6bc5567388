//! Who a node is, and the small helpers every part of the cluster uses.

use std::sync::Arc;
use std::time::Duration;

use agentry::store::{Database, StoreError};

/// Who this node is.
pub(crate) struct Node {
    pub(super) db: Arc<Database>,
    /// The database's URL (with its password: never shown).
    pub(super) url: String,
    /// Unique per process: host, pid and a random suffix.
    pub(super) id: String,
    /// What this process's runs' owner rows name (`owner::process_key`).
    pub(super) owner_key: String,
    /// Where clients reach this node (`http://ADDR`).
    pub(super) addr: String,
    pub(super) lease: Duration,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("id", &self.id)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Node {
    pub(super) fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }

    /// Beats once: this node is alive, where it serves, and how many
    /// unfinished runs it holds (`load`, what placing new runs compares).
    pub(super) fn beat(&self, load: usize) -> Result<(), StoreError> {
        let (id, key, addr) = (self.id.clone(), self.owner_key.clone(), self.addr.clone());
        let load = i64::try_from(load).unwrap_or(i64::MAX);
        self.db.transaction(move |tx| {
            let now = now_ms();
            tx.execute(
                "INSERT INTO agentry.cluster_nodes (node_id, owner_key, addr, started_ms, heartbeat_ms, load)
                 VALUES ($1, $2, $3, $4, $4, $5)
                 ON CONFLICT (node_id) DO UPDATE
                 SET heartbeat_ms = EXCLUDED.heartbeat_ms, load = EXCLUDED.load",
                &[&id, &key, &addr, &now, &load],
            )
            .map(|_| ())
        })
    }

    /// Leaves the cluster (a drained node): its runs are taken over as soon
    /// as their leases pass, not a node's lease later.
    pub(crate) fn leave(&self) {
        let id = self.id.clone();
        let _ = self.db.transaction(move |tx| {
            tx.execute(
                "DELETE FROM agentry.cluster_nodes WHERE node_id = $1",
                &[&id],
            )
            .map(|_| ())
        });
    }
}

pub(super) fn node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "node".into());
    // The start time tells apart two processes that had the same pid.
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{host}-{}-{started:x}", std::process::id())
}

pub(super) fn now_ms() -> i64 {
    i64::try_from(agentry::protocol::now_millis()).unwrap_or(i64::MAX)
}

/// Runs `op` in a transaction on `db`, off the async workers.
pub(super) async fn blocking<T: Send + 'static>(
    db: &Arc<Database>,
    op: impl FnMut(&mut agentry::store::pg::Transaction<'_>) -> Result<T, agentry::store::pg::Error>
    + Send
    + 'static,
) -> Result<T, StoreError> {
    let db = Arc::clone(db);
    tokio::task::spawn_blocking(move || db.transaction(op))
        .await
        .map_err(|e| StoreError::Io {
            path: "the cluster's tables".into(),
            message: e.to_string(),
        })?
}
