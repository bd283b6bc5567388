//! What an embedder gets back from a run: its outcome, and its actors' addresses.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use agentry_protocol::accept::CheckOutcome;
use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::state::RunSnapshot;
use agentry_protocol::stop::StopReason;
use ractor::{ActorCell, ActorRef};
use serde::Serialize;

use super::msg::{ConductorMsg, ConductorPost};
use crate::budget::BudgetMsg;
use crate::executor::ExecutorMsg;
use crate::policy::PolicyMsg;
use crate::state::StateMsg;

/// How a run ended, as the embedder sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunOutcome {
    /// Run id.
    pub run_id: String,
    /// Task id.
    pub task_id: String,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// A sentence explaining the stop (which check failed, which budget ran out).
    pub detail: String,
    /// The model's answer, if it gave one.
    pub answer: Option<String>,
    /// Steps taken.
    pub steps: u64,
    /// Tool calls this run made (its budget's spend also counts its children's).
    pub tool_calls: u64,
    /// Final budget.
    pub budget: BudgetSnapshot,
    /// Acceptance check outcomes, when the model finished.
    pub checks: Vec<CheckOutcome>,
    /// Key fields of the final state.
    pub state: RunSnapshot,
    /// The working directory.
    pub workdir: PathBuf,
    /// The trace file, if one was written.
    pub trace: Option<PathBuf>,
    /// Why the trace file is incomplete (a full disk, `/dev/full`, an I/O
    /// error), if it is: the run went on, but its record is lost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_error: Option<String>,
}

/// Where a run's outcome is published: set once by its conductor, read and
/// awaited by every handle. Kept in the run's slot (no allocation of its
/// own; a `watch` channel kept eight wake lists, ~350 bytes, in every run, a
/// hibernated one too).
pub(crate) struct OutcomeTx(LiveActors);

/// A reader of a run's [`OutcomeTx`]; every clone reads the same outcome.
#[derive(Clone)]
pub(crate) struct OutcomeRx(LiveActors);

impl std::fmt::Debug for OutcomeRx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutcomeRx")
            .field("published", &self.get().is_some())
            .finish()
    }
}

/// The outcome cell of the run whose slot is `live`: the conductor's end
/// and the handles'.
pub(crate) fn outcome_channel(live: &LiveActors) -> (OutcomeTx, OutcomeRx) {
    (OutcomeTx(live.clone()), OutcomeRx(live.clone()))
}

/// Why a run left this process without an outcome: the store refused its
/// write because another process took it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TakenOver {
    /// The run's fencing epoch the store reported.
    pub(crate) epoch: u64,
    /// Who owns it now, if anyone.
    pub(crate) owner: Option<String>,
}

impl OutcomeTx {
    /// Publishes the outcome (once; a second is ignored) and wakes every waiter.
    pub(crate) fn publish(&self, outcome: RunOutcome) {
        let shared = &self.0.0;
        let _ = shared.outcome.set(Box::new(outcome));
        shared.woke.notify_waiters();
    }

    /// The run is no longer this process's: no outcome here, ever. Waiters
    /// learn who took it over.
    pub(crate) fn taken_over(&self, taken: TakenOver) {
        let shared = &self.0.0;
        let _ = shared.taken_over.set(Box::new(taken));
        shared.lost.store(true, Ordering::SeqCst);
        shared.woke.notify_waiters();
    }
}

impl Drop for OutcomeTx {
    fn drop(&mut self) {
        let shared = &self.0.0;
        if shared.outcome.get().is_none() {
            shared.lost.store(true, Ordering::SeqCst);
            shared.woke.notify_waiters();
        }
    }
}

impl OutcomeRx {
    /// The outcome, once published.
    pub(crate) fn get(&self) -> Option<&RunOutcome> {
        self.0.0.outcome.get().map(|b| &**b)
    }

    /// Who took the run over, when that is why it has no outcome.
    pub(crate) fn taken_over(&self) -> Option<&TakenOver> {
        self.0.0.taken_over.get().map(|b| &**b)
    }

    /// Whether the run has no outcome here because it hibernated and let
    /// its lease go (lease mode).
    pub(crate) fn let_go(&self) -> bool {
        self.0.0.let_go.load(Ordering::SeqCst)
    }

    /// Waits for the outcome; `None` if the run was lost (its sender gone
    /// without publishing).
    pub(crate) async fn wait(&self) -> Option<&RunOutcome> {
        let shared = &self.0.0;
        loop {
            let notified = shared.woke.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(outcome) = self.get() {
                return Some(outcome);
            }
            if shared.lost.load(Ordering::SeqCst) {
                return None;
            }
            notified.await;
        }
    }
}

