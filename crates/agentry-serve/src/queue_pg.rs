//! The queue and the day's spend in a Postgres store's database
//! (`agentry.serve_queue`, `agentry.serve_spend`), shared by every service
//! on it.
//!
//! A queued row is held by the service that queued it (its `node`, a random
//! id per process) under a lease it renews every [`RENEW_EVERY`]: a service
//! killed leaves its rows, and once their lease passes ([`LEASE`]) the next
//! service to look takes them (`FOR UPDATE SKIP LOCKED`: one taker each)
//! and queues them again. Before starting a queued run a service checks it
//! still holds the row, so a service presumed gone (paused past its lease)
//! does not start a run another took.
//!
//! Slots (`agentry.serve_slots`): with a shared queue, `[serve]
//! max_running` and a tenant's `max_running` hold for every service on the
//! database. A run takes a row (run id, tenant, the service holding it,
//! under the same lease) in a transaction that counts first under an
//! advisory lock; a stopped run's row goes and wakes the others (`NOTIFY`);
//! rows of a service that is gone lapse with its lease (a slot only once its
//! run is no longer unfinished in the store: a node takes that run over and
//! holds its slot again), and a run resumed elsewhere takes its row over.
//!
//! Spend is kept per run and day (the run's spend counted before the day's
//! first change, and all of it so far, each only ever widened), so writing
//! it twice changes nothing and every service's runs add up to the tenant's
//! day.

use std::sync::Arc;
use std::time::Duration;

use agentry::store::{Database, StoreError, pg};

use super::error::ServeError;
use super::limits::{SlotLimits, UtcDay};
use super::queue::{QueuedRow, RunSpend, SpendRow};

/// How long a service's hold on its queued rows lasts unless renewed.
pub(super) const LEASE: Duration = Duration::from_secs(10);

