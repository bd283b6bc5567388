//! Limits shared by every run of the service: how many runs hold a slot at
//! once (`[serve] max_running`, per tenant `[tenants.NAME] max_running`), the
//! FIFO queue behind them (`max_queued`), and what each tenant's runs may
//! spend per UTC day (`max_cost_per_day`). This file is the bookkeeping only,
//! under one lock and without I/O; `admit.rs` starts what it lets through and
//! `queue.rs` keeps the queue and the day's spend in the store's file.
//!
//! A run holds a slot from the moment it is let through until it stops,
//! whatever it does meanwhile (running a step, sleeping until its next
//! message, parked on an approval): each live run holds its actors, its
//! working directory and its tools' processes, which is what the limit
//! bounds. The queue is FIFO, except that an entry whose tenant is at its own
//! `max_running` is passed over (it keeps its place) so that one tenant's
//! backlog never holds back another tenant's runs.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::tenants::Tenant;

/// Runs waiting for a slot when `[serve] max_queued` is not set.
pub const DEFAULT_MAX_QUEUED: usize = 100;

/// What a 429 for a full queue asks a client to wait, in seconds: a queued
/// run waits for a running one to stop, which takes seconds to minutes.
pub(super) const QUEUE_FULL_RETRY_SECONDS: u64 = 10;

const DAY_SECONDS: u64 = 24 * 60 * 60;

/// How many runs hold a slot and wait for one, and what each tenant may
/// spend a day: `[serve] max_running`, `max_queued` and `[tenants.NAME]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLimits {
    /// Runs holding a slot at once; `None`: no limit (no run is queued
    /// unless its tenant is at its own limit).
    pub max_running: Option<usize>,
    /// Runs waiting for a slot; past it `POST /runs` is 429 with `Retry-After`.
    pub max_queued: usize,
    /// Each configured tenant's limits, by name.
    pub tenants: BTreeMap<String, TenantLimits>,
    /// Where queued requests and each tenant's spend of the day are kept
    /// (the store's SQLite file, or its Postgres database), so a restart
    /// loses neither; `None`: memory only.
    pub queue_file: Option<QueuePlace>,
}

/// Where the queue and the day's spend are kept: beside the store's tables.
#[derive(Debug, Clone)]
pub enum QueuePlace {
    /// The store's SQLite file: this service's alone.
    File(PathBuf),
    /// A Postgres store's database (feature `postgres`): shared by every
    /// service on it. A queued run is held by the service that queued it
    /// while that service lives (a lease it renews); a service that is gone
    /// leaves its queued runs to the others, and a tenant's spend of the day
    /// is the sum of every service's.
    #[cfg(feature = "postgres")]
    Database(std::sync::Arc<agentry::store::Database>),
}

impl PartialEq for QueuePlace {
    fn eq(&self, other: &QueuePlace) -> bool {
        match (self, other) {
            (QueuePlace::File(a), QueuePlace::File(b)) => a == b,
            #[cfg(feature = "postgres")]
            (QueuePlace::Database(a), QueuePlace::Database(b)) => std::sync::Arc::ptr_eq(a, b),
            #[cfg(feature = "postgres")]
            (QueuePlace::File(_), QueuePlace::Database(_))
            | (QueuePlace::Database(_), QueuePlace::File(_)) => false,
        }
    }
}

impl Eq for QueuePlace {}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_running: None,
            max_queued: DEFAULT_MAX_QUEUED,
            tenants: BTreeMap::new(),
            queue_file: None,
        }
    }
}

/// One tenant's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantLimits {
    /// The tenant's runs holding a slot at once.
    pub max_running: Option<usize>,
    /// Money (millionths) the tenant's runs may spend per UTC day.
    pub max_cost_per_day_micros: Option<u64>,
}

/// The limits a slot shared by several services is taken within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotLimits {
    /// `[serve] max_running`.
    pub(super) total: Option<usize>,
    /// The tenant's `max_running`.
    pub(super) tenant: Option<usize>,
}

/// A UTC day: days since 1970-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct UtcDay(pub(super) u64);

impl UtcDay {
    pub(super) fn of(now: SystemTime) -> UtcDay {
        UtcDay(seconds(now) / DAY_SECONDS)
    }

    /// Seconds from `now` to the next UTC midnight (at least 1).
    pub(super) fn seconds_left(now: SystemTime) -> u64 {
        (DAY_SECONDS - seconds(now) % DAY_SECONDS).max(1)
    }
}