/// The run's four actors as the conductor spawned them, by message type.
#[derive(Debug, Clone)]
pub(crate) struct ActorRefs {
    pub(crate) policy: ActorRef<PolicyMsg>,
    pub(crate) executor: ActorRef<ExecutorMsg>,
    pub(crate) state: ActorRef<StateMsg>,
    pub(crate) budget: ActorRef<BudgetMsg>,
}

/// The run's actors as its handles reach them while it runs: one slot shared
/// by every clone of its handles, filled by the conductor as it starts and
/// emptied once the outcome is published. A stopped run's actors have ended,
/// but each address keeps its actor's four mailboxes allocated (~4.7 KB): a
/// handle kept for the outcome must not keep them (~23 KB per run).
///
/// A hibernated run's slot holds its [`Dormant`] entry instead of addresses;
/// the first input (or a due alarm) turns it into `Waking`, which queues what
/// is posted meanwhile, until the woken conductor fills the slot again and
/// casts the queue in order (see `runtime/hibernate.rs`).
#[derive(Clone, Default)]
pub(crate) struct LiveActors(Arc<SlotShared>);

impl std::fmt::Debug for LiveActors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveActors").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct SlotShared {
    slot: Mutex<Slot>,
    /// Told when a wake ends (the slot live again, or the run gone) and
    /// when the outcome is published or lost.
    woke: tokio::sync::Notify,
    /// The run's outcome, once published ([`OutcomeTx`]).
    outcome: OnceLock<Box<RunOutcome>>,
    /// Its [`OutcomeTx`] went without publishing: the run is lost to this
    /// process.
    lost: AtomicBool,
    /// Why, when another process took the run over.
    taken_over: OnceLock<Box<TakenOver>>,
    /// Hibernated in lease mode, the run let its lease go: it rests in the
    /// store, owned by no process (see `runtime/hibernate.rs`).
    let_go: AtomicBool,
    /// How to wake the run: set when the run may hibernate, let go when it
    /// stops (the waker holds a handle on this slot).
    rouse: Mutex<Option<Arc<dyn Rouse>>>,
}

/// Where a run's actors are.
#[derive(Default)]
enum Slot {
    /// Not started yet, or stopped.
    #[default]
    Gone,
    /// Boxed: a hibernated run's slot then holds only its dormant entry.
    Live(Box<Live>),
    /// Hibernated: no actors.
    Dormant(Dormant),
    /// Being woken: what was posted meanwhile, in order.
    Waking(Vec<ConductorMsg>),
    /// Hibernated in lease mode and letting its lease go: nothing is taken
    /// in (whatever comes is for the process that takes the run next).
    Leaving,
}

/// What a hibernated run keeps besides its handle's shared parts: what its
/// conductor held that outlives an activation.
pub(crate) struct Dormant {
    /// Where the outcome is published (the handles hold its receivers).
    pub(crate) outcome: OutcomeTx,
    /// This process's claim on the run (kept: nobody else may take it).
    pub(crate) claim: Option<crate::owner::Claim>,
    /// The run's deadline, if it has one (its alarm wakes the run).
    pub(crate) deadline: Option<tokio::time::Instant>,
}

/// Wakes a hibernated run (the runtime's side, `runtime/hibernate.rs`).
pub(crate) trait Rouse: Send + Sync {
    /// Starts waking the run of `live` from `dormant`; its slot is `Waking`.
    fn rouse(&self, live: LiveActors, dormant: Dormant);
    /// The run's last stored state, for a look at a hibernated run.
    fn stored_snapshot(&self) -> Option<RunSnapshot>;
    /// The run's deadline and its alarm: registered as the run hibernates.
    fn hibernated(&self, live: &LiveActors, deadline: Option<tokio::time::Instant>);
}

/// What [`LiveActors::post`] did with a message.
pub(crate) enum Posting {
    /// Cast to the live conductor (or queued for the one waking).
    Sent,
    /// The run has stopped.
    Stopped,
    /// The run let its lease go (hibernated in lease mode): nothing was
    /// taken; the run rests in the store for the next process to take.
    LetGo,
}

/// The addresses [`LiveActors`] holds while the run runs.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// Every message to the conductor is counted (see `Posted`).
    pub(crate) conductor: ConductorPost,
    /// The state is read from the state keeper directly (it never blocks),
    /// not through the conductor, which may be mid-step.
    pub(crate) actors: ActorRefs,
}

impl LiveActors {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        // Plain swaps of the slot: a panic elsewhere leaves it whole.
        self.0
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fills the slot; a woken run's queued messages are cast first, in order.
    pub(crate) fn set(&self, live: Live) {
        let mut slot = self.lock();
        if let Slot::Waking(queued) = std::mem::take(&mut *slot) {
            for msg in queued {
                let _ = live.conductor.cast(msg);
            }
        }
        *slot = Slot::Live(Box::new(live));
        drop(slot);
        self.0.woke.notify_waiters();
    }

