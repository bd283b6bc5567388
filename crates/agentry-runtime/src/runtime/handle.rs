//! [`RunHandle`]: what an embedder holds on one run — its outcome, its events,
//! the inputs it sends, and the human decisions it makes on parked calls.
// Size: the whole handle an embedder holds, one short method per operation.

use std::sync::Arc;

use agentry_protocol::event::EventRecord;
use agentry_protocol::state::{PendingApproval, RunSnapshot};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::RunInput;
use agentry_tools::proc::Fenced;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::about::RunAbout;
use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::conductor::{ConductorMsg, Lineage, LiveActors, Posting, RunActors, RunOutcome};
use crate::config::TreeLimits;
use crate::durable::RunLog;
use crate::error::RuntimeError;
use crate::events::EventSink;
use crate::inbox::{InboxGauge, takes_slot};
use crate::interrupt::StepCut;
use crate::registry::Grants;
use crate::state::{AppliedAt, ApprovalDecision, HumanInputError, StateMsg};

/// A handle on one run. Cloneable; every clone can wait for the outcome.
/// One pointer: its clones (an embedder's, a hibernated run's waker's)
/// share one allocation of its parts.
#[derive(Debug, Clone)]
pub struct RunHandle(Arc<RunParts>);

impl std::ops::Deref for RunHandle {
    type Target = RunParts;

    fn deref(&self) -> &RunParts {
        &self.0
    }
}

impl RunHandle {
    pub(super) fn from_parts(parts: RunParts) -> RunHandle {
        RunHandle(Arc::new(parts))
    }
}

/// What every clone of a [`RunHandle`] shares. Not nameable outside the
/// crate: its fields are the runtime's.
#[derive(Debug)]
pub struct RunParts {
    pub(super) run_id: Arc<str>,
    /// The run's actors while it runs (none once it has stopped).
    pub(super) live: LiveActors,
    /// Cancelling it interrupts the step in progress (the conductor's mailbox is
    /// busy until the step ends, so a message alone would wait behind it).
    pub(super) run_token: CancellationToken,
    /// Cut by [`RunHandle::interrupt`]: the step in progress, not the run.
    pub(super) cut: StepCut,
    /// Boxed in the channel: a run that runs holds ~1 KB less.
    pub(super) outcome: crate::conductor::OutcomeRx,
    pub(super) events: EventSink,
    /// Where the run sits in its agent tree.
    pub(super) lineage: Lineage,
    /// The tree's depth and fan-out limits (the root's).
    pub(super) tree: TreeLimits,
    /// The run's grants (a child may not hold more).
    pub(super) grants: Grants,
    /// Where a durable run commits (its timers too).
    pub(super) log: Option<RunLog>,
    /// A durable run's next inbox position, shared by every clone.
    pub(super) inbox: Option<std::sync::atomic::AtomicU64>,
    /// The run's inbox bound, shared with its conductor (see [`crate::inbox`]).
    pub(super) gauge: Arc<InboxGauge>,
    /// Its name, goal and model, for its tree.
    pub(super) about: RunAbout,
    /// The children it started.
    pub(super) children: ChildList,
}

impl RunHandle {
    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Waits for the run to stop. [`RuntimeError::TakenOver`] when another
    /// process took the run over (lease mode): this process then stopped
    /// working on it, and it has no outcome here; [`RuntimeError::LetGo`]
    /// when it hibernated in lease mode and let its lease go.
    pub async fn wait(&self) -> Result<RunOutcome, RuntimeError> {
        self.outcome.wait().await.cloned().ok_or_else(|| {
            let run_id = self.run_id.to_string();
            match self.outcome.taken_over() {
                Some(taken) => RuntimeError::TakenOver {
                    run_id,
                    epoch: taken.epoch,
                    owner: taken.owner.clone(),
                },
                None if self.outcome.let_go() => RuntimeError::LetGo { run_id },
                None => RuntimeError::Lost { run_id },
            }
        })
    }

    /// Whether `other` is a clone of this handle: the same run in this
    /// process since it started or resumed (not a later resume of it).
    pub fn is_clone_of(&self, other: &RunHandle) -> bool {
        Arc::ptr_eq(&self.run_id, &other.run_id)
    }

    /// The outcome, if the run has stopped.
    pub fn outcome(&self) -> Option<RunOutcome> {
        self.outcome.get().cloned()
    }

