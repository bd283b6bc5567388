//! Instant arithmetic that never panics.
//!
//! `Instant + Duration` panics on overflow, and a duration can come from input
//! (a deadline, a tick period of `u64::MAX` seconds through the embedding API).
//! Every instant the runtime computes from a duration goes through [`later`].

use tokio::time::{Duration, Instant};

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
