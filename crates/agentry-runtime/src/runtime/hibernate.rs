//! Hibernation, the runtime's side: waking a hibernated run from the store
//! into the same handles, and one alarm list for every hibernated run's
//! deadline.
//!
//! A hibernated run keeps its handles' shared parts (id, token, event sink
//! and its numbering, inbox gauge, outcome channel, claim) and nothing of its
//! actors. Its handle's slot holds a [`Dormant`] entry; the first input posted
//! (or its deadline's alarm, an abort, a human's decision) starts [`wake`]:
//! the run is read back from the store (its last checkpoint, session and
//! ledger; no listing, no process fence, since a sleeping run had no call in
//! flight, and no new claim, since it kept this process's), its policy is
//! rebuilt by the runtime's wake policy, and a new conductor fills the slot,
//! taking what was posted meanwhile in order. Its stored timers are not armed
//! again: their tasks (each posting through the slot) still wait.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use agentry_protocol::state::RunSnapshot;
use tokio::time::{Duration, Instant};

use super::Runtime;
use super::children::RunChildren;
use super::handle::RunHandle;
use super::launch::spawn_conductor;
use super::record::config_of;
use super::resume::restored_state;
use crate::conductor::{ConductorArgs, Dormant, LiveActors, Posted, Restore, Rouse, run_span};
use crate::config::RunConfig;
use crate::error::RuntimeError;
use crate::policy::Policy;
use crate::trace::{Sampling, TraceWriter};

/// Builds a woken run's policy from its stored configuration (its
/// `policy_spec` says which agent or script): one per runtime, shared by
/// every run it may wake.
pub type WakePolicy =
    Arc<dyn Fn(&RunConfig) -> Result<Box<dyn Policy>, RuntimeError> + Send + Sync>;

impl Runtime {
    /// Lets this runtime's event-driven runs with
    /// [`RunConfig::hibernate_after`] hibernate: `policy` rebuilds a run's
    /// policy when an input wakes it. Hibernation also needs a store
    /// ([`Runtime::with_store`]); without one (or without this) runs never
    /// hibernate.
    pub fn with_wake_policy(
        mut self,
        policy: impl Fn(&RunConfig) -> Result<Box<dyn Policy>, RuntimeError> + Send + Sync + 'static,
    ) -> Self {
        self.wake_policy = Some(Arc::new(policy));
        self
    }

    /// Whether a run so configured, at this place in its tree, may hibernate.
    pub(super) fn hibernates(&self, config: &RunConfig, root: bool, durable: bool) -> bool {
        self.wake_policy.is_some()
            && durable
            && root
            && config.hibernate_after.is_some()
            && config.driver == crate::config::Driver::Events
            && config.tick_every.is_none()
    }

    /// Lets `handle`'s run hibernate: its slot learns how to wake it.
    pub(super) fn allow_hibernation(&self, handle: &RunHandle) {
        let shell = RunHandle {
            // Not the run's own slot: the waker must not hold the slot that
            // holds it.
            live: LiveActors::default(),
            ..handle.clone()
        };
        handle.live.allow_hibernation(Arc::new(Waker {
            shell,
            runtime: self.clone(),
            alarm: Mutex::new(None),
        }));
    }
}

/// How one run wakes: its handle's lasting parts and the runtime.
struct Waker {
    shell: RunHandle,
    runtime: Runtime,
    /// Its deadline's place in the runtime's alarms while it hibernates.
    alarm: Mutex<Option<AlarmKey>>,
}

