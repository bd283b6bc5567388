//! The holder's side of `inbox`: applying, one at a time and in the order
//! they came, the routed requests of the runs this node holds, and starting
//! the new runs placed on it.

use std::sync::Arc;
use std::time::Duration;

use agentry::store::{Database, StoreError};
use agentry_serve::{App, Forward};
use tokio::sync::mpsc;

use super::channels::{ANSWER_CHANNEL, TARGET_PREFIX, Wake};
use super::node::{Node, blocking, now_ms};

/// How often the holder looks for rows whose notification it missed.
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Answered rows are kept this long (for a look at what went where), then removed.
const KEEP_ANSWERED_MS: i64 = 10 * 60 * 1000;

/// Applies the rows of the runs this node holds.
pub(super) struct Applier {
    pub(super) node: Arc<Node>,
    pub(super) app: App,
    pub(super) db: Arc<Database>,
}

/// A row taken to apply.
struct Taken {
    id: i64,
    forward: Forward,
}

impl Applier {
    pub(super) async fn run(self, mut woken: mpsc::UnboundedReceiver<Wake>) {
        let mut sweep = tokio::time::interval(SWEEP_EVERY);
        let mut swept = 0u64;
        loop {
            let wake = tokio::select! {
                wake = woken.recv() => match wake {
                    Some(wake) => wake,
                    None => return,
                },
                _ = sweep.tick() => Wake::All,
            };
            let mine = format!("{TARGET_PREFIX}{}", self.node.id);
            let runs = match wake {
                Wake::Run(target) if target == mine => {
                    self.apply_placed().await;
                    continue;
                }
                // New runs placed on another node.
                Wake::Run(target) if target.starts_with(TARGET_PREFIX) => continue,
                Wake::Run(run_id) => vec![run_id],
                Wake::All => {
                    swept += 1;
                    if swept.is_multiple_of(60) {
                        self.forget_answered().await;
                    }
                    self.apply_placed().await;
                    self.waiting_runs().await
                }
            };
            for run_id in runs.into_iter().filter(|id| self.app.holds(id)) {
                self.apply_all(&run_id).await;
            }
        }
    }

    async fn waiting_runs(&self) -> Vec<String> {
        blocking(&self.db, |tx| {
            tx.query(
                "SELECT DISTINCT run_id FROM agentry.cluster_inbox
                 WHERE status IS NULL AND target_node IS NULL",
                &[],
            )
            .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        })
        .await
        .unwrap_or_default()
    }

    async fn forget_answered(&self) {
        let before = now_ms() - KEEP_ANSWERED_MS;
        let _ = blocking(&self.db, move |tx| {
            tx.execute(
                "DELETE FROM agentry.cluster_inbox WHERE status IS NOT NULL AND answered_ms < $1",
                &[&before],
            )
            .map(|_| ())
        })
        .await;
    }

    /// Applies run `run_id`'s waiting rows in order, until none is left or
    /// the oldest is another live node's to apply.
    async fn apply_all(&self, run_id: &str) {
        loop {
            let taken = match self.take(run_id).await {
                Ok(Some(taken)) => taken,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(run_id, error = %e, "cannot take the run's routed requests");
                    return;
                }
            };
            if let Err(e) = self.apply(taken).await {
                tracing::warn!(run_id, error = %e, "a routed request's answer was not written");
                return;
            }
        }
    }

    /// Starts the new runs placed on this node, oldest first.
    async fn apply_placed(&self) {
        loop {
            let me = self.node.id.clone();
            let taken = blocking(&self.db, move |tx| {
                let Some(row) = tx.query_opt(
                    "UPDATE agentry.cluster_inbox SET taken_by = $1
                     WHERE id = (SELECT id FROM agentry.cluster_inbox
                                 WHERE target_node = $1 AND status IS NULL AND taken_by IS NULL
                                 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                     RETURNING id, tenant, method, path, body",
                    &[&me],
                )?
                else {
                    return Ok(None);
                };
                Ok(Some(Taken {
                    id: row.get(0),
                    forward: Forward {
                        run_id: String::new(),
                        tenant: row.get(1),
                        method: row.get(2),
                        path: row.get(3),
                        body: row.get(4),
                    },
                }))
            })
            .await;
            let taken = match taken {
                Ok(Some(taken)) => taken,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot take the runs placed on this node");
                    return;
                }
            };
            if let Err(e) = self.apply(taken).await {
                tracing::warn!(error = %e, "a placed run's answer was not written");
                return;
            }
        }
    }

    /// Applies a taken row through this node's routes and writes its answer.
    async fn apply(&self, taken: Taken) -> Result<(), StoreError> {
        let answer = self.app.apply_forwarded(taken.forward).await;
        let id = taken.id;
        blocking(&self.db, move |tx| {
            tx.execute(
                "UPDATE agentry.cluster_inbox SET status = $2, answer = $3, answered_ms = $4
                 WHERE id = $1",
                &[&id, &i32::from(answer.status), &answer.body, &now_ms()],
            )?;
            tx.execute(
                "SELECT pg_notify($1, $2)",
                &[&ANSWER_CHANNEL, &id.to_string()],
            )
            .map(|_| ())
        })
        .await
    }

    /// The run's oldest waiting row, marked as this node's, unless it is
    /// another live node's.
    async fn take(&self, run_id: &str) -> Result<Option<Taken>, StoreError> {
        let (run, me) = (run_id.to_string(), self.node.id.clone());
        let fresh = now_ms() - self.node.lease_ms();
        blocking(&self.db, move |tx| {
            let Some(row) = tx.query_opt(
                "SELECT i.id, i.tenant, i.method, i.path, i.body,
                        i.taken_by IS NULL OR i.taken_by = $2 OR n.node_id IS NULL
                 FROM agentry.cluster_inbox i
                 LEFT JOIN agentry.cluster_nodes n
                        ON n.node_id = i.taken_by AND n.heartbeat_ms >= $3
                 WHERE i.run_id = $1 AND i.status IS NULL AND i.target_node IS NULL
                 ORDER BY i.id LIMIT 1 FOR UPDATE OF i",
                &[&run, &me, &fresh],
            )?
            else {
                return Ok(None);
            };
            if !row.get::<_, bool>(5) {
                return Ok(None);
            }
            let id: i64 = row.get(0);
            tx.execute(
                "UPDATE agentry.cluster_inbox SET taken_by = $2 WHERE id = $1",
                &[&id, &me],
            )?;
            Ok(Some(Taken {
                id,
                forward: Forward {
                    run_id: run.clone(),
                    tenant: row.get(1),
                    method: row.get(2),
                    path: row.get(3),
                    body: row.get(4),
                },
            }))
        })
        .await
    }
}
