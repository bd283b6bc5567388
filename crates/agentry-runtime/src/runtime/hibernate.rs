//! Hibernation, the runtime's side: waking a hibernated run from the store
//! into the same handles, and one alarm list for every hibernated run's
//! deadline.
//!
//! A hibernated run keeps its handles' shared parts (id, token, event sink
//! and its numbering, inbox gauge, outcome channel, claim; one allocation
//! every handle and the waker point to) and nothing of its actors. Its handle's slot holds a [`Dormant`] entry; the first input posted
//! (or its deadline's alarm, an abort, a human's decision) starts [`wake`]:
//! the run is read back from the store (its last checkpoint, session and
//! ledger; no listing, no process fence, since a sleeping run had no call in
//! flight, and no new claim, since it kept this process's), its policy is
//! rebuilt by the runtime's wake policy, and a new conductor fills the slot,
//! taking what was posted meanwhile in order. Its stored timers are not armed
//! again: their tasks (each posting through the slot) still wait.
//!
//! In lease mode (nodes of a cluster sharing one store) a hibernated run is
//! owned by no process: it lets its lease go ([`let_go`]: the owner row is
//! released, its handles learn [`RuntimeError::LetGo`], nothing of it stays
//! here), and whichever process resumes it next holds it. An input posted
//! once it started letting go is refused with that error, never taken: the
//! next holder gets it instead.

use std::sync::{Arc, Mutex, PoisonError};

use agentry_protocol::state::RunSnapshot;
use tokio::time::{Duration, Instant};

use super::Runtime;
use super::alarms::AlarmKey;
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

impl Runtime {
    /// Lets this runtime's event-driven runs with
    /// [`RunConfig::hibernate_after`] hibernate: `policy` rebuilds a run's
    /// policy when an input wakes it. Hibernation also needs a store
    /// ([`Runtime::with_store`]); without one (or without this) runs never
    /// hibernate.
    pub fn with_wake_policy(
        self,
        policy: impl Fn(&RunConfig) -> Result<Box<dyn Policy>, RuntimeError> + Send + Sync + 'static,
    ) -> Self {
        self.with_async_wake_policy(move |config| {
            let made = policy(config);
            Box::pin(async move { made })
        })
    }

    /// [`Runtime::with_wake_policy`] for a policy that takes awaiting to
    /// build (a model chain that reads its task, say).
    pub fn with_async_wake_policy(
        mut self,
        policy: impl Fn(
            &RunConfig,
        )
            -> futures::future::BoxFuture<'static, Result<Box<dyn Policy>, RuntimeError>>
        + Send
        + Sync
        + 'static,
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

    /// Lets `handle`'s run hibernate: its slot learns how to wake it. Each
    /// activation hibernates after `after` (this activation's, which a
    /// resume may have set over the stored one).
    pub(super) fn allow_hibernation(&self, handle: &RunHandle, after: Option<Duration>) {
        // The waker holds the handle that holds the slot that holds the
        // waker: the slot lets it go when the run stops (`LiveActors`).
        handle.live.allow_hibernation(Arc::new(Waker {
            handle: handle.clone(),
            runtime: self.clone(),
            alarm: Mutex::new(None),
            hibernate_after: after,
        }));
    }
}

/// How one run wakes: its handle and the runtime.
struct Waker {
    handle: RunHandle,
    runtime: Runtime,
    /// Its deadline's place in the runtime's alarms while it hibernates.
    alarm: Mutex<Option<AlarmKey>>,
    /// Set on every woken activation's configuration.
    hibernate_after: Option<Duration>,
}

impl Rouse for Waker {
    fn rouse(&self, live: LiveActors, dormant: Dormant) {
        if let Some(key) = self
            .alarm
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            self.runtime.alarms.remove(key);
        }
        let Ok(tokio) = tokio::runtime::Handle::try_current() else {
            tracing::error!(run_id = %self.handle.run_id, "a hibernated run cannot wake outside a tokio runtime");
            live.fail_wake();
            return;
        };
        let runtime = self.runtime.clone();
        let handle = self.handle.clone();
        let after = self.hibernate_after;
        tokio.spawn(async move {
            let run_id = Arc::clone(&handle.run_id);
            if let Err(e) = wake(&runtime, handle, dormant, after).await {
                tracing::error!(run_id = %run_id, error = %e, "a hibernated run could not wake; it stays unfinished in the store");
                live.fail_wake();
            }
        });
    }

    fn stored_snapshot(&self) -> Option<RunSnapshot> {
        let store = self.runtime.store()?;
        let run = store.load(&self.handle.run_id).ok()??;
        run.checkpoint.map(|c| c.snapshot)
    }