fn seconds(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// A queued request's place: its run id and tenant (the request itself is
/// the caller's, `T`).
#[derive(Debug)]
pub(super) struct Waiting<T> {
    pub(super) run_id: String,
    pub(super) tenant: Tenant,
    pub(super) request: T,
}

/// What [`Slots::admit`] decided for a new run.
#[derive(Debug)]
pub(super) enum Admit<T> {
    /// A slot is held for it: start it now.
    Start(T),
    /// It waits, at this place in the queue (1 = next).
    Queued(usize),
    /// The queue is full: the request comes back.
    Full(T),
}

/// Which runs hold slots, which wait, and what each tenant spent today.
#[derive(Debug)]
pub(super) struct Slots<T> {
    limits: RunLimits,
    /// Run id → tenant, for every run holding a slot.
    running: HashMap<String, Tenant>,
    /// Ids given a slot by the service itself (not resumed or adopted), until
    /// their run is followed: their spend is counted from zero.
    fresh: HashSet<String>,
    queue: VecDeque<Waiting<T>>,
    /// Tenant → its spend on `day`.
    spend: HashMap<String, u64>,
    day: UtcDay,
    /// Run id → the spend of it already counted.
    counted: HashMap<String, u64>,
}

/// Counts for `/metrics` and the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) running: usize,
    pub(super) queued: usize,
    /// Configured tenants only: (running, queued, spent today).
    pub(super) tenants: BTreeMap<String, TenantCounts>,
}

/// One configured tenant's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct TenantCounts {
    pub(super) running: usize,
    pub(super) queued: usize,
    pub(super) spent_today_micros: u64,
}

impl<T> Slots<T> {
    pub(super) fn new(limits: RunLimits, now: SystemTime) -> Slots<T> {
        Slots {
            limits,
            running: HashMap::new(),
            fresh: HashSet::new(),
            queue: VecDeque::new(),
            spend: HashMap::new(),
            day: UtcDay::of(now),
            counted: HashMap::new(),
        }
    }

    pub(super) fn limits(&self) -> &RunLimits {
        &self.limits
    }

    fn tenant_limits(&self, tenant: &Tenant) -> TenantLimits {
        tenant
            .name()
            .and_then(|name| self.limits.tenants.get(name))
            .copied()
            .unwrap_or_default()
    }

    fn running_of(&self, tenant: &Tenant) -> usize {
        self.running.values().filter(|t| *t == tenant).count()
    }

    /// Whether a run of `tenant` may take a slot now.
    fn has_room(&self, tenant: &Tenant) -> bool {
        let total = self
            .limits
            .max_running
            .is_none_or(|max| self.running.len() < max);
        let own = self
            .tenant_limits(tenant)
            .max_running
            .is_none_or(|max| self.running_of(tenant) < max);
        total && own
    }

    /// A new run: a slot now, a place in the queue, or refused (full). It
    /// never passes a queued run that could start (a slot freed and the
    /// queue not yet dispatched): it queues behind it.
    pub(super) fn admit(&mut self, run_id: &str, tenant: &Tenant, request: T) -> Admit<T> {
        let queued_could_start = self.queue.iter().any(|w| self.has_room(&w.tenant));
        if self.has_room(tenant) && !queued_could_start {
            self.hold(run_id, tenant);
            self.fresh.insert(run_id.to_string());
            return Admit::Start(request);
        }
        if self.queue.len() >= self.limits.max_queued {
            return Admit::Full(request);
        }
        self.enqueue(run_id, tenant, request)
    }

    /// Puts a request at the end of the queue whatever its length (one
    /// restored after a restart was already accepted).
    pub(super) fn enqueue(&mut self, run_id: &str, tenant: &Tenant, request: T) -> Admit<T> {
        self.queue.push_back(Waiting {
            run_id: run_id.to_string(),
            tenant: tenant.clone(),
            request,
        });
        Admit::Queued(self.queue.len())
    }

    /// The first queued request that may start now, its slot held.
    pub(super) fn next(&mut self) -> Option<Waiting<T>> {
        let at = self.queue.iter().position(|w| self.has_room(&w.tenant))?;
        let waiting = self.queue.remove(at)?;
        self.hold(&waiting.run_id, &waiting.tenant);
        self.fresh.insert(waiting.run_id.clone());
        Some(waiting)
    }

    /// `run_id` holds a slot (a run resumed or adopted holds one whatever
    /// the limits: it was let in before).
    pub(super) fn hold(&mut self, run_id: &str, tenant: &Tenant) {
        self.running.insert(run_id.to_string(), tenant.clone());
    }

    /// Whether the service gave `run_id` its slot (its spend starts at 0);
    /// asked once, when the run is followed.
    pub(super) fn take_fresh(&mut self, run_id: &str) -> bool {
        self.fresh.remove(run_id)
    }

    /// The run stopped, or never started: its slot is free.
    pub(super) fn release(&mut self, run_id: &str) {
        self.running.remove(run_id);
        self.fresh.remove(run_id);
        self.counted.remove(run_id);
    }

