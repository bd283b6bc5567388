//! A queue shared by several services (a Postgres store's database,
//! `queue_pg.rs`): this service keeps its hold on the runs it queued,
//! queues those a gone service left, starts a queued run only while it
//! still holds it, and reads its tenants' spend of the day as every
//! service's runs add it up. With the store's SQLite file, none of this
//! does anything.

use std::sync::Arc;
use std::time::SystemTime;

use super::admit::keep;
use super::limits::UtcDay;
use super::queue_place::Queue;
use super::table::App;
use super::tenants::Tenant;

impl App {
    /// Every [`RENEW_EVERY`](super::queue_pg::RENEW_EVERY): renews this
    /// service's hold on its queued runs, and queues (behind its own) those
    /// no live service holds. Until the process ends, or it drains (then
    /// its runs pass to the others when its hold lapses).
    #[cfg(feature = "postgres")]
    pub(super) async fn hold_queue(self, table: Arc<Queue>) {
        loop {
            tokio::time::sleep(super::queue_pg::RENEW_EVERY).await;
            if self.ops.draining() {
                return;
            }
            let taken = keep(Some(Arc::clone(&table)), |queue| {
                queue.renew()?;
                queue.queued()
            })
            .await;
            match taken {
                Ok(rows) => {
                    let mut queued = 0;
                    for row in rows {
                        queued += usize::from(self.restore_one(row).await);
                    }
                    if queued > 0 {
                        tracing::info!(
                            queued,
                            "runs queued by a service that is gone are queued here"
                        );
                        self.dispatch();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the queue's hold is not renewed"),
            }
        }
    }

    /// Without a shared queue there is nothing to hold.
    #[cfg(not(feature = "postgres"))]
    pub(super) async fn hold_queue(self, table: Arc<Queue>) {
        drop(table);
    }

    /// Whether this service may start queued `run_id`: it still holds it
    /// (always, unless a shared queue gave it to another service).
    pub(super) async fn still_held(&self, run_id: &str) -> bool {
        let Some(table) = self.admission.table() else {
            return true;
        };
        let id = run_id.to_string();
        match keep(Some(table), move |queue| queue.still_held(&id)).await {
            Ok(held) => {
                if !held {
                    tracing::warn!(
                        run_id,
                        "a queued run passed to another service; not started here"
                    );
                }
                held
            }
            Err(e) => {
                tracing::warn!(run_id, error = %e, "whether a queued run is still held is unknown; it starts");
                true
            }
        }
    }

    /// With a shared queue: `tenant`'s spend of today as the database
    /// sums every service's runs (kept when higher than this service's count).
    pub(super) async fn refresh_spend(&self, tenant: &Tenant) {
        let Some(table) = self.admission.table().filter(|t| t.shared()) else {
            return;
        };
        let Some(name) = tenant
            .name()
            .filter(|_| self.admission.slots().counts_cost(tenant))
        else {
            return;
        };
        let now = SystemTime::now();
        let day = UtcDay::of(now);
        let owned = name.to_string();
        match keep(Some(table), move |queue| queue.spend_of_tenant(&owned, day)).await {
            Ok(micros) => self.admission.slots().restore_spend(name, day, micros, now),
            Err(e) => tracing::warn!(error = %e, "a tenant's spend of the day is not read"),
        }
    }
}
