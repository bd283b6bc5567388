//! The run's own tool calls, counted without a message per step.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// A run's own tool calls, shared by its conductor and its budget supervisor
/// without a message per step. The conductor is the only spender of its run's
/// own tool calls (children spend from what was reserved for them): it takes
/// them out of what is left — the limit minus everything spent, reserved for
/// children or already taken — in one atomic step, and adds them to the taken
/// count, which the supervisor moves into its books before it handles any
/// message, so everything it answers counts them. The supervisor carves a
/// child's tool calls out of the same figure, atomically too, so a reservation
/// made while a step is being decided and that step's own calls never both get
/// the last calls (they once did: the conductor granted against the figure its
/// step's spend had reported). A message would wake the supervisor's task as
/// well as the executor's in the same poll, and the second wake-up hands a task
/// to another worker thread.
#[derive(Debug, Clone, Default)]
pub struct ToolCallTally(Arc<Tally>);

#[derive(Debug, Default)]
struct Tally {
    /// Taken by the conductor, not yet in the supervisor's books.
    taken: AtomicU64,
    /// What may still be taken, [`UNLIMITED`] without a limit; below zero when
    /// a child's charge-up passed what was reserved for it.
    left: AtomicI64,
}

/// [`Tally::left`] of a run without a tool-call limit.
const UNLIMITED: i64 = i64::MAX;

/// A count of tool calls as a change of [`Tally::left`].
#[inline]
pub(super) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(UNLIMITED - 1)
}

impl ToolCallTally {
    /// Takes up to `n` calls for the run's own step and returns how many were
    /// granted (the rest are refused with `EBUDGET`).
    pub fn take_up_to(&self, n: u64) -> u64 {
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

    /// Sets what is left from the limit and what is committed (at start).
    pub(super) fn start(&self, limit: Option<u64>, committed: u64) {
        let left = limit.map_or(UNLIMITED, |l| signed(l) - signed(committed));
        self.0.left.store(left, Ordering::Release);
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

    /// Carves calls for a child: exactly `wanted`, or all that is left when
    /// `None`; or, when that does not fit, what is left.
    pub(super) fn carve(&self, wanted: Option<u64>) -> Result<u64, u64> {
        let mut carved = 0;
        self.0
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                let have = u64::try_from(left).ok()?;
                carved = wanted.unwrap_or(have);
                (carved <= have).then(|| left - carved as i64)
            })
            .map(|_| carved)
            .map_err(|left| u64::try_from(left).unwrap_or(0))
    }

    /// Takes the calls taken since the last call, for the supervisor's books.
    #[inline]
    pub(super) fn take_booked(&self) -> u64 {
        self.0.taken.swap(0, Ordering::Acquire)
    }
}