    /// A stream of run events, each with its sequence number. With
    /// `events_from_start` (the default) the first call gets every event from the
    /// start of the run; later calls see events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<EventRecord> {
        self.events
            .subscribe()
            // Only a poisoned lock gets here; a closed receiver ends at once.
            .unwrap_or_else(|| broadcast::channel(1).1)
    }

    /// Aborts the run: in-flight tools are cancelled and it stops with `user_abort`.
    pub fn abort(&self) {
        self.run_token.cancel();
        if let Some(conductor) = self.live.conductor() {
            let _ = conductor.cast(ConductorMsg::Abort(StopReason::UserAbort));
        } else {
            // A hibernated run wakes to stop: its cancelled token ends it.
            self.live.wake();
        }
    }

    /// Interrupts the step in progress and redirects the run with `message`:
    /// the model's streaming turn is dropped, running tools are cancelled as at
    /// a deadline (process groups killed), calls not yet started never start,
    /// and a call waiting for approval is withdrawn; each such call's result
    /// says the user interrupted it (`ECANCELED`). Calls already finished keep
    /// their results. An irreversible call that had started has an unknown
    /// outcome: it waits for a human's settlement (`awaiting_decision`) before
    /// the step ends. Then `message` enters the session (through the state
    /// keeper, numbered with every other input) and the run goes on with the
    /// next decision. With no step in progress this is
    /// [`RunHandle::send_message`] (a sleeping event-driven agent wakes for it).
    pub fn interrupt(&self, message: impl Into<String>) -> Result<(), RuntimeError> {
        self.cut_with(RunInput::Interrupt {
            text: Some(message.into()),
        })
        .map(|_| ())
    }

    /// Interrupts the step in progress as [`RunHandle::interrupt`] does, but
    /// with nothing to say yet: the run is paused after the cut step, until
    /// [`RunHandle::resume`] (send the user's words with
    /// [`RunHandle::send_message`] first). For a front end that asks the user
    /// what to say once the work has stopped, as `agentry run` does on Ctrl-C:
    /// [`Interrupted::applied`] tells it when the run has stopped, so that
    /// whatever the user does at its prompt (abort, say) comes after the
    /// interrupt, never races it.
    pub fn interrupt_and_pause(&self) -> Result<Interrupted, RuntimeError> {
        let cut = self.cut_with(RunInput::Interrupt { text: None })?;
        Ok(Interrupted {
            run_id: Arc::clone(&self.run_id),
            cut,
            applied: self.cut.watch_applied(),
            outcome: self.outcome.clone(),
        })
    }

    /// Posts an interrupt's input and cuts the step, as one act (see
    /// [`StepCut`]): the cut's number.
    fn cut_with(&self, input: RunInput) -> Result<u64, RuntimeError> {
        self.cut.cut_with(|| self.input(input))
    }

    /// Sends a user message into the run. It enters the session (through the state
    /// keeper, numbered with every other input) before the next decision; an
    /// event-driven agent wakes for it.
    pub fn send_message(&self, text: impl Into<String>) -> Result<(), RuntimeError> {
        self.input(RunInput::Message { text: text.into() })
    }

    /// Injects a custom event (a webhook payload, say) as a typed message: it enters
    /// the session as `{"role": "event", "name": ..., "payload": ...}` at the next
    /// safe point and wakes an event-driven agent.
    pub fn inject(
        &self,
        name: impl Into<String>,
        payload: serde_json::Value,
    ) -> Result<(), RuntimeError> {
        self.input(RunInput::Event {
            name: name.into(),
            payload,
        })
    }

    /// Delivers a custom event after `delay` (a one-shot timer), unless the run has
    /// stopped by then. A timer that fires while the run's inbox is full waits
    /// for a slot (see [`RunConfig::inbox_capacity`](crate::RunConfig::inbox_capacity)):
    /// its event comes late, never lost; a durable run's stays in the store
    /// meanwhile.
    pub fn after(
        &self,
        delay: std::time::Duration,
        name: impl Into<String>,
        payload: serde_json::Value,
    ) {
        let timer = agentry_store::TimerRecord {
            timer_id: uuid::Uuid::now_v7().to_string(),
            due_at_ms: agentry_protocol::now_millis()
                .saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)),
            name: name.into(),
            payload,
        };
        if let Some(log) = &self.log {
            // Queued in order: on disk before anything the run commits later.
            log.submit(vec![agentry_store::Write::SetTimer {
                run_id: log.run_id.to_string(),
                timer: timer.clone(),
            }]);
        }
        self.arm_timer(timer);
    }

    /// Schedules a (possibly restored) timer; a durable run's timer is removed
    /// from the store in the same commit as the event it delivers.
    pub(super) fn arm_timer(&self, timer: agentry_store::TimerRecord) {
        // A stopped run's timer would never fire.
        if self.outcome.get().is_some() {
            return;
        }
        // Posted through the run's slot, not to one conductor: a timer that
        // fires while the run hibernates wakes it.
        let live = self.live.clone();
        let token = self.run_token.clone();
        let delay = std::time::Duration::from_millis(
            timer
                .due_at_ms
                .saturating_sub(agentry_protocol::now_millis()),
        );
        let durable = self.log.is_some();
        let gauge = Arc::clone(&self.gauge);
        tokio::spawn(async move {
            let due = async {
                tokio::time::sleep(delay).await;
                gauge.take().await;
            };
            tokio::select! {
                _ = token.cancelled() => {}
                () = due => {
                    let input = RunInput::Event {
                        name: timer.name,
                        payload: timer.payload,
                    };
                    let msg = if durable {
                        ConductorMsg::StoredInput {
                            source: crate::state::InputSource::Timer(timer.timer_id),
                            input,
                        }
                    } else {
                        ConductorMsg::Input(input)
                    };
                    match live.post(msg) {
                        Posting::Sent => {}
                        Posting::Stopped | Posting::LetGo => gauge.release(1),
                    }
                }
            }
        });
    }

    /// Lets the step in progress finish and starts no other, for a service
    /// that is going away: returns once the run is between steps and takes
    /// nothing more in (or has stopped). Nothing of this is recorded: follow
    /// it with [`Runtime::abandon`](crate::Runtime::abandon) and a durable run
    /// resumes in the next process at its next step, as it was (not paused).
    /// Only an abort still ends a drained run. A step that waits on a human
    /// (an approval, a decision) or on a child does not finish by itself:
    /// bound the wait.
    pub async fn drain(&self) {
        let (drained, done) = tokio::sync::oneshot::channel();
        let Some(conductor) = self.live.conductor() else {
            return;
        };
        if conductor.cast(ConductorMsg::Drain(drained)).is_ok() {
            // Dropped unanswered when the run stops first: drained too.
            let _ = done.await;
        }
    }

    /// Pauses the run at its next safe point: the step in progress finishes, no new
    /// one starts. The wall clock keeps running; the deadline still applies.
    pub fn pause(&self) -> Result<(), RuntimeError> {
        self.input(RunInput::Pause)
    }

    /// Resumes a paused run.
    pub fn resume(&self) -> Result<(), RuntimeError> {
        self.input(RunInput::Resume)
    }

    /// How many messages, custom events and fired timers the run holds that no
    /// decision has taken yet, and its capacity for them.
    pub fn inbox_usage(&self) -> InboxUsage {
        InboxUsage {
            held: self.gauge.held(),
            capacity: self.gauge.capacity(),
        }
    }

    fn input(&self, input: RunInput) -> Result<(), RuntimeError> {
        if self.outcome.get().is_some() {
            return Err(RuntimeError::Stopped {
                run_id: self.run_id.to_string(),
            });
        }
        // The slot is taken before anything is queued or stored, so a refused
        // input leaves no trace; a control input takes none.
        if takes_slot(&input) && !self.gauge.try_take() {
            return Err(RuntimeError::InboxFull {
                run_id: self.run_id.to_string(),
                capacity: self.gauge.capacity(),
            });
        }
        let slot = takes_slot(&input);
        self.post(input).inspect_err(|_| {
            if slot {
                self.gauge.release(1);
            }
        })
    }

    /// Posts an accepted input (its slot, if it takes one, already taken).
    fn post(&self, input: RunInput) -> Result<(), RuntimeError> {
        let make = || match (&self.log, &self.inbox) {
            (Some(log), Some(next)) => {
                // Into the run's stored inbox first (queued at the writer, so on
                // disk before anything the run commits later), out of it in the
                // commit that applies it: a crash in between re-delivers it.
                let seq = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                log.submit(vec![agentry_store::Write::Enqueue {
                    run_id: log.run_id.to_string(),
                    seq,
                    input: serde_json::to_value(&input).unwrap_or_default(),
                }]);
                ConductorMsg::StoredInput {
                    source: crate::state::InputSource::Inbox(seq),
                    input,
                }
            }
            _ => ConductorMsg::Input(input),
        };
        match self.live.post_with(make) {
            Posting::Sent => Ok(()),
            Posting::Stopped => Err(RuntimeError::Stopped {
                run_id: self.run_id.to_string(),
            }),
            Posting::LetGo => Err(RuntimeError::LetGo {
                run_id: self.run_id.to_string(),
            }),
        }
    }

    /// Approves a call that is waiting for a human; it then runs. Returns the
    /// decision's input sequence number.
    pub async fn approve(&self, tool_call_id: &str) -> Result<u64, RuntimeError> {
        self.decide(tool_call_id, true, None).await
    }

    /// Denies a waiting call: the model gets `EPERM` for it, with the reason.
    pub async fn deny(
        &self,
        tool_call_id: &str,
        reason: Option<String>,
    ) -> Result<u64, RuntimeError> {
        self.decide(tool_call_id, false, reason).await
    }

    /// Answers the question a running call put to a human (a remote A2A
    /// agent's INPUT_REQUIRED, with `[[tools.a2a]] input_required =
    /// "human"`; the call waits like an approval, the question as its
    /// preview): the call sends `answer` on to the remote agent. `approve`
    /// passes the question back to the model, `deny` refuses it.
    pub async fn answer(&self, tool_call_id: &str, answer: &str) -> Result<u64, RuntimeError> {
        self.decide(tool_call_id, true, Some(answer.to_string()))
            .await
    }

    async fn decide(
        &self,
        tool_call_id: &str,
        approved: bool,
        reason: Option<String>,
    ) -> Result<u64, RuntimeError> {
        let decision = ApprovalDecision {
            approved,
            reason,
            applied: AppliedAt::default(),
        };
        let id = tool_call_id.to_string();
        self.human_input(
            |reply| StateMsg::Resolve {
                tool_call_id: id,
                decision,
                reply,
            },
            |run_id, message| RuntimeError::NoPendingApproval { run_id, message },
        )
        .await
    }

    /// Sends a human's decision on a parked call to the state keeper; `missing`
    /// builds the error when no such call is parked.
    async fn human_input(
        &self,
        msg: impl FnOnce(ractor::RpcReplyPort<Result<u64, HumanInputError>>) -> StateMsg,
        missing: impl FnOnce(String, String) -> RuntimeError,
    ) -> Result<u64, RuntimeError> {
        let stopped = || RuntimeError::Stopped {
            run_id: self.run_id.to_string(),
        };
        let state = match self.live.state() {
            Some(state) => state,
            // A hibernated run wakes for a human's decision.
            None => self.live.awake().await.ok_or_else(stopped)?.actors.state,
        };
        match state.call(msg, None).await {
            Ok(ractor::rpc::CallResult::Success(Ok(seq))) => Ok(seq),
            Ok(ractor::rpc::CallResult::Success(Err(e))) => {
                Err(missing(self.run_id.to_string(), e.to_string()))
            }
            _ => Err(stopped()),
        }
    }

    /// Settles a call a crash interrupted (the run is `awaiting_decision`):
    /// `Happened` records it as done without running it, `Retry` runs it again,
    /// `Skip` tells the model it was not done. Returns the input's sequence number
    /// once the settlement is on disk.
    pub async fn settle(
        &self,
        tool_call_id: &str,
        settlement: agentry_protocol::state::Settlement,
    ) -> Result<u64, RuntimeError> {
        let id = tool_call_id.to_string();
        self.human_input(
            |reply| StateMsg::Settle {
                tool_call_id: id,
                settlement,
                reply,
            },
            |run_id, message| RuntimeError::NoPendingDecision { run_id, message },
        )
        .await
    }

    /// Calls a crash interrupted, waiting for [`RunHandle::settle`].
    pub async fn pending_decisions(&self) -> Vec<PendingApproval> {
        self.snapshot()
            .await
            .map(|s| s.pending_decisions)
            .unwrap_or_default()
    }

    /// Calls waiting for a human decision.
    pub async fn pending_approvals(&self) -> Vec<PendingApproval> {
        self.snapshot()
            .await
            .map(|s| s.pending_approvals)
            .unwrap_or_default()
    }

    /// The run's grants.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The parent run's id, for a child.
    pub fn parent_id(&self) -> Option<&str> {
        self.lineage.parent.as_ref().map(|p| p.run_id.as_ref())
    }

    /// Depth in the agent tree (the root is 0).
    pub fn depth(&self) -> u32 {
        self.lineage.depth
    }

    /// The W3C traceparent of this run (one trace id per tree).
    pub fn traceparent(&self) -> String {
        self.lineage.traceparent(&self.run_id)
    }

    /// The budget right now, including what descendants have spent (every spend
    /// in a child is charged to each ancestor).
    pub async fn budget(&self) -> Option<agentry_protocol::BudgetSnapshot> {
        ask(&self.live.budget()?, BudgetMsg::Snapshot).await.ok()
    }

    /// The most a child of this run could be given now, per dimension the run
    /// limits (its reserve for waiting and finishing kept; `None`: unlimited).
    /// `None` once the run has stopped.
    pub async fn delegable(&self) -> Option<agentry_protocol::budget::BudgetLimits> {
        ask(&self.live.budget()?, BudgetMsg::Delegable).await.ok()
    }

    /// For a resumed run ([`Runtime::resume`](crate::Runtime::resume)): the
    /// process groups and processes of an earlier attempt the resume killed
    /// before it settled any call (empty when nothing was left running);
    /// `None` for a run started, not resumed, in this process.
    pub fn fenced(&self) -> Option<&Fenced> {
        self.about.fenced.get().map(|f| &**f)
    }

    /// The run's actors (see [`RunActors`]); `None` once the run has
    /// stopped or while it is hibernated (its actors are gone, their
    /// mailboxes freed).
    pub fn actors(&self) -> Option<RunActors> {
        self.live.with(|l| RunActors::from(&l.actors))
    }

    /// Key fields of the run state, while it runs.
    pub async fn snapshot(&self) -> Option<RunSnapshot> {
        if let Some(state) = self.live.state()
            && let Ok(ractor::rpc::CallResult::Success(s)) =
                state.call(StateMsg::Snapshot, None).await
        {
            return Some(s);
        }
        // A hibernated run answers from its last stored state, unwoken.
        if let Some(s) = self.live.dormant_snapshot() {
            return Some(s);
        }
        self.outcome().map(|o| o.state)
    }

    /// Whether the run is hibernated now (see
    /// [`RunConfig::hibernate_after`](crate::RunConfig::hibernate_after)): its
    /// actors are gone, and the next input wakes it.
    pub fn hibernated(&self) -> bool {
        self.live.is_dormant()
    }
}