impl Rouse for Waker {
    fn rouse(&self, live: LiveActors, dormant: Box<Dormant>) {
        if let Some(key) = self
            .alarm
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            self.runtime.alarms.remove(key);
        }
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            tracing::error!(run_id = %self.shell.run_id, "a hibernated run cannot wake outside a tokio runtime");
            live.fail_wake();
            return;
        };
        let runtime = self.runtime.clone();
        let shell = self.shell.clone();
        tokio.spawn(async move {
            let run_id = Arc::clone(&shell.run_id);
            if let Err(e) = wake(&runtime, shell, &live, dormant).await {
                tracing::error!(run_id = %run_id, error = %e, "a hibernated run could not wake; it stays unfinished in the store");
                live.fail_wake();
            }
        });
    }

    fn stored_snapshot(&self) -> Option<RunSnapshot> {
        let store = self.runtime.store()?;
        let run = store.load(&self.shell.run_id).ok()??;
        run.checkpoint.map(|c| c.snapshot)
    }

    fn hibernated(&self, live: &LiveActors, deadline: Option<Instant>) {
        if let Some(at) = deadline {
            let key = self.runtime.alarms.insert(at, live.clone());
            *self.alarm.lock().unwrap_or_else(PoisonError::into_inner) = Some(key);
        }
    }
}

/// Wakes the run of `live` from the store into `shell`'s parts.
async fn wake(
    runtime: &Runtime,
    shell: RunHandle,
    live: &LiveActors,
    dormant: Box<Dormant>,
) -> Result<(), RuntimeError> {
    let Dormant { outcome, claim, .. } = *dormant;
    if let Some(c) = &claim {
        c.set_dormant(false);
    }
    let run_id = Arc::clone(&shell.run_id);
    // Whatever the run queued lands first.
    let run = runtime.load(&run_id).await?;
    let mut config = config_of(&run.record)?;
    config.run_id = Some(run_id.to_string());
    let state = restored_state(&run_id, run.checkpoint, run.session, &config)?;
    let elapsed = Duration::from_millis(
        agentry_protocol::now_millis().saturating_sub(run.record.created_at_ms),
    );
    let make = runtime.wake_policy.as_ref().ok_or(RuntimeError::NoStore)?;
    let policy = make(&config)?;
    let sandboxes = crate::sandbox::prepare_sandboxes(
        &config.sandbox,
        &config.workdir,
        &config.sandbox_host,
        Some(&runtime.registry.current()),
    )?;
    let mut lineage = shell.lineage.clone();
    let span = run_span(
        &config,
        &mut lineage,
        &run_id,
        &*policy,
        shell.events.redaction(),
    );
    let trace = config
        .trace
        .as_deref()
        .map(|path| {
            let sampling = Sampling::of(config.observe.sample, &lineage.trace_id);
            TraceWriter::open(path, true, Arc::clone(shell.events.redactor()), sampling)
        })
        .transpose()?;
    let handle = RunHandle {
        live: live.clone(),
        ..shell
    };
    let desk = Arc::new(RunChildren::new(runtime.clone(), &config, true));
    desk.set_parent(handle.clone());
    let args = Box::new(ConductorArgs {
        run_id: Arc::clone(&run_id),
        config,
        registry: runtime.registry.clone(),
        policy,
        run_token: handle.run_token.clone(),
        outcome,
        events: handle.events.clone(),
        trace,
        live: live.clone(),
        lineage,
        span,
        agents: desk as Arc<dyn agentry_tools::agents::AgentDesk>,
        log: handle.log.clone(),
        restore: Some(Restore {
            state,
            elapsed,
            children: Vec::new(),
        }),
        posted: Posted::default(),
        gauge: Arc::clone(&handle.gauge),
        claim,
        cut: handle.cut.clone(),
        sandboxes,
    });
    spawn_conductor(&run_id, args).await
}

/// An alarm's place: its time, then a number that tells equal times apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct AlarmKey {
    at: Instant,
    n: u64,
}

/// Every hibernated run's deadline, in one sorted list with one task: a
/// million sleeping runs hold a million entries, not a million timers.
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
    fn insert(self: &Arc<Self>, at: Instant, live: LiveActors) -> AlarmKey {
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

    fn remove(&self, key: AlarmKey) {
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