    fn hibernated(&self, live: &LiveActors, deadline: Option<Instant>) {
        if self.runtime.lease.is_some()
            && let Ok(tokio) = tokio::runtime::Handle::try_current()
        {
            tokio.spawn(let_go(live.clone(), self.handle.clone()));
            return;
        }
        // Listed even without a deadline: a shutdown wakes every hibernated
        // run to stop it.
        let at = deadline.unwrap_or_else(super::alarms::never);
        let key = self.runtime.alarms.insert(at, live.clone());
        *self.alarm.lock().unwrap_or_else(PoisonError::into_inner) = Some(key);
    }
}

/// Lease mode: a hibernated run lets its lease go and leaves this process.
/// Its owner row is released (fenced by its own token, so a run already
/// taken over releases nothing); its handles then see
/// [`RuntimeError::LetGo`]. Its timers' tasks end (their stored rows wait
/// for the next holder). A run woken before this begins keeps its lease.
async fn let_go(live: LiveActors, handle: RunHandle) {
    let Some(Dormant { outcome, claim, .. }) = live.begin_let_go() else {
        return;
    };
    if let (Some(log), Some(claim)) = (&handle.log, &claim) {
        let release = agentry_store::Write::Release {
            run_id: handle.run_id.to_string(),
            token: claim.lease().token().to_string(),
        };
        match log.commit(vec![release]).await {
            Ok(()) => claim.lease().released(),
            // Fenced (taken over meanwhile) or a store that failed: either
            // way the run is not this process's to go on with.
            Err(e) => {
                tracing::warn!(run_id = %handle.run_id, error = %e, "a hibernated run could not release its lease; it leaves this process all the same");
            }
        }
    }
    handle.run_token.cancel();
    drop(claim);
    live.let_go_done();
    drop(outcome);
    tracing::debug!(run_id = %handle.run_id, "hibernated run let its lease go");
}

/// The hibernated run as stored. Under strict durability everything it
/// applied was on disk before it was acknowledged, so before it hibernated:
/// read at once; otherwise whatever it queued lands first.
async fn read_back(
    runtime: &Runtime,
    run_id: &str,
) -> Result<agentry_store::StoredRun, RuntimeError> {
    match (runtime.durability, runtime.store()) {
        (crate::durable::Durability::Strict, Some(store)) => {
            store.load(run_id)?.ok_or_else(|| RuntimeError::NoSuchRun {
                run_id: run_id.to_string(),
                store: store.location(),
            })
        }
        (crate::durable::Durability::Strict | crate::durable::Durability::Grouped, _) => {
            runtime.load(run_id).await
        }
    }
}

/// Wakes `handle`'s run from the store into its slot.
async fn wake(
    runtime: &Runtime,
    handle: RunHandle,
    dormant: Dormant,
    hibernate_after: Option<Duration>,
) -> Result<(), RuntimeError> {
    let Dormant { outcome, claim, .. } = dormant;
    if let Some(c) = &claim {
        c.set_dormant(false);
    }
    let run_id = Arc::clone(&handle.run_id);
    let run = read_back(runtime, &run_id).await?;
    let mut config = config_of(&run.record)?;
    config.run_id = Some(run_id.to_string());
    config.hibernate_after = hibernate_after;
    // Read with the rest: the woken executor need not wait for the writer
    // (the message that woke the run is being committed) to read it again.
    let ledger = crate::executor::KnownLedger::new(run.ledger);
    let state = restored_state(&run_id, run.checkpoint, run.session, &config)?;
    let elapsed = Duration::from_millis(
        agentry_protocol::now_millis().saturating_sub(run.record.created_at_ms),
    );
    let make = runtime.wake_policy.as_ref().ok_or(RuntimeError::NoStore)?;
    let policy = make(&config).await?;
    let sandboxes = crate::sandbox::prepare_sandboxes(
        &config.sandbox,
        &config.workdir,
        &config.sandbox_host,
        Some(&runtime.registry.current()),
    )?;
    let mut lineage = handle.lineage.clone();
    let span = run_span(
        &config,
        &mut lineage,
        &run_id,
        &*policy,
        handle.events.redaction(),
    );
    let trace = config
        .trace
        .as_deref()
        .map(|path| {
            let sampling = Sampling::of(config.observe.sample, &lineage.trace_id);
            TraceWriter::open(path, true, Arc::clone(handle.events.redactor()), sampling)
        })
        .transpose()?;
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
        live: handle.live.clone(),
        lineage,
        span,
        agents: desk as Arc<dyn agentry_tools::agents::AgentDesk>,
        log: handle.log.clone(),
        restore: Some(Restore {
            state,
            elapsed,
            children: Vec::new(),
            woken: true,
        }),
        ledger,
        posted: Posted::default(),
        gauge: Arc::clone(&handle.gauge),
        claim,
        cut: handle.cut.clone(),
        sandboxes,
    });
    spawn_conductor(&run_id, args).await
}
