//! The timer of a time-driven agent.

use ractor::ActorRef;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};

use super::msg::ConductorMsg;

/// The timer of a time-driven agent. Ticks are scheduled one at a time, the next
/// only after the current one's step has finished, so they can never stack: a
/// tick whose time passed while the previous one was still running is skipped
/// and counted.
pub(super) struct Ticker {
    origin: Instant,
    every: Duration,
    pub(super) timer: JoinHandle<()>,
    /// Ticks skipped just before the next one that fires.
    pub(super) carry: u64,
}

impl Ticker {
    /// Schedules tick 1 one period from now.
    pub(super) fn start(myself: &ActorRef<ConductorMsg>, every: Duration) -> Ticker {
        let origin = Instant::now();
        let timer = schedule(myself, crate::clock::later(origin, every), 1);
        Ticker {
            origin,
            every,
            timer,
            carry: 0,
        }
    }

    /// Cancels the pending tick.
    pub(super) fn stop(self) {
        self.timer.abort();
    }

    /// The first tick after `n` whose time has not passed yet.
    pub(super) fn next_after(&self, n: u64) -> u64 {
        let elapsed = self.origin.elapsed().as_nanos();
        let due = u64::try_from(elapsed / self.every.as_nanos().max(1))
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        due.max(n.saturating_add(1))
    }

    /// When tick `n` is due.
    pub(super) fn at(&self, n: u64) -> Instant {
        crate::clock::later(
            self.origin,
            self.every
                .saturating_mul(u32::try_from(n).unwrap_or(u32::MAX)),
        )
    }
}

/// Casts tick `n` to the conductor at `at`.
pub(super) fn schedule(myself: &ActorRef<ConductorMsg>, at: Instant, n: u64) -> JoinHandle<()> {
    let me = myself.clone();
    tokio::spawn(async move {
        tokio::time::sleep_until(at).await;
        let _ = me.cast(ConductorMsg::Tick(n));
    })
}