/// How often a service renews its hold and looks for rows no one holds.
pub(super) const RENEW_EVERY: Duration = Duration::from_secs(2);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS agentry.serve_queue (
    seq BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    tenant TEXT,
    traceparent TEXT,
    body BYTEA NOT NULL,
    node TEXT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS agentry.serve_slots (
    run_id TEXT PRIMARY KEY,
    tenant TEXT,
    node TEXT NOT NULL,
    lease_until TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS agentry.serve_spend (
    tenant TEXT NOT NULL,
    day BIGINT NOT NULL,
    run_id TEXT NOT NULL,
    from_micros BIGINT NOT NULL,
    to_micros BIGINT NOT NULL,
    PRIMARY KEY (tenant, day, run_id)
);
";

/// The channel a freed slot is announced on.
pub(super) const SLOTS_CHANNEL: &str = "agentry_serve_slots";

/// The advisory lock slots are counted and taken under ("agentryS").
const SLOTS_LOCK: i64 = 0x6167_656e_7472_7953;

/// The tables in one database, as one service (`node`) uses them.
#[derive(Debug)]
pub(super) struct DatabaseQueue {
    database: Arc<Database>,
    node: String,
}

impl DatabaseQueue {
    pub(super) fn open(database: Arc<Database>) -> Result<DatabaseQueue, ServeError> {
        let queue = DatabaseQueue {
            node: uuid::Uuid::now_v7().to_string(),
            database,
        };
        queue.database.ensure(SCHEMA).map_err(|e| queue.failed(e))?;
        Ok(queue)
    }

    fn failed(&self, e: StoreError) -> ServeError {
        ServeError::Queue {
            path: self.database.location().into(),
            message: e.to_string(),
        }
    }

    /// One transaction (run again whole after a lost connection: every
    /// statement here may run twice).
    fn with<T: Send + 'static>(
        &self,
        op: impl FnMut(&mut pg::Transaction<'_>) -> Result<T, pg::Error> + Send + 'static,
    ) -> Result<T, ServeError> {
        self.database.transaction(op).map_err(|e| self.failed(e))
    }

    pub(super) fn push(&self, row: &QueuedRow) -> Result<(), ServeError> {
        let (row, node, lease) = (row.clone(), self.node.clone(), LEASE.as_secs_f64());
        self.with(move |tx| {
            tx.execute(
                "INSERT INTO agentry.serve_queue
                     (run_id, tenant, traceparent, body, node, lease_until)
                 VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))
                 ON CONFLICT (run_id) DO NOTHING",
                &[
                    &row.run_id,
                    &row.tenant,
                    &row.traceparent,
                    &row.body,
                    &node,
                    &lease,
                ],
            )
            .map(|_| ())
        })
    }

    pub(super) fn remove(&self, run_id: &str) -> Result<(), ServeError> {
        let run_id = run_id.to_string();
        self.with(move |tx| {
            tx.execute(
                "DELETE FROM agentry.serve_queue WHERE run_id = $1",
                &[&run_id],
            )
            .map(|_| ())
        })
    }

    /// Takes, for this service, every queued row whose lease has passed
    /// (its service is gone), in the order they came.
    pub(super) fn take_orphans(&self) -> Result<Vec<QueuedRow>, ServeError> {
        let (node, lease) = (self.node.clone(), LEASE.as_secs_f64());
        self.with(move |tx| {
            let rows = tx.query(
                "UPDATE agentry.serve_queue AS q
                 SET node = $1, lease_until = now() + make_interval(secs => $2)
                 FROM (SELECT seq FROM agentry.serve_queue
                       WHERE lease_until < now() AND node <> $1
                       ORDER BY seq FOR UPDATE SKIP LOCKED) AS orphan
                 WHERE q.seq = orphan.seq
                 RETURNING q.seq, q.run_id, q.tenant, q.traceparent, q.body",
                &[&node, &lease],
            )?;
            let mut taken: Vec<(i64, QueuedRow)> = rows
                .iter()
                .map(|row| {
                    let queued = QueuedRow {
                        run_id: row.get(1),
                        tenant: row.get(2),
                        traceparent: row.get(3),
                        body: row.get(4),
                    };
                    (row.get::<_, i64>(0), queued)
                })
                .collect();
            taken.sort_by_key(|(seq, _)| *seq);
            Ok(taken.into_iter().map(|(_, row)| row).collect())
        })
    }

    /// Renews this service's lease on its rows (queued runs and slots).
    pub(super) fn renew(&self) -> Result<(), ServeError> {
        let (node, lease) = (self.node.clone(), LEASE.as_secs_f64());
        self.with(move |tx| {
            for table in ["agentry.serve_queue", "agentry.serve_slots"] {
                tx.execute(
                    &format!(
                        "UPDATE {table}
                         SET lease_until = now() + make_interval(secs => $2) WHERE node = $1"
                    ),
                    &[&node, &lease],
                )?;
            }
            Ok(())
        })
    }

    /// Gives up this service's hold on its queued runs at once (it drains):
    /// the next service to look takes them.
    pub(super) fn let_go(&self) -> Result<(), ServeError> {
        let node = self.node.clone();
        self.with(move |tx| {
            tx.execute(
                "UPDATE agentry.serve_queue SET lease_until = now() - interval '1 second'
                 WHERE node = $1",
                &[&node],
            )
            .map(|_| ())
        })
    }

    /// Takes a slot for `run_id` of `tenant` if the shared limits leave one
    /// (slots whose lease lapsed are freed first); whether it did. A slot
    /// `run_id` holds already is kept.
    pub(super) fn take_slot(
        &self,
        run_id: &str,
        tenant: Option<&str>,
        limits: SlotLimits,
    ) -> Result<bool, ServeError> {
        let (run_id, tenant) = (run_id.to_string(), tenant.map(str::to_string));
        let (node, lease) = (self.node.clone(), LEASE.as_secs_f64());
        self.with(move |tx| {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SLOTS_LOCK])?;
            // A lapsed slot whose run is still unfinished in the store is
            // kept: a node takes that run over and holds the slot again, so
            // a queued run must not start in its place meanwhile.
            tx.execute(
                "DELETE FROM agentry.serve_slots s WHERE s.lease_until < now()
                 AND NOT EXISTS (SELECT 1 FROM agentry.runs r
                                 WHERE r.run_id = s.run_id AND r.status <> 'stopped')",
                &[],
            )?;
            let held = tx.execute(
                "UPDATE agentry.serve_slots
                 SET node = $2, lease_until = now() + make_interval(secs => $3)
                 WHERE run_id = $1",
                &[&run_id, &node, &lease],
            )?;
            if held > 0 {
                return Ok(true);
            }
            let count = |tx: &mut pg::Transaction<'_>, of_tenant: bool| {
                tx.query_one(
                    "SELECT count(*) FROM agentry.serve_slots
                     WHERE NOT $1 OR tenant IS NOT DISTINCT FROM $2",
                    &[&of_tenant, &tenant],
                )
                .map(|row| row.get::<_, i64>(0).max(0) as usize)
            };
            if let Some(max) = limits.total
                && count(tx, false)? >= max
            {
                return Ok(false);
            }
            if let Some(max) = limits.tenant
                && count(tx, true)? >= max
            {
                return Ok(false);
            }
            tx.execute(
                "INSERT INTO agentry.serve_slots (run_id, tenant, node, lease_until)
                 VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
                &[&run_id, &tenant, &node, &lease],
            )?;
            Ok(true)
        })
    }

    /// `run_id` holds a slot whatever the limits (a run resumed or taken
    /// over was let in before).
    pub(super) fn hold_slot(&self, run_id: &str, tenant: Option<&str>) -> Result<(), ServeError> {
        let (run_id, tenant) = (run_id.to_string(), tenant.map(str::to_string));
        let (node, lease) = (self.node.clone(), LEASE.as_secs_f64());
        self.with(move |tx| {
            tx.execute(
                "INSERT INTO agentry.serve_slots (run_id, tenant, node, lease_until)
                 VALUES ($1, $2, $3, now() + make_interval(secs => $4))
                 ON CONFLICT (run_id) DO UPDATE SET node = EXCLUDED.node,
                     lease_until = EXCLUDED.lease_until",
                &[&run_id, &tenant, &node, &lease],
            )
            .map(|_| ())
        })
    }

    /// Frees `run_id`'s slot if this service holds it, and says so on
    /// [`SLOTS_CHANNEL`].
    pub(super) fn release_slot(&self, run_id: &str) -> Result<(), ServeError> {
        let (run_id, node) = (run_id.to_string(), self.node.clone());
        self.with(move |tx| {
            let freed = tx.execute(
                "DELETE FROM agentry.serve_slots WHERE run_id = $1 AND node = $2",
                &[&run_id, &node],
            )?;
            if freed > 0 {
                tx.execute("SELECT pg_notify($1, $2)", &[&SLOTS_CHANNEL, &run_id])?;
            }
            Ok(())
        })
    }

    /// Calls `on_freed` whenever a service frees a slot (and when the
    /// listening connection came back: one may have been freed meanwhile).
    pub(super) fn on_freed_slot(
        &self,
        on_freed: impl Fn() + Send + 'static,
    ) -> Result<agentry::store::Listener, ServeError> {
        self.database
            .listen(SLOTS_CHANNEL, move |_| on_freed())
            .map_err(|e| self.failed(e))
    }

    /// Whether this service holds `run_id`'s row (renewed if so). A row
    /// that is gone (removed by this service's abort) is not held.
    pub(super) fn still_held(&self, run_id: &str) -> Result<bool, ServeError> {
        let (run_id, node, lease) = (run_id.to_string(), self.node.clone(), LEASE.as_secs_f64());
        self.with(move |tx| {
            tx.execute(
                "UPDATE agentry.serve_queue
                 SET lease_until = now() + make_interval(secs => $3)
                 WHERE run_id = $1 AND node = $2",
                &[&run_id, &node, &lease],
            )
            .map(|held| held > 0)
        })
    }

    /// Keeps `run`'s part of `row`'s tenant's day (see the module docs).
    pub(super) fn keep_spend(&self, row: &SpendRow, run: &RunSpend) -> Result<(), ServeError> {
        let (tenant, day) = (row.tenant.clone(), row.day.0 as i64);
        let (run_id, from, to) = (run.run_id.clone(), run.from as i64, run.to as i64);
        self.with(move |tx| {
            tx.execute(
                "INSERT INTO agentry.serve_spend (tenant, day, run_id, from_micros, to_micros)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (tenant, day, run_id) DO UPDATE SET
                     from_micros = LEAST(agentry.serve_spend.from_micros, EXCLUDED.from_micros),
                     to_micros = GREATEST(agentry.serve_spend.to_micros, EXCLUDED.to_micros)",
                &[&tenant, &day, &run_id, &from, &to],
            )
            .map(|_| ())
        })
    }

    /// Every tenant's spend of `day` (only `tenant`'s when given): the sum
    /// of its runs' parts.
    pub(super) fn spend_of(
        &self,
        day: UtcDay,
        tenant: Option<&str>,
    ) -> Result<Vec<SpendRow>, ServeError> {
        let (tenant, day_number) = (tenant.map(str::to_string), day.0 as i64);
        self.with(move |tx| {
            let rows = tx.query(
                "SELECT tenant, SUM(GREATEST(to_micros - from_micros, 0))::BIGINT
                 FROM agentry.serve_spend
                 WHERE day = $1 AND ($2::TEXT IS NULL OR tenant = $2)
                 GROUP BY tenant",
                &[&day_number, &tenant],
            )?;
            Ok(rows
                .iter()
                .map(|row| SpendRow {
                    tenant: row.get(0),
                    day,
                    micros: row.get::<_, i64>(1).max(0) as u64,
                })
                .collect())
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn queue(url: &str) -> DatabaseQueue {
        DatabaseQueue::open(Arc::new(Database::connect(url).unwrap())).unwrap()
    }

    fn row(id: &str) -> QueuedRow {
        QueuedRow {
            run_id: id.into(),
            tenant: Some("acme".into()),
            traceparent: None,
            body: id.as_bytes().to_vec(),
        }
    }

    /// Two services on one database: the rows one queued are not the
    /// other's while its hold lasts; once it lapses the other takes them in
    /// order, and the first no longer holds them.
    #[test]
    #[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
    fn queued_rows_pass_to_another_service_only_once_their_hold_lapses() {
        let url = agentry_test_postgres::PgServer::shared().database();
        let (a, b) = (queue(&url), queue(&url));
        for id in ["r1", "r2", "r3"] {
            a.push(&row(id)).unwrap();
        }
        a.push(&row("r1")).unwrap();
        a.remove("r2").unwrap();
        assert!(b.take_orphans().unwrap().is_empty(), "a holds them");
        a.renew().unwrap();
        assert!(a.still_held("r1").unwrap());
        // a stops renewing (killed): its hold lapses.
        a.database
            .transaction(|tx| {
                tx.execute(
                    "UPDATE agentry.serve_queue SET lease_until = now() - interval '1 second'",
                    &[],
                )
            })
            .unwrap();
        let taken: Vec<String> = b
            .take_orphans()
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(taken, ["r1", "r3"]);
        assert!(!a.still_held("r1").unwrap(), "b took it");
        assert!(b.still_held("r3").unwrap());
        assert!(a.take_orphans().unwrap().is_empty(), "b holds them now");
    }

    /// Slots shared by two services: the limits count both services'
    /// runs, a run's own slot is kept when asked again, a freed or lapsed
    /// slot goes to the next, and a resumed run holds one whatever the limits.
    #[test]
    #[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
    fn shared_slots_count_every_services_runs_within_the_limits() {
        let url = agentry_test_postgres::PgServer::shared().database();
        // The store's tables: a lapsed slot is kept while its run is
        // unfinished there (none of these runs is in it).
        drop(agentry::PostgresStore::connect(&url).unwrap());
        let (a, b) = (queue(&url), queue(&url));
        let limits = |tenant| SlotLimits {
            total: Some(2),
            tenant,
        };
        assert!(a.take_slot("r1", Some("acme"), limits(Some(1))).unwrap());
        assert!(
            !b.take_slot("r2", Some("acme"), limits(Some(1))).unwrap(),
            "acme's one slot is a's"
        );
        assert!(b.take_slot("r2", Some("globex"), limits(None)).unwrap());
        assert!(
            !b.take_slot("r3", None, limits(None)).unwrap(),
            "two runs hold the two slots"
        );
        assert!(a.take_slot("r1", Some("acme"), limits(Some(1))).unwrap());
        b.release_slot("r1").unwrap();
        assert!(!b.take_slot("r3", None, limits(None)).unwrap(), "r1 is a's");
        a.release_slot("r1").unwrap();
        assert!(b.take_slot("r3", None, limits(None)).unwrap());
        a.hold_slot("r4", None).unwrap();
        assert!(!a.take_slot("r5", None, limits(None)).unwrap());
        // b is gone: its slots lapse.
        b.database
            .transaction(|tx| {
                tx.execute(
                    "UPDATE agentry.serve_slots SET lease_until = now() - interval '1 second'
                     WHERE run_id IN ('r2', 'r3')",
                    &[],
                )
            })
            .unwrap();
        assert!(a.take_slot("r5", None, limits(None)).unwrap());
    }

    /// Each run's part of a tenant's day is kept once however often it is
    /// written, and the parts of every service's runs add up.
    #[test]
    #[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
    fn a_tenants_day_is_the_sum_of_its_runs_parts_each_written_idempotently() {
        let url = agentry_test_postgres::PgServer::shared().database();
        let (a, b) = (queue(&url), queue(&url));
        let day = UtcDay(20_000);
        let tenant = |micros| SpendRow {
            tenant: "acme".into(),
            day,
            micros,
        };
        let part = |run: &str, from, to| RunSpend {
            run_id: run.into(),
            from,
            to,
        };
        a.keep_spend(&tenant(100), &part("r1", 0, 100)).unwrap();
        a.keep_spend(&tenant(100), &part("r1", 0, 100)).unwrap();
        a.keep_spend(&tenant(250), &part("r1", 100, 250)).unwrap();
        // r2 resumed on b with 40 spent before: counted from there.
        b.keep_spend(&tenant(60), &part("r2", 40, 100)).unwrap();
        let spend = b.spend_of(day, None).unwrap();
        assert_eq!(spend, [tenant(250 + 60)]);
        assert_eq!(a.spend_of(day, Some("acme")).unwrap(), [tenant(310)]);
        assert!(a.spend_of(day, Some("globex")).unwrap().is_empty());
        assert!(a.spend_of(UtcDay(20_001), None).unwrap().is_empty());
    }
}
