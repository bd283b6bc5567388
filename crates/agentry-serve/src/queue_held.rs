//! A queue shared by several services (a Postgres store's database,
//! `queue_pg.rs`): this service keeps its hold on the runs it queued,
//! queues those a gone service left, starts a queued run only while it
//! still holds it and the shared limits leave it a slot (looking again when
//! another service frees one), and reads its tenants' spend of the day as
//! every service's runs add it up. With the store's SQLite file, none of
//! this does anything.

use std::sync::Arc;
use std::time::SystemTime;

use super::admission::Request;
use super::admit::keep;
use super::limits::{Admit, UtcDay};
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
        self.wake_on_freed_slots(Arc::clone(&table)).await;
        // The runs resumed before the queue's table was open hold slots.
        for (run_id, tenant) in self.admission.slots().holding() {
            self.hold_shared_slot(&run_id, &tenant);
        }
        loop {
            tokio::time::sleep(super::queue_pg::RENEW_EVERY).await;
            if self.ops.draining() {
                // The next service to look takes what waits here.
                if let Err(e) = keep(Some(table), |queue| queue.let_go()).await {
                    tracing::warn!(error = %e, "the queue's hold is not given up; it lapses");
                }
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
                    }
                    // A slot may have freed elsewhere unannounced (a
                    // service gone, its slots lapsed).
                    if self.admission.slots().queued_len() > 0 {
                        self.dispatch();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the queue's hold is not renewed"),
            }
        }
    }

    /// Dispatches whenever another service frees a slot.
    #[cfg(feature = "postgres")]
    async fn wake_on_freed_slots(&self, table: Arc<Queue>) {
        let freed = Arc::new(tokio::sync::Notify::new());
        let wake = Arc::clone(&freed);
        // Listening connects with the blocking client: off the async workers.
        let listening = tokio::task::spawn_blocking(move || match &*table {
            Queue::Database(database) => Some(database.on_freed_slot(move || wake.notify_one())),
            Queue::File(_) => None,
        })
        .await;
        let listener = match listening {
            Ok(Some(Ok(listener))) => listener,
            Ok(None) => return,
            Ok(Some(Err(e))) => {
                tracing::warn!(error = %e, "freed slots are not listened for; the queue is looked at every few seconds");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "freed slots are not listened for; the queue is looked at every few seconds");
                return;
            }
        };
        let app = self.clone();
        tokio::spawn(async move {
            while !app.ops.draining() {
                freed.notified().await;
                app.dispatch();
            }
            // Its thread is joined: off the async workers.
            tokio::task::spawn_blocking(move || drop(listener));
        });
    }

    /// Takes a slot shared with the other services for `run_id`: whether
    /// the shared limits left one (always, without a shared queue).
    pub(super) async fn take_shared_slot(&self, run_id: &str, tenant: &Tenant) -> bool {
        let Some(table) = self.admission.table().filter(|t| t.shared()) else {
            return true;
        };
        let limits = self.admission.slots().slot_limits(tenant);
        let (id, name) = (run_id.to_string(), tenant.name().map(str::to_string));
        match keep(Some(table), move |q| {
            q.take_slot(&id, name.as_deref(), limits)
        })
        .await
        {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(run_id, error = %e, "no shared slot could be taken; the run waits");
                false
            }
        }
    }

    /// `run_id` holds a shared slot whatever the limits (resumed, adopted).
    pub(super) fn hold_shared_slot(&self, run_id: &str, tenant: &Tenant) {
        let Some(table) = self.admission.table().filter(|t| t.shared()) else {
            return;
        };
        let (id, name) = (run_id.to_string(), tenant.name().map(str::to_string));
        tokio::spawn(async move {
            let held = keep(Some(table), move |q| q.hold_slot(&id, name.as_deref())).await;
            if let Err(e) = held {
                tracing::warn!(error = %e, "a run's shared slot is not kept");
            }
        });
    }

    /// Frees `run_id`'s shared slot (the others hear of it).
    pub(super) fn release_shared_slot(&self, run_id: &str) {
        let Some(table) = self.admission.table().filter(|t| t.shared()) else {
            return;
        };
        let id = run_id.to_string();
        tokio::spawn(async move {
            if let Err(e) = keep(Some(table), move |q| q.release_slot(&id)).await {
                tracing::warn!(error = %e, "a shared slot is not freed; it lapses");
            }
        });
    }

    /// A run this service had room for, but the services sharing its queue
    /// have not: it queues here (or the queue is full).
    pub(super) fn queue_instead(
        &self,
        run_id: &str,
        tenant: &Tenant,
        request: Request,
    ) -> Admit<Request> {
        let mut slots = self.admission.slots();
        slots.release(run_id);
        if slots.queued_len() >= slots.limits().max_queued {
            return Admit::Full(request);
        }
        let meta = request.meta.clone();
        let admitted = slots.enqueue(run_id, tenant, request);
        self.enter_queued(run_id, meta);
        admitted
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