    /// The limits a shared slot for a run of `tenant` is taken within.
    pub(super) fn slot_limits(&self, tenant: &Tenant) -> SlotLimits {
        SlotLimits {
            total: self.limits.max_running,
            tenant: self.tenant_limits(tenant).max_running,
        }
    }

    /// Puts back at the head of the queue a request [`Slots::next`] gave
    /// out that cannot start after all (the cluster has no slot): its slot
    /// is free again.
    pub(super) fn put_back(&mut self, waiting: Waiting<T>) {
        self.release(&waiting.run_id);
        self.queue.push_front(waiting);
    }

    /// The runs holding a slot, with their tenants.
    #[cfg(feature = "postgres")]
    pub(super) fn holding(&self) -> Vec<(String, Tenant)> {
        self.running
            .iter()
            .map(|(id, tenant)| (id.clone(), tenant.clone()))
            .collect()
    }

    /// How many requests wait.
    pub(super) fn queued_len(&self) -> usize {
        self.queue.len()
    }

    /// Takes a queued request out (an abort before it started).
    pub(super) fn cancel(&mut self, run_id: &str) -> Option<Waiting<T>> {
        let at = self.queue.iter().position(|w| w.run_id == run_id)?;
        self.queue.remove(at)
    }

    /// Where `run_id` waits (1 = next), if it does.
    pub(super) fn position(&self, run_id: &str) -> Option<usize> {
        self.queue
            .iter()
            .position(|w| w.run_id == run_id)
            .map(|at| at + 1)
    }

    /// What `tenant`'s runs spent today.
    pub(super) fn spent_today(&mut self, tenant: &Tenant, now: SystemTime) -> u64 {
        self.roll(now);
        tenant
            .name()
            .and_then(|name| self.spend.get(name))
            .copied()
            .unwrap_or(0)
    }

    /// A new day starts every tenant's spend at zero.
    fn roll(&mut self, now: SystemTime) {
        let today = UtcDay::of(now);
        if today != self.day {
            self.day = today;
            self.spend.clear();
        }
    }

    /// `tenant`'s quota and what is left of it today, if it has one.
    pub(super) fn cost_left(&mut self, tenant: &Tenant, now: SystemTime) -> Option<CostLeft> {
        let max = self.tenant_limits(tenant).max_cost_per_day_micros?;
        let spent = self.spent_today(tenant, now);
        Some(CostLeft {
            max,
            spent,
            left: max.saturating_sub(spent),
        })
    }

    /// Whether `tenant` has a daily cost quota (its runs' spend is followed).
    pub(super) fn counts_cost(&self, tenant: &Tenant) -> bool {
        self.tenant_limits(tenant).max_cost_per_day_micros.is_some()
    }

    /// Sets what `run_id`'s spend counted so far (a resumed run's spend
    /// before this process was counted by the one before).
    pub(super) fn baseline(&mut self, run_id: &str, micros: u64) {
        let counted = self.counted.entry(run_id.to_string()).or_insert(0);
        *counted = (*counted).max(micros);
    }

    /// What `run_id`'s spend counted so far.
    pub(super) fn counted(&self, run_id: &str) -> u64 {
        self.counted.get(run_id).copied().unwrap_or(0)
    }

    /// `run_id` (of `tenant`) has spent `total` in all: what is new is added
    /// to the tenant's day. Returns the tenant's new total for today when it
    /// changed (to be kept), else `None`.
    pub(super) fn spent(
        &mut self,
        run_id: &str,
        tenant: &Tenant,
        total: u64,
        now: SystemTime,
    ) -> Option<(UtcDay, u64)> {
        let name = tenant.name()?;
        let counted = self.counted.entry(run_id.to_string()).or_insert(0);
        let new = total.saturating_sub(*counted);
        *counted = (*counted).max(total);
        if new == 0 {
            return None;
        }
        self.roll(now);
        let day = self.spend.entry(name.to_string()).or_insert(0);
        *day = day.saturating_add(new);
        Some((self.day, *day))
    }

    /// A tenant's spend of `day` read back from the store (at start).
    pub(super) fn restore_spend(
        &mut self,
        tenant: &str,
        day: UtcDay,
        micros: u64,
        now: SystemTime,
    ) {
        self.roll(now);
        if day == self.day {
            let spent = self.spend.entry(tenant.to_string()).or_insert(0);
            *spent = (*spent).max(micros);
        }
    }

