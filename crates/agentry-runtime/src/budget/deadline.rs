//! The alarm that stops a run at its deadline, precise to a fraction of a
//! millisecond.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ractor::ActorRef;
use tokio::task::JoinHandle;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::msg::BudgetMsg;

/// How long before the deadline tokio's timer hands over to a precise sleep.
const DEADLINE_LEAD: Duration = Duration::from_millis(2);

/// At most this many deadline alarms wait on blocking-pool threads at once;
/// the others fire on tokio's timer alone (0–2 ms late). Many runs started
/// together with the same deadline would otherwise each take a thread for the
/// last 2 ms.
const MAX_PRECISE_ALARMS: usize = 16;

/// Blocking-pool threads taken by deadline alarms right now (all runtimes).
static PRECISE_ALARMS: AtomicUsize = AtomicUsize::new(0);

/// One of the [`MAX_PRECISE_ALARMS`] places; given back on drop.
#[derive(Debug)]
struct PreciseSlot(());

impl PreciseSlot {
    fn take() -> Option<PreciseSlot> {
        PRECISE_ALARMS
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PRECISE_ALARMS).then_some(n + 1)
            })
            .ok()
            .map(|_| PreciseSlot(()))
    }
}

impl Drop for PreciseSlot {
    fn drop(&mut self) {
        PRECISE_ALARMS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The alarm that stops a run at its deadline.
///
/// tokio's timer wheel has 1 ms ticks and its driver parks for whole
/// milliseconds, so a `sleep_until` wakes 0–2 ms after its instant (W3's floor
/// shows ~1.3 ms on the reference machine). The alarm therefore sleeps on
/// tokio's timer until [`DEADLINE_LEAD`] before the deadline, then waits the rest
/// on a blocking-pool thread (`nanosleep`, ~0.1 ms late) and fires from there;
/// tokio's own timer for the deadline still races it, so a paused test clock or
/// a blocking pool that is full fires no later than before, and never early. At
/// most [`MAX_PRECISE_ALARMS`] alarms hold a thread at once.
#[derive(Debug)]
pub(super) struct DeadlineTimer {
    task: JoinHandle<()>,
    /// Set when the run ends first: a precise sleep already under way then
    /// fires nothing.
    disarmed: Arc<AtomicBool>,
}

impl DeadlineTimer {
    /// Stops the run: the cause first, then the token, so whoever sees the token
    /// cancelled and asks for the cause finds it.
    pub(super) fn arm(
        at: Instant,
        supervisor: ActorRef<BudgetMsg>,
        token: CancellationToken,
    ) -> Self {
        Self::arm_with(at, DEADLINE_LEAD, move || {
            let _ = supervisor.cast(BudgetMsg::DeadlineReached);
            token.cancel();
        })
    }

    /// Runs `fire` once, at `at` on the runtime's clock, unless disarmed first.
    fn arm_with(at: Instant, lead: Duration, fire: impl Fn() + Clone + Send + 'static) -> Self {
        let disarmed = Arc::new(AtomicBool::new(false));
        let fire = {
            let disarmed = Arc::clone(&disarmed);
            move || {
                // Swapped, so of the two racing waits only the first fires.
                if !disarmed.swap(true, Ordering::AcqRel) {
                    fire();
                }
            }
        };
        let task = tokio::spawn(async move {
            tokio::time::sleep_until(at.checked_sub(lead).unwrap_or(at)).await;
            let rest = at.saturating_duration_since(Instant::now());
            if let Some(slot) = PreciseSlot::take().filter(|_| !rest.is_zero()) {
                let precise = fire.clone();
                // Not awaited: it fires from its thread.
                drop(tokio::task::spawn_blocking(move || {
                    // Released when this closure ends or is dropped unrun.
                    let _slot = slot;
                    std::thread::sleep(rest);
                    // The deadline is on the runtime's clock: a paused test clock
                    // has not moved while this thread slept, and tokio's timer
                    // below fires then instead.
                    if Instant::now() >= at {
                        precise();
                    }
                }));
            }
            // The backstop (no slot, a paused clock, a busy blocking pool): on
            // tokio's timer, 0–2 ms late; a no-op once the precise sleep fired.
            tokio::time::sleep_until(at).await;
            fire();
        });
        DeadlineTimer { task, disarmed }
    }

    pub(super) fn disarm(self) {
        self.disarmed.store(true, Ordering::Release);
        self.task.abort();
    }
}

#[cfg(test)]
mod tests;