/// A run's inbox, as [`RunHandle::inbox_usage`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxUsage {
    /// Inputs accepted that no decision has taken yet.
    pub held: usize,
    /// The most it holds ([`RunConfig::inbox_capacity`](crate::RunConfig::inbox_capacity)).
    pub capacity: usize,
}

/// A child as its parent's handle knows it: its handle, and whether its end has
/// been recorded (in the store, for a durable parent).
#[derive(Debug, Clone)]
pub(crate) struct ChildEntry {
    pub(crate) handle: RunHandle,
    pub(crate) recorded: watch::Receiver<bool>,
}

/// The children a run started, in spawn order.
#[derive(Debug, Default)]
pub(crate) struct ChildList(std::sync::Mutex<Vec<ChildEntry>>);

impl ChildList {
    pub(crate) fn push(&self, entry: ChildEntry) {
        if let Ok(mut list) = self.0.lock() {
            list.push(entry);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().map_or(true, |l| l.is_empty())
    }

    pub(crate) fn entries(&self) -> Vec<ChildEntry> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// An interrupt posted by [`RunHandle::interrupt_and_pause`].
#[derive(Debug)]
pub struct Interrupted {
    run_id: Arc<str>,
    /// The cut's number: applied once the conductor has applied this many.
    cut: u64,
    applied: watch::Receiver<u64>,
    outcome: crate::conductor::OutcomeRx,
}

impl Interrupted {
    /// Waits until the run has applied the interrupt: the step it cut is
    /// recorded, the interrupt's input is in the session and the trace (and,
    /// for a durable run, on disk), and the run is paused. A run that stops
    /// first (its deadline, an abort) is [`RuntimeError::Stopped`].
    pub async fn applied(mut self) -> Result<(), RuntimeError> {
        let cut = self.cut;
        tokio::select! {
            // A run that applied it and then stopped has applied it.
            biased;
            Ok(_) = self.applied.wait_for(|n| *n >= cut) => Ok(()),
            _ = self.outcome.wait() => Err(RuntimeError::Stopped {
                run_id: self.run_id.to_string(),
            }),
        }
    }
}
