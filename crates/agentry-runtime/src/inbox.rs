//! A run's inbox bound: how many messages, custom events and fired timers it
//! holds that no decision has taken yet.
//!
//! Inputs are applied (numbered, recorded) at the conductor's next safe
//! point, but the model sees them only at its next decision; a paused or busy
//! run would otherwise hold everything anyone sends it. Each handle takes a
//! slot before it posts such an input and is refused past the capacity
//! ([`RuntimeError::InboxFull`](crate::RuntimeError::InboxFull)), so nothing
//! of a refused input is queued or stored. The conductor gives the slots back
//! when a decision takes the inputs (or when one is dropped unapplied).
//! Control inputs (pause, resume, an interrupt without a message, abort) take
//! no slot and are never refused.

use std::sync::atomic::{AtomicUsize, Ordering};

use agentry_protocol::trace::RunInput;
use tokio::sync::Notify;

/// Default [`RunConfig::inbox_capacity`](crate::RunConfig::inbox_capacity).
pub const DEFAULT_INBOX_CAPACITY: usize = 1_024;

/// One run's count of held inputs, shared by its handles and its conductor.
#[derive(Debug)]
pub(crate) struct InboxGauge {
    held: AtomicUsize,
    capacity: usize,
    /// Signalled whenever slots are given back (a fired timer waits on it).
    freed: Notify,
}

impl InboxGauge {
    pub(crate) fn new(capacity: usize) -> Self {
        InboxGauge {
            held: AtomicUsize::new(0),
            capacity,
            freed: Notify::new(),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Takes a slot unless all are held.
    pub(crate) fn try_take(&self) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                (h < self.capacity).then_some(h + 1)
            })
            .is_ok()
    }

    /// Takes a slot whatever the count: for inputs accepted before a restart
    /// (they were within the bound then, and are already stored).
    pub(crate) fn force_take(&self) {
        self.held.fetch_add(1, Ordering::AcqRel);
    }

    /// Waits for a slot: a fired timer's event is delayed, never dropped.
    pub(crate) async fn take(&self) {
        loop {
            // Registered before the check, so a release between the check
            // and the wait is not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.try_take() {
                return;
            }
            freed.await;
        }
    }

    /// Gives `n` slots back.
    pub(crate) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                Some(h.saturating_sub(n))
            });
        self.freed.notify_waiters();
    }
}

/// Whether `input` takes an inbox slot: what carries data for the model.
pub(crate) fn takes_slot(input: &RunInput) -> bool {
    match input {
        RunInput::Message { .. } | RunInput::Event { .. } => true,
        RunInput::Interrupt { text } => text.is_some(),
        RunInput::Pause
        | RunInput::Resume
        | RunInput::Tick { .. }
        | RunInput::Approval { .. }
        | RunInput::Settlement { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_refused_past_the_capacity_and_given_back() {
        let gauge = InboxGauge::new(2);
        assert!(gauge.try_take());
        assert!(gauge.try_take());
        assert!(!gauge.try_take(), "the third is refused");
        assert_eq!(gauge.held(), 2);
        gauge.release(1);
        assert!(gauge.try_take());
        gauge.force_take();
        assert_eq!(gauge.held(), 3, "a restored input is held past the bound");
        gauge.release(10);
        assert_eq!(gauge.held(), 0);
    }

    #[tokio::test]
    async fn a_waiting_take_gets_a_released_slot() {
        let gauge = std::sync::Arc::new(InboxGauge::new(1));
        assert!(gauge.try_take());
        let waiter = tokio::spawn({
            let gauge = std::sync::Arc::clone(&gauge);
            async move { gauge.take().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "no slot yet");
        gauge.release(1);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("woken")
            .expect("joined");
        assert_eq!(gauge.held(), 1);
    }
}