    /// Lets the run hibernate (see [`Rouse`]).
    pub(crate) fn allow_hibernation(&self, rouse: Arc<dyn Rouse>) {
        *self.rouser() = Some(rouse);
    }

    fn rouser(&self) -> std::sync::MutexGuard<'_, Option<Arc<dyn Rouse>>> {
        self.0
            .rouse
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The waker, if the run may hibernate (cloned out of its lock).
    fn rouse(&self) -> Option<Arc<dyn Rouse>> {
        self.rouser().clone()
    }

    /// Whether the run may hibernate.
    pub(crate) fn may_hibernate(&self) -> bool {
        self.rouser().is_some()
    }

    /// Whether the run is hibernated now.
    pub(crate) fn is_dormant(&self) -> bool {
        matches!(*self.lock(), Slot::Dormant(_))
    }

    /// Puts the run to sleep: the slot holds `dormant` instead of the
    /// addresses, unless something was posted that the conductor has not
    /// handled (`posted` ≠ `handled`), when `dormant` is given back.
    pub(crate) fn hibernate(
        &self,
        posted: &super::msg::Posted,
        handled: u64,
        dormant: Dormant,
    ) -> Result<(), Dormant> {
        let Some(rouse) = self.rouse() else {
            return Err(dormant);
        };
        let deadline = dormant.deadline;
        let taken = {
            let mut slot = self.lock();
            // Under the lock every post either was counted before (and is in
            // the mailbox) or finds the dormant entry.
            if posted.count() != handled || !matches!(*slot, Slot::Live(_)) {
                return Err(dormant);
            }
            std::mem::replace(&mut *slot, Slot::Dormant(dormant))
        };
        // Dropped outside the lock: the last address frees the mailboxes.
        drop(taken);
        rouse.hibernated(self, deadline);
        Ok(())
    }

    /// Fills a run's slot, before any conductor, with `dormant`: a resumed
    /// run brought back hibernated. Its deadline goes to the alarms as on
    /// any hibernation.
    pub(crate) fn rest(&self, dormant: Dormant) {
        let deadline = dormant.deadline;
        *self.lock() = Slot::Dormant(dormant);
        if let Some(rouse) = self.rouse() {
            rouse.hibernated(self, deadline);
        }
    }

    /// Posts `msg` to the run: cast to its conductor, or queued while it
    /// wakes (a hibernated run starts waking).
    pub(crate) fn post(&self, msg: ConductorMsg) -> Posting {
        self.post_with(|| msg)
    }

    /// [`LiveActors::post`] of the message `make` builds, only if the run
    /// takes it: `make` runs under the slot's lock, so whatever it stores
    /// (an input's inbox row) is queued before the run can let its lease go,
    /// or not at all.
    pub(crate) fn post_with(&self, make: impl FnOnce() -> ConductorMsg) -> Posting {
        let mut slot = self.lock();
        let msg = match &*slot {
            Slot::Leaving => return Posting::LetGo,
            Slot::Gone if self.0.let_go.load(Ordering::SeqCst) => return Posting::LetGo,
            Slot::Gone => return Posting::Stopped,
            Slot::Live(_) | Slot::Dormant(_) | Slot::Waking(_) => make(),
        };
        match &mut *slot {
            Slot::Live(live) => match live.conductor.cast(msg) {
                Ok(()) => Posting::Sent,
                Err(_) => Posting::Stopped,
            },
            Slot::Waking(queued) => {
                queued.push(msg);
                Posting::Sent
            }
            Slot::Dormant(_) => {
                let Slot::Dormant(dormant) = std::mem::replace(&mut *slot, Slot::Waking(vec![msg]))
                else {
                    return Posting::Stopped;
                };
                drop(slot);
                self.rouse_with(dormant);
                Posting::Sent
            }
            Slot::Gone => Posting::Stopped,
            Slot::Leaving => Posting::LetGo,
        }
    }

    /// Starts letting a hibernated run's lease go: its dormant entry, if it
    /// still sleeps (an input that came first woke it: `None`). From now on
    /// nothing is posted to it ([`Posting::LetGo`]).
    pub(crate) fn begin_let_go(&self) -> Option<Dormant> {
        let mut slot = self.lock();
        if !matches!(*slot, Slot::Dormant(_)) {
            return None;
        }
        match std::mem::replace(&mut *slot, Slot::Leaving) {
            Slot::Dormant(dormant) => Some(dormant),
            other @ (Slot::Gone | Slot::Live(_) | Slot::Waking(_) | Slot::Leaving) => {
                *slot = other;
                None
            }
        }
    }

