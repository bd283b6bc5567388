//! One alarm list for every hibernated run's deadline: a sorted map and one
//! task, so a million sleeping runs hold a million entries, not a million
//! timers. A due alarm wakes its run (which then stops at its deadline). A
//! run without a deadline is listed too, at a time that never comes, so that
//! a shutdown finds every hibernated run.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use crate::conductor::LiveActors;

/// An alarm's place: its time, then a number that tells equal times apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct AlarmKey {
    at: Instant,
    n: u64,
}

/// An alarm time that never comes (a run without a deadline is listed for
/// a shutdown): thirty years on.
pub(super) fn never() -> Instant {
    Instant::now() + std::time::Duration::from_secs(30 * 365 * 86_400)
}

/// Every hibernated run's deadline, in time order.
#[derive(Default)]
pub(crate) struct Alarms {
    inner: Mutex<AlarmList>,
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct AlarmList {
    due: BTreeMap<AlarmKey, LiveActors>,
    next: u64,
    /// The task that fires them runs.
    running: bool,
}

impl Alarms {
    fn list(&self) -> std::sync::MutexGuard<'_, AlarmList> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes `live`'s run at `at` (unless removed first).
    pub(super) fn insert(self: &Arc<Self>, at: Instant, live: LiveActors) -> AlarmKey {
        let (key, start, first) = {
            let mut list = self.list();
            list.next += 1;
            let key = AlarmKey { at, n: list.next };
            let first = list.due.keys().next().is_none_or(|k| key < *k);
            list.due.insert(key, live);
            let start = !list.running;
            list.running = true;
            (key, start, first)
        };
        if start {
            tokio::spawn(fire(Arc::clone(self)));
        } else if first {
            self.changed.notify_one();
        }
        key
    }

    /// Wakes every listed run now (a shutdown: each stops as it wakes).
    pub(super) fn wake_all(&self) {
        let all = std::mem::take(&mut self.list().due);
        for live in all.into_values() {
            live.wake();
        }
    }

    pub(super) fn remove(&self, key: AlarmKey) {
        self.list().due.remove(&key);
    }

    /// How many alarms wait.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.list().due.len()
    }
}

/// The alarms' task: wakes each run whose alarm is due, sleeps until the
/// next; ends when none is left (the next insert starts another).
async fn fire(alarms: Arc<Alarms>) {
    loop {
        let now = Instant::now();
        let (due, next) = {
            let mut l = alarms.list();
            let later = l.due.split_off(&AlarmKey {
                at: now,
                n: u64::MAX,
            });
            let due = std::mem::replace(&mut l.due, later);
            let next = l.due.keys().next().map(|k| k.at);
            if next.is_none() {
                l.running = false;
            }
            (due, next)
        };
        for live in due.into_values() {
            live.wake();
        }
        let Some(at) = next else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep_until(at) => {}
            () = alarms.changed.notified() => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tokio::time::Duration;

    #[tokio::test]
    async fn alarms_fire_in_order_and_a_removed_one_never_fires() {
        let alarms = Arc::new(Alarms::default());
        let now = Instant::now();
        let a = LiveActors::default();
        let b = LiveActors::default();
        let kb = alarms.insert(now + Duration::from_millis(40), b);
        let _ka = alarms.insert(now + Duration::from_millis(10), a);
        alarms.remove(kb);
        assert_eq!(alarms.len(), 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(alarms.len(), 0, "the due alarm fired and left the list");
    }
}
