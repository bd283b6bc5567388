//! A run's clock, and instant arithmetic that never panics.
//!
//! `Instant + Duration` panics on overflow, and a duration can come from input
//! (a deadline, a tick period of `u64::MAX` seconds through the embedding API).
//! Every instant the runtime computes from a duration goes through [`later`].

use tokio::time::{Duration, Instant};

/// When a run started and when it must stop: built once, at the conductor's
/// start, and handed to the budget supervisor (the alarm, a child's deadline)
/// and the executor (to tell `ETIMEDOUT` from `ECANCELED`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunClock {
    /// When the run started; a resumed run's clock goes on from its elapsed time.
    pub(crate) started: Instant,
    /// The absolute deadline: the run's own or its parent's, whichever comes
    /// first (so when an ancestor's deadline fires, every descendant's has
    /// passed too, and says `deadline`).
    pub(crate) deadline_at: Option<Instant>,
}

impl RunClock {
    /// The clock of a run that had already run `restored_elapsed` (resumed),
    /// limited to `own_deadline_ms` from its start and by `parent_deadline`.
    pub(crate) fn start(
        restored_elapsed: Option<Duration>,
        own_deadline_ms: Option<u64>,
        parent_deadline: Option<Instant>,
    ) -> RunClock {
        let now = Instant::now();
        let started = restored_elapsed
            .and_then(|elapsed| now.checked_sub(elapsed))
            .unwrap_or(now);
        let own = own_deadline_ms.map(|ms| later(started, Duration::from_millis(ms)));
        let deadline_at = match (own, parent_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        RunClock {
            started,
            deadline_at,
        }
    }

    /// Milliseconds since the run started.
    #[inline]
    pub(crate) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Whether the deadline has passed.
    #[inline]
    pub(crate) fn deadline_passed(&self) -> bool {
        self.deadline_at.is_some_and(|at| Instant::now() >= at)
    }
}

/// Far enough to mean "never" for a run: 30 years, as tokio's own far future.
const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// `at + d`, or, when that overflows the clock, the farthest instant within
/// [`FAR`] of `at` (a run never gets there).
pub(crate) fn later(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(FAR.min(d)))
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_any_duration_never_panics_and_keeps_order() {
        let now = Instant::now();
        assert_eq!(
            later(now, Duration::from_secs(5)),
            now + Duration::from_secs(5)
        );
        for d in [
            Duration::MAX,
            Duration::from_secs(u64::MAX),
            Duration::from_secs(9_999_999_999_999_999_999),
        ] {
            assert!(later(now, d) > now + Duration::from_secs(365 * 24 * 3600));
        }
    }
}
