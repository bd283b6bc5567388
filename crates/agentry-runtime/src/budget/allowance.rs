//! The run's tool-call allowance, shared by its conductor and its budget
//! supervisor without a message per step.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::tree_limits::ChildShare;

/// A run's tool-call allowance: the one place that says how many tool calls the
/// run may still make. The supervisor owns its books (it sets what is left at
/// start, moves it on a release or a charge-up, carves children's calls out of
/// it, and books what the conductor took before it handles any message, so
/// everything it answers counts them); the conductor's clone can only take its
/// step's calls ([`take_up_to`](Self::take_up_to)) and read how many it took
/// ([`own_calls`](Self::own_calls)). The conductor creates it (the supervisor
/// cannot hand anything back through `spawn_linked`) and passes it in
/// [`BudgetArgs`](super::BudgetArgs).
///
/// The conductor is the only spender of its run's own tool calls (children
/// spend from what was reserved for them): it takes them out of what is left —
/// the limit minus everything spent, reserved for children or already taken —
/// in one atomic step. A child's calls are carved from the same figure,
/// atomically too, so a reservation made while a step is being decided and that
/// step's own calls never both get the last calls (they once did: the conductor
/// granted against the figure its step's spend had reported). A message would
/// wake the supervisor's task as well as the executor's in the same poll, and
/// the second wake-up hands a task to another worker thread.
#[derive(Debug, Clone)]
pub(crate) struct ToolCallAllowance(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// Every call the run took itself, a resumed run's earlier ones included;
    /// only the conductor adds to it.
    taken: AtomicU64,
    /// What may still be taken, [`UNLIMITED`] without a limit; below zero when
    /// a child's charge-up passed what was reserved for it.
    left: AtomicI64,
}

/// [`Shared::left`] of a run without a tool-call limit.
const UNLIMITED: i64 = i64::MAX;

/// A count of tool calls as a change of [`Shared::left`].
#[inline]
pub(super) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(UNLIMITED - 1)
}

impl ToolCallAllowance {
    /// A run's allowance; a resumed run had already made `own_calls` calls.
    /// Unlimited until the supervisor [starts](Self::start) it.
    pub(crate) fn new(own_calls: u64) -> ToolCallAllowance {
        ToolCallAllowance(Arc::new(Shared {
            taken: AtomicU64::new(own_calls),
            left: AtomicI64::new(UNLIMITED),
        }))
    }

    /// Takes up to `n` calls for the run's own step and returns how many were
    /// granted (the rest are refused with `EBUDGET`).
    #[inline]
    pub(crate) fn take_up_to(&self, n: u64) -> u64 {
        let mut granted = 0;
        let _ = self
            .0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                if left == UNLIMITED {
                    granted = n;
                    return None;
                }
                granted = n.min(u64::try_from(left).unwrap_or(0));
                (granted > 0).then(|| left - granted as i64)
            });
        if granted > 0 {
            self.0.taken.fetch_add(granted, Ordering::Release);
        }
        granted
    }

    /// Tool calls the run made itself (the budget also counts its children's).
    #[inline]
    pub(crate) fn own_calls(&self) -> u64 {
        // Only the conductor adds to it, and it reads its own writes.
        self.0.taken.load(Ordering::Relaxed)
    }

    /// Sets what is left from the limit and what is committed (at start); the
    /// calls taken so far are booked already. Returns that count.
    pub(super) fn start(&self, limit: Option<u64>, committed: u64) -> u64 {
        let left = limit.map_or(UNLIMITED, |l| signed(l) - signed(committed));
        self.0.left.store(left, Ordering::Release);
        self.0.taken.load(Ordering::Acquire)
    }

    /// What is left moves by `delta` (a release, a charge-up past a reservation).
    pub(super) fn shift(&self, delta: i64) {
        let _ = self
            .0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                (left != UNLIMITED).then(|| left.saturating_add(delta).min(UNLIMITED - 1))
            });
    }

    /// Carves calls for a child out of what is left minus the parent's `kept`
    /// reserve: exactly `wanted`, or `share` of it when `None`. When that does
    /// not fit (or the share is nothing), what is left.
    pub(super) fn carve(
        &self,
        wanted: Option<u64>,
        kept: u64,
        share: ChildShare,
    ) -> Result<u64, u64> {
        let mut carved = 0;
        self.0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                let have = u64::try_from(left).ok()?;
                let available = have.saturating_sub(kept);
                carved = wanted.unwrap_or_else(|| share.of(available));
                (carved <= available && (carved > 0 || wanted.is_some()))
                    .then(|| left - carved as i64)
            })
            .map(|_| carved)
            .map_err(|left| u64::try_from(left).unwrap_or(0))
    }

    /// What may still be taken (`u64::MAX` without a limit; 0 when overdrawn).
    pub(super) fn left(&self) -> u64 {
        u64::try_from(self.0.left.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// The calls taken since the supervisor last booked (`booked` is its count
    /// so far, moved on to now).
    #[inline]
    pub(super) fn take_booked(&self, booked: &mut u64) -> u64 {
        let taken = self.0.taken.load(Ordering::Acquire);
        let new = taken.saturating_sub(*booked);
        *booked = taken;
        new
    }
}