    /// Counts, with per-tenant figures for configured tenants only.
    pub(super) fn counts(&mut self, configured: &[String], now: SystemTime) -> Counts {
        self.roll(now);
        let mut tenants: BTreeMap<String, TenantCounts> = configured
            .iter()
            .map(|name| (name.clone(), TenantCounts::default()))
            .collect();
        for tenant in self.running.values() {
            if let Some(c) = tenant.name().and_then(|n| tenants.get_mut(n)) {
                c.running += 1;
            }
        }
        for waiting in &self.queue {
            if let Some(c) = waiting.tenant.name().and_then(|n| tenants.get_mut(n)) {
                c.queued += 1;
            }
        }
        for (name, c) in &mut tenants {
            c.spent_today_micros = self.spend.get(name).copied().unwrap_or(0);
        }
        Counts {
            running: self.running.len(),
            queued: self.queue.len(),
            tenants,
        }
    }
}

/// A tenant's daily quota against what its runs spent today.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CostLeft {
    pub(super) max: u64,
    pub(super) spent: u64,
    pub(super) left: u64,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn limits(max_running: usize, max_queued: usize) -> RunLimits {
        RunLimits {
            max_running: Some(max_running),
            max_queued,
            tenants: BTreeMap::from([(
                "a".to_string(),
                TenantLimits {
                    max_running: Some(1),
                    max_cost_per_day_micros: Some(1_000),
                },
            )]),
            queue_file: None,
        }
    }

    fn started<T>(admit: Admit<T>) -> bool {
        matches!(admit, Admit::Start(_))
    }

    #[test]
    fn past_max_running_runs_queue_in_order_and_past_max_queued_are_refused() {
        let now = SystemTime::now();
        let mut slots = Slots::new(limits(1, 2), now);
        let anyone = Tenant::anyone();
        assert!(started(slots.admit("r1", &anyone, 1)));
        assert!(matches!(slots.admit("r2", &anyone, 2), Admit::Queued(1)));
        assert!(matches!(slots.admit("r3", &anyone, 3), Admit::Queued(2)));
        assert!(matches!(slots.admit("r4", &anyone, 4), Admit::Full(4)));
        assert!(slots.next().is_none(), "no slot is free");
        slots.release("r1");
        // A slot is free but the queue not yet dispatched: a newcomer queues.
        assert!(matches!(slots.admit("r5", &anyone, 5), Admit::Full(5)));
        assert_eq!(slots.next().unwrap().request, 2);
        assert!(slots.next().is_none());
        slots.release("r2");
        assert_eq!(slots.next().unwrap().request, 3);
    }

    #[test]
    fn a_tenant_at_its_own_limit_queues_without_holding_back_others() {
        let now = SystemTime::now();
        let mut slots = Slots::new(limits(3, 10), now);
        let (a, b) = (Tenant::named("a"), Tenant::named("b"));
        assert!(started(slots.admit("a1", &a, "a1")));
        assert!(matches!(slots.admit("a2", &a, "a2"), Admit::Queued(1)));
        assert!(started(slots.admit("b1", &b, "b1")));
        assert!(started(slots.admit("b2", &b, "b2")));
        // Three hold slots now: b3 waits behind a2, and goes first when a
        // slot frees that a cannot take.
        assert!(matches!(slots.admit("b3", &b, "b3"), Admit::Queued(2)));
        slots.release("b1");
        assert_eq!(slots.next().unwrap().request, "b3");
        slots.release("a1");
        assert_eq!(slots.next().unwrap().request, "a2");
        let counts = slots.counts(&["a".to_string()], now);
        assert_eq!(counts.running, 3);
        assert_eq!(counts.tenants["a"].running, 1);
        assert!(!counts.tenants.contains_key("b"));
    }

    #[test]
    fn spend_counts_what_is_new_per_run_and_a_new_utc_day_starts_at_zero() {
        let day_one = UNIX_EPOCH + Duration::from_secs(20_000 * DAY_SECONDS + 100);
        let mut slots: Slots<()> = Slots::new(limits(1, 1), day_one);
        let a = Tenant::named("a");
        assert_eq!(
            slots.spent("r1", &a, 300, day_one),
            Some((UtcDay(20_000), 300))
        );
        assert_eq!(slots.spent("r1", &a, 300, day_one), None);
        assert_eq!(
            slots.spent("r1", &a, 500, day_one),
            Some((UtcDay(20_000), 500))
        );
        slots.baseline("r2", 700);
        assert_eq!(
            slots.spent("r2", &a, 750, day_one),
            Some((UtcDay(20_000), 550))
        );
        let left = slots.cost_left(&a, day_one).unwrap();
        assert_eq!((left.spent, left.left), (550, 450));
        let day_two = day_one + Duration::from_secs(DAY_SECONDS);
        assert_eq!(slots.cost_left(&a, day_two).unwrap().left, 1_000);
        assert_eq!(UtcDay::seconds_left(day_one), DAY_SECONDS - 100);
        assert!(slots.cost_left(&Tenant::named("b"), day_one).is_none());
    }
}