    /// The run's lease is let go: it has left this process, with no outcome
    /// here; its waiters learn why ([`OutcomeRx::let_go`]).
    pub(crate) fn let_go_done(&self) {
        let shared = &self.0;
        *self.lock() = Slot::Gone;
        shared.let_go.store(true, Ordering::SeqCst);
        shared.lost.store(true, Ordering::SeqCst);
        let rouse = self.rouser().take();
        shared.woke.notify_waiters();
        drop(rouse);
    }

    /// Starts waking a hibernated run (nothing to post: an alarm, a human's
    /// decision); `false` unless it was hibernated.
    pub(crate) fn wake(&self) -> bool {
        let mut slot = self.lock();
        if !matches!(*slot, Slot::Dormant(_)) {
            return false;
        }
        let Slot::Dormant(dormant) = std::mem::replace(&mut *slot, Slot::Waking(Vec::new())) else {
            return false;
        };
        drop(slot);
        self.rouse_with(dormant);
        true
    }

    fn rouse_with(&self, dormant: Dormant) {
        match self.rouse() {
            Some(rouse) => rouse.rouse(self.clone(), dormant),
            None => self.fail_wake(),
        }
    }

    /// A wake that failed: the run is gone from this process (its stored
    /// record stays unfinished, for a resume).
    pub(crate) fn fail_wake(&self) {
        *self.lock() = Slot::Gone;
        let rouse = self.rouser().take();
        self.0.woke.notify_waiters();
        drop(rouse);
    }

    /// The live addresses, waking a hibernated run and waiting for it;
    /// `None` once the run has stopped.
    pub(crate) async fn awake(&self) -> Option<Live> {
        loop {
            let notified = self.0.woke.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let slot = self.lock();
                match &*slot {
                    Slot::Live(live) => return Some(Live::clone(live)),
                    Slot::Gone | Slot::Leaving => return None,
                    Slot::Dormant(_) | Slot::Waking(_) => {}
                }
            }
            self.wake();
            notified.await;
        }
    }

    /// The last stored state of a hibernated run.
    pub(crate) fn dormant_snapshot(&self) -> Option<RunSnapshot> {
        if !self.is_dormant() {
            return None;
        }
        self.rouse()?.stored_snapshot()
    }

    /// A restarted executor's address replaces the dead one's.
    pub(crate) fn replace_executor(&self, executor: &ActorRef<ExecutorMsg>) {
        if let Slot::Live(live) = &mut *self.lock() {
            live.actors.executor = executor.clone();
        }
    }

    /// Empties the slot and runs `publish` (the outcome's) before anyone can
    /// look again: whoever finds no actors finds the outcome, and whoever sees
    /// the outcome finds no actors.
    pub(crate) fn release_with(&self, publish: impl FnOnce()) {
        let taken = {
            let mut slot = self.lock();
            let taken = std::mem::take(&mut *slot);
            publish();
            taken
        };
        // A stopped run never wakes: its waker (which holds a handle) goes.
        let rouse = self.rouser().take();
        self.0.woke.notify_waiters();
        drop(rouse);
        // Dropped outside the lock: the last address frees the mailboxes.
        drop(taken);
    }

    /// `f` on the addresses, or `None` unless the run runs (stopped, or
    /// hibernated).
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Live) -> R) -> Option<R> {
        match &*self.lock() {
            Slot::Live(live) => Some(f(live)),
            Slot::Gone | Slot::Dormant(_) | Slot::Waking(_) | Slot::Leaving => None,
        }
    }

    /// The conductor, while the run runs.
    pub(crate) fn conductor(&self) -> Option<ConductorPost> {
        self.with(|l| l.conductor.clone())
    }

    /// The state keeper, while the run runs.
    pub(crate) fn state(&self) -> Option<ActorRef<StateMsg>> {
        self.with(|l| l.actors.state.clone())
    }

    /// The budget supervisor, while the run runs.
    pub(crate) fn budget(&self) -> Option<ActorRef<BudgetMsg>> {
        self.with(|l| l.actors.budget.clone())
    }
}

/// The run's four actors, as spawned. For embedders that want actor-level
/// access (supervision, diagnostics, killing one to test a crash); their
/// message types stay private, so a cell can be watched or stopped but not
/// sent to. The executor may be replaced by a restart later (a handle's next
/// `actors()` gives the new one); the others live as long as the run. Cells
/// kept after the run stopped keep their mailboxes allocated: drop them.
#[derive(Debug, Clone)]
pub struct RunActors {
    /// The policy actor.
    pub policy: ActorCell,
    /// The tool executor.
    pub executor: ActorCell,
    /// The state keeper.
    pub state: ActorCell,
    /// The budget supervisor.
    pub budget: ActorCell,
}

impl From<&ActorRefs> for RunActors {
    fn from(refs: &ActorRefs) -> RunActors {
        RunActors {
            policy: refs.policy.get_cell(),
            executor: refs.executor.get_cell(),
            state: refs.state.get_cell(),
            budget: refs.budget.get_cell(),
        }
    }
}
