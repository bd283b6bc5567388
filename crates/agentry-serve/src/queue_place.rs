//! The queue's tables where [`QueuePlace`] says: the store's SQLite file
//! (`queue.rs`) or a Postgres store's database (`queue_pg.rs`).

use super::error::ServeError;
use super::limits::{QueuePlace, SlotLimits, UtcDay};
use super::queue::{QueueTable, QueuedRow, RunSpend, SpendRow};

/// The queue's tables where [`QueuePlace`] says. Blocking: call it off the
/// async workers.
#[derive(Debug)]
pub(super) enum Queue {
    File(QueueTable),
    #[cfg(feature = "postgres")]
    Database(super::queue_pg::DatabaseQueue),
}

impl Queue {
    /// Opens (and if needed makes) the tables at `place`.
    pub(super) fn open(place: &QueuePlace) -> Result<Queue, ServeError> {
        match place {
            QueuePlace::File(path) => QueueTable::open(path).map(Queue::File),
            #[cfg(feature = "postgres")]
            QueuePlace::Database(database) => {
                super::queue_pg::DatabaseQueue::open(std::sync::Arc::clone(database))
                    .map(Queue::Database)
            }
        }
    }

    /// Whether other services share the tables (their queued runs and
    /// spend are in it too).
    pub(super) fn shared(&self) -> bool {
        match self {
            Queue::File(_) => false,
            #[cfg(feature = "postgres")]
            Queue::Database(_) => true,
        }
    }

    /// Keeps a queued request (committed when this returns).
    pub(super) fn push(&self, row: &QueuedRow) -> Result<(), ServeError> {
        match self {
            Queue::File(table) => table.push(row),
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.push(row),
        }
    }

    /// Forgets a queued request (started, or aborted before it started).
    pub(super) fn remove(&self, run_id: &str) -> Result<(), ServeError> {
        match self {
            Queue::File(table) => table.remove(run_id),
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.remove(run_id),
        }
    }

    /// The queued requests this service is to hold, in the order they
    /// came: all of them in a file; in a database, those no live service
    /// holds (taken for this one).
    pub(super) fn queued(&self) -> Result<Vec<QueuedRow>, ServeError> {
        match self {
            Queue::File(table) => table.queued(),
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.take_orphans(),
        }
    }

    /// Whether this service still holds queued `run_id` (about to start
    /// it): always in a file; in a database, unless another service took it
    /// (this one was presumed gone).
    pub(super) fn still_held(&self, run_id: &str) -> Result<bool, ServeError> {
        match self {
            Queue::File(_) => {
                let _ = run_id;
                Ok(true)
            }
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.still_held(run_id),
        }
    }

    /// Renews this service's hold on its queued requests (a database's
    /// lease; nothing for a file).
    #[cfg(feature = "postgres")]
    pub(super) fn renew(&self) -> Result<(), ServeError> {
        match self {
            Queue::File(_) => Ok(()),
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.renew(),
        }
    }

    /// Lets go of this service's queued runs at once (it drains).
    #[cfg(feature = "postgres")]
    pub(super) fn let_go(&self) -> Result<(), ServeError> {
        match self {
            Queue::File(_) => Ok(()),
            Queue::Database(db) => db.let_go(),
        }
    }

    /// Takes a slot shared with other services for `run_id`, within
    /// `limits`; whether it did (a file's queue is this service's alone:
    /// its own bookkeeping decided already).
    pub(super) fn take_slot(
        &self,
        run_id: &str,
        tenant: Option<&str>,
        limits: SlotLimits,
    ) -> Result<bool, ServeError> {
        match self {
            Queue::File(_) => {
                let _ = (run_id, tenant, limits);
                Ok(true)
            }
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.take_slot(run_id, tenant, limits),
        }
    }

    /// `run_id` holds a shared slot whatever the limits (resumed, adopted).
    pub(super) fn hold_slot(&self, run_id: &str, tenant: Option<&str>) -> Result<(), ServeError> {
        match self {
            Queue::File(_) => {
                let _ = (run_id, tenant);
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.hold_slot(run_id, tenant),
        }
    }

    /// Frees `run_id`'s shared slot.
    pub(super) fn release_slot(&self, run_id: &str) -> Result<(), ServeError> {
        match self {
            Queue::File(_) => {
                let _ = run_id;
                Ok(())
            }
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.release_slot(run_id),
        }
    }

    /// Keeps what a run spent: `row` is its tenant's day as this service
    /// counts it (a file keeps that), `run` the run's part (a database keeps
    /// that, and sums).
    pub(super) fn keep_spend(&self, row: &SpendRow, run: &RunSpend) -> Result<(), ServeError> {
        match self {
            Queue::File(table) => {
                let _ = run;
                table.set_spend(row)
            }
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.keep_spend(row, run),
        }
    }

    /// Every tenant's spend of `day`.
    pub(super) fn spend_of(&self, day: UtcDay) -> Result<Vec<SpendRow>, ServeError> {
        match self {
            Queue::File(table) => table.spend_of(day),
            #[cfg(feature = "postgres")]
            Queue::Database(db) => db.spend_of(day, None),
        }
    }

    /// `tenant`'s spend of `day` as the tables have it.
    pub(super) fn spend_of_tenant(&self, tenant: &str, day: UtcDay) -> Result<u64, ServeError> {
        match self {
            Queue::File(table) => Ok(table
                .spend_of(day)?
                .into_iter()
                .find(|row| row.tenant == tenant)
                .map_or(0, |row| row.micros)),
            #[cfg(feature = "postgres")]
            Queue::Database(db) => Ok(db
                .spend_of(day, Some(tenant))?
                .first()
                .map_or(0, |row| row.micros)),
        }
    }
}
