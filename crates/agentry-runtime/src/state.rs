//! The state keeper: the only writer of run state.
//!
//! Every change is a [`StateMsg::Apply`] carrying one [`StateUpdate`]; the actor
//! applies them one at a time in mailbox order and bumps the version by one per
//! update, so updates that arrive together are serialized, never lost.

use std::collections::BTreeSet;
use std::sync::Arc;

use agentry_protocol::budget::Usage;
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::state::{
    ControlState, PendingApproval, RunSnapshot, RunStatus, SessionEntry, Settlement, TaskState,
    WorldChange, WorldState,
};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::{RunInput, TraceLine, TraceStep};
use agentry_store::{Checkpoint, Write};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::durable::{Durability, Ending, InFlight, KEPT_FINGERPRINTS, Progress, RunLog};
use crate::trace::TraceSender;

/// One state change.
#[derive(Debug, Clone)]
pub enum StateUpdate {
    /// A user message enters the session.
    UserMessage {
        /// Text.
        text: String,
    },
    /// An input from outside: counted, given its sequence number, and (for
    /// messages, events and ticks) added to the session.
    Input(RunInput),
    /// An input delivered by a stored timer or from the run's stored inbox:
    /// applied like [`StateUpdate::Input`], and the timer or inbox entry leaves
    /// the store in the same commit.
    StoredInput {
        /// Where it was stored.
        source: InputSource,
        /// The input.
        input: RunInput,
    },
    /// A stored inbox entry that turned out to change nothing (a pause of a
    /// paused run): it only leaves the store. No version bump.
    Discard(u64),
    /// The run's status changed (paused, sleeping, running).
    Status(RunStatus),
    /// Timer ticks were skipped.
    TicksSkipped(u64),
    /// A step was decided and is about to act (recorded only for durable runs, so
    /// a resumed run acts on the same decision instead of asking the policy again).
    Decided(Box<InFlight>),
    /// A whole step: the decision, its results, and the spend, applied atomically.
    Step {
        /// Step number.
        step: u64,
        /// What the policy decided.
        decision: Arc<Decision>,
        /// Results, in request order.
        results: Vec<Arc<ResultEnvelope>>,
        /// Total spend after the step.
        spent: Usage,
        /// The answer the model gave at this step, if any.
        answer: Option<String>,
        /// Tool calls this run has made itself, after the step.
        tool_calls: u64,
        /// The step's fingerprint (no-progress window).
        fingerprint: u64,
        /// The step started a call that must not run twice: a durable run commits
        /// the step before acknowledging it in every mode.
        side_effects: bool,
        /// The step ends the run (a resumed run finishes it instead of stepping).
        ending: Option<Ending>,
    },
    /// The run stopped.
    Stopped {
        /// Why.
        reason: StopReason,
        /// Total spend at the stop.
        spent: Usage,
    },
}

/// Where a durable run keeps an input until it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    /// A one-shot timer (`RunHandle::after`), by id.
    Timer(String),
    /// The run's inbox (an input a handle accepted), by position.
    Inbox(u64),
}

/// What applying an update changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// State version after the update.
    pub version: u64,
    /// Content digest of the world layer after the update (path → sha256).
    pub world_digest: Arc<str>,
    /// Session length after the update.
    pub session_len: usize,
    /// Inputs applied so far; for an `Input` update, its sequence number.
    pub inputs: u64,
}

/// A human's decision on a pending call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    /// Approved or denied.
    pub approved: bool,
    /// Why, for a denial.
    pub reason: Option<String>,
    /// Input sequence number and state version the decision was applied at (set by
    /// the state keeper).
    pub applied: (u64, u64),
}

/// Where a settlement goes: the decision and the (input sequence number, state
/// version) it was applied at.
pub type SettlementPort = RpcReplyPort<(Settlement, (u64, u64))>;

/// Messages the state keeper accepts.
pub enum StateMsg {
    /// Apply one update; the reply says what changed, or (for a durable run) why
    /// the update could not be committed.
    Apply(StateUpdate, Option<RpcReplyPort<Result<Applied, String>>>),
    /// [`StateMsg::Apply`] of a step whose trace record the state keeper
    /// completes with the state after the update and queues on the trace, once
    /// applied (so the trace needs no round trip of its own).
    ApplyTraced {
        /// The step's update.
        update: StateUpdate,
        /// The step's record, but for `state_version` and `state`.
        record: Box<TraceStep>,
        /// The run's trace.
        trace: TraceSender,
        /// Where the outcome goes, when the conductor waits for it.
        reply: Option<RpcReplyPort<Result<Applied, String>>>,
    },
    /// The key fields of the state.
    Snapshot(RpcReplyPort<RunSnapshot>),
    /// Session entries from index `from` on.
    Session(usize, RpcReplyPort<Vec<SessionEntry>>),
    /// Park a call until a human decides (sent by the executor). The decision
    /// comes back on the port; the call is visible in snapshots meanwhile.
    AwaitApproval(PendingApproval, RpcReplyPort<ApprovalDecision>),
    /// A human's decision on a pending call (from a run handle). Replies with the
    /// input's sequence number, or an error naming the unknown call.
    Resolve {
        /// The pending call.
        tool_call_id: String,
        /// The decision.
        decision: ApprovalDecision,
        /// Where the result goes.
        reply: RpcReplyPort<Result<u64, String>>,
    },
    /// Drop a pending call without a decision (its wait timed out or was cancelled).
    Withdraw(String),
    /// Park a call a crash interrupted until a human settles it (sent by the
    /// executor of a resumed run). `parked` is answered once the park is on disk.
    AwaitDecision {
        /// The call.
        pending: PendingApproval,
        /// Answered when the park is committed (or failed to be).
        parked: RpcReplyPort<Result<(), String>>,
        /// Where the settlement goes.
        decision: SettlementPort,
    },
    /// A human's settlement of a parked call (from a run handle). Replies with the
    /// input's sequence number, or an error naming the unknown call.
    Settle {
        /// The parked call.
        tool_call_id: String,
        /// What the human said.
        settlement: Settlement,
        /// Where the result goes.
        reply: RpcReplyPort<Result<u64, String>>,
    },
}

/// The run state, owned by the state keeper alone.
#[derive(Debug, Default)]
pub struct RunState {
    version: u64,
    world: WorldState,
    world_digest: Arc<str>,
    task: TaskState,
    session: Vec<SessionEntry>,
    control: ControlState,
    status: RunStatus,
    /// Calls waiting for a human, with the executor's port for the decision.
    pending: Vec<(PendingApproval, RpcReplyPort<ApprovalDecision>)>,
    /// Calls a crash interrupted, waiting for a human to settle them.
    unsettled: Vec<(PendingApproval, SettlementPort)>,
    inputs: u64,
    ticks_skipped: u64,
    /// What the conductor needs to continue the run.
    progress: Progress,
    /// Where a durable run's updates are committed.
    log: Option<RunLog>,
    /// Session entries already handed to the store.
    committed_len: usize,
    /// Timers and inbox entries whose input was applied, to remove from the store.
    consumed: Vec<InputSource>,
    /// Paths whose ref changed since the last traced step; `None` until this
    /// state keeper writes its first step line, which carries every ref (a
    /// resumed run's earlier lines may be lost with the process that wrote them).
    refs_untraced: Option<BTreeSet<String>>,
}

impl RunState {
    /// Initial state for a task: the goal is the first session entry.
    pub fn new(task: TaskState, control: ControlState) -> Self {
        let session = vec![SessionEntry::User {
            text: task.goal.clone(),
        }];
        let mut s = RunState {
            task,
            control,
            session,
            ..RunState::default()
        };
        s.world_digest = s.digest_world().into();
        s
    }

    /// The initial state of a run with this configuration.
    pub fn initial(config: &crate::config::RunConfig) -> Self {
        RunState::new(
            TaskState {
                task_id: config.task_id.clone(),
                goal: config.goal.clone(),
                accept: config.accept.clone(),
                answer: None,
                done: false,
            },
            ControlState {
                limits: config.limits,
                ..Default::default()
            },
        )
    }

    /// The state of a run read back from a store: the last committed checkpoint
    /// and session. Calls that were parked are parked again when their step is
    /// acted on again, so none are restored here.
    pub fn restore(snapshot: RunSnapshot, session: Vec<SessionEntry>, progress: Progress) -> Self {
        let status = match snapshot.status {
            RunStatus::AwaitingApproval | RunStatus::AwaitingDecision => RunStatus::Running,
            other => other,
        };
        let mut s = RunState {
            version: snapshot.version,
            world: snapshot.world,
            task: snapshot.task,
            committed_len: session.len(),
            session,
            control: snapshot.control,
            status,
            inputs: snapshot.inputs,
            ticks_skipped: snapshot.ticks_skipped,
            progress,
            ..RunState::default()
        };
        s.world_digest = s.digest_world().into();
        s
    }

    /// Commits every update of this run to `log` from now on.
    pub fn with_log(mut self, log: RunLog) -> Self {
        self.log = Some(log);
        self
    }

    /// What the conductor needs to continue the run.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    fn digest_world(&self) -> String {
        // The refs map is ordered, so the digest is canonical.
        let mut f = Fingerprinter::new();
        for (path, r) in &self.world.refs {
            f.str(path).str(&r.sha256);
        }
        f.finish_short()
    }

    /// Applies one update and bumps the version.
    pub fn apply(&mut self, update: StateUpdate) -> Applied {
        match update {
            StateUpdate::UserMessage { text } => self.session.push(SessionEntry::User { text }),
            StateUpdate::StoredInput { source, input } => {
                if self.log.is_some() {
                    self.consumed.push(source);
                }
                return self.apply(StateUpdate::Input(input));
            }
            StateUpdate::Discard(seq) => {
                if self.log.is_some() {
                    self.consumed.push(InputSource::Inbox(seq));
                }
                return self.applied();
            }
            StateUpdate::Input(input) => {
                self.inputs += 1;
                match input {
                    RunInput::Message { text } => self.session.push(SessionEntry::User { text }),
                    RunInput::Event { name, payload } => {
                        self.session.push(SessionEntry::Event { name, payload });
                    }
                    RunInput::Tick { n, skipped } => self.session.push(SessionEntry::Event {
                        name: "tick".to_string(),
                        payload: serde_json::json!({ "n": n, "skipped": skipped }),
                    }),
                    RunInput::Pause => self.status = RunStatus::Paused,
                    RunInput::Resume => self.status = RunStatus::Running,
                    // Recorded through `Resolve`/`Settle`, which also answer the executor.
                    RunInput::Approval { .. } | RunInput::Settlement { .. } => {}
                }
            }
            StateUpdate::Status(status) => self.status = status,
            StateUpdate::TicksSkipped(n) => self.ticks_skipped += n,
            StateUpdate::Decided(in_flight) => {
                self.progress.steps = in_flight.step;
                self.progress.in_flight = Some(*in_flight);
            }
            StateUpdate::Step {
                step,
                decision,
                results,
                spent,
                answer,
                tool_calls,
                fingerprint,
                side_effects: _,
                ending,
            } => {
                self.progress.steps = step;
                self.progress.ending = ending;
                self.progress.tool_calls = tool_calls;
                self.progress.in_flight = None;
                if self.log.is_some() {
                    let fps = &mut self.progress.fingerprints;
                    fps.push(fingerprint);
                    if fps.len() > KEPT_FINGERPRINTS {
                        fps.remove(0);
                    }
                }
                let mut world_changed = false;
                for r in results.iter().filter(|r| r.ok && !r.replayed) {
                    for reference in &r.refs {
                        let prev = self
                            .world
                            .refs
                            .insert(reference.path.clone(), reference.clone());
                        if prev.as_ref() != Some(reference) {
                            world_changed = true;
                            if let Some(untraced) = &mut self.refs_untraced {
                                untraced.insert(reference.path.clone());
                            }
                        }
                    }
                }
                if world_changed {
                    self.world.version += 1;
                    self.world_digest = self.digest_world().into();
                }
                self.session
                    .push(SessionEntry::Assistant { step, decision });
                self.session.extend(
                    results
                        .into_iter()
                        .map(|result| SessionEntry::Tool { result }),
                );
                self.control.spent = spent;
                if answer.is_some() {
                    self.task.answer = answer;
                }
            }
            StateUpdate::Stopped { reason, spent } => {
                self.control.stop_reason = Some(reason);
                self.control.spent = spent;
                self.task.done = reason == StopReason::Done;
                self.status = RunStatus::Stopped;
                // Nobody will decide these any more; dropping the ports tells the
                // executor, if it is still waiting.
                self.pending.clear();
                self.unsettled.clear();
            }
        }
        self.version += 1;
        self.applied()
    }

    fn applied(&self) -> Applied {
        Applied {
            version: self.version,
            world_digest: Arc::clone(&self.world_digest),
            session_len: self.session.len(),
            inputs: self.inputs,
        }
    }

    fn park(&mut self, pending: PendingApproval, port: RpcReplyPort<ApprovalDecision>) {
        self.pending.push((pending, port));
        self.status = RunStatus::AwaitingApproval;
        self.version += 1;
    }

    fn unpark(&mut self, tool_call_id: &str) -> Option<RpcReplyPort<ApprovalDecision>> {
        let i = self
            .pending
            .iter()
            .position(|(p, _)| p.call.id == tool_call_id)?;
        let (_, port) = self.pending.remove(i);
        if self.pending.is_empty() && self.status == RunStatus::AwaitingApproval {
            self.status = RunStatus::Running;
        }
        self.version += 1;
        Some(port)
    }

    /// Key fields, the whole world included.
    pub fn snapshot(&self) -> RunSnapshot {
        self.snapshot_with(self.world.clone())
    }

    /// Key fields for a trace step line: of the world, only the refs that
    /// changed since the previous step line (all of them in the first), so a
    /// run over thousands of files does not repeat its whole map every step.
    pub fn trace_snapshot(&mut self) -> RunSnapshot<WorldChange> {
        let refs_changed = match self.refs_untraced.replace(BTreeSet::new()) {
            None => self.world.refs.clone(),
            Some(paths) => paths
                .into_iter()
                .filter_map(|p| self.world.refs.get(&p).map(|r| (p, r.clone())))
                .collect(),
        };
        self.snapshot_with(WorldChange {
            version: self.world.version,
            refs_changed,
        })
    }

    fn snapshot_with<W>(&self, world: W) -> RunSnapshot<W> {
        RunSnapshot {
            version: self.version,
            world,
            task: self.task.clone(),
            session_len: self.session.len() as u64,
            control: self.control.clone(),
            status: self.status,
            pending_approvals: self.pending.iter().map(|(p, _)| p.clone()).collect(),
            pending_decisions: self.unsettled.iter().map(|(p, _)| p.clone()).collect(),
            inputs: self.inputs,
            ticks_skipped: self.ticks_skipped,
        }
    }

    /// Content digest of the world layer.
    pub fn world_digest(&self) -> &str {
        &self.world_digest
    }

    /// The session entries.
    pub fn session(&self) -> &[SessionEntry] {
        &self.session
    }

    /// The writes that bring the store up to this state: new session entries and
    /// the checkpoint.
    fn writes(&mut self, run_id: &str) -> Vec<Write> {
        let mut writes = Vec::with_capacity(2);
        if self.session.len() > self.committed_len {
            writes.push(Write::AppendSession {
                run_id: run_id.to_string(),
                first: self.committed_len as u64,
                entries: self.session[self.committed_len..].to_vec(),
            });
            self.committed_len = self.session.len();
        }
        for source in self.consumed.drain(..) {
            writes.push(match source {
                InputSource::Timer(timer_id) => Write::ClearTimer {
                    run_id: run_id.to_string(),
                    timer_id,
                },
                InputSource::Inbox(seq) => Write::Dequeue {
                    run_id: run_id.to_string(),
                    seq,
                },
            });
        }
        writes.push(Write::Checkpoint {
            run_id: run_id.to_string(),
            checkpoint: Checkpoint {
                snapshot: self.snapshot(),
                progress: serde_json::to_value(&self.progress).unwrap_or_default(),
            },
        });
        // A stopped run is nobody's: its owner lets go in the stop's commit.
        if self.status == RunStatus::Stopped
            && let Some(log) = &self.log
        {
            writes.push(Write::Release {
                run_id: run_id.to_string(),
                token: log.owner_token.to_string(),
            });
        }
        writes
    }

    /// Hands the state to the store (durable runs only): waits for the commit when
    /// `wait`, else queues it behind everything queued before.
    async fn persist(&mut self, wait: bool) -> Result<(), String> {
        let Some(log) = self.log.clone() else {
            return Ok(());
        };
        let writes = self.writes(&log.run_id);
        if wait {
            log.writer.commit(writes).await.map_err(|e| e.to_string())
        } else {
            log.writer.submit(writes);
            Ok(())
        }
    }

    /// Applies an update and hands it to the store (durable runs), waiting for
    /// the commit when the update must be on disk before it is acknowledged.
    async fn apply_committed(&mut self, update: StateUpdate) -> Result<Applied, String> {
        let wait = self.log.is_some() && self.must_wait(&update);
        let applied = self.apply(update);
        self.persist(wait).await.map(|()| applied)
    }

    /// Whether an update must be on disk before it is acknowledged.
    fn must_wait(&self, update: &StateUpdate) -> bool {
        let grouped = self
            .log
            .as_ref()
            .is_some_and(|l| l.mode == Durability::Grouped);
        match update {
            // Nobody waits for a decision: if it is lost, the step is decided again,
            // and it is on disk before any intent that depends on it (order).
            StateUpdate::Decided(_) | StateUpdate::TicksSkipped(_) => false,
            StateUpdate::Step {
                side_effects,
                ending,
                ..
            } => !grouped || *side_effects || ending.is_some(),
            StateUpdate::Status(RunStatus::Sleeping | RunStatus::Running) => !grouped,
            _ => true,
        }
    }

    fn park_decision(&mut self, pending: PendingApproval, port: SettlementPort) {
        self.unsettled.push((pending, port));
        self.status = RunStatus::AwaitingDecision;
        self.version += 1;
    }

    fn settle(&mut self, tool_call_id: &str) -> Option<SettlementPort> {
        let i = self
            .unsettled
            .iter()
            .position(|(p, _)| p.call.id == tool_call_id)?;
        let (_, port) = self.unsettled.remove(i);
        if self.unsettled.is_empty() && self.status == RunStatus::AwaitingDecision {
            self.status = if self.pending.is_empty() {
                RunStatus::Running
            } else {
                RunStatus::AwaitingApproval
            };
        }
        self.version += 1;
        self.inputs += 1;
        Some(port)
    }
}

/// The state keeper actor.
#[derive(Debug, Default)]
pub struct StateKeeper;

impl Actor for StateKeeper {
    type Msg = StateMsg;
    type State = RunState;
    type Arguments = RunState;

    async fn pre_start(
        &self,
        _myself: ActorRef<StateMsg>,
        initial: RunState,
    ) -> Result<RunState, ActorProcessingErr> {
        Ok(initial)
    }

    async fn handle(
        &self,
        _myself: ActorRef<StateMsg>,
        message: StateMsg,
        state: &mut RunState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            StateMsg::Apply(update, reply) => {
                let committed = state.apply_committed(update).await;
                if let Some(reply) = reply {
                    // The requester may have gone away (run stopping); nothing to do then.
                    let _ = reply.send(committed);
                }
            }
            StateMsg::ApplyTraced {
                update,
                mut record,
                trace,
                reply,
            } => {
                let committed = state.apply_committed(update).await;
                // A step that could not be committed gets no record: the run
                // stops on it and the stop line says why.
                if let Ok(applied) = &committed {
                    record.state_version = applied.version;
                    record.state = state.trace_snapshot();
                    trace.write(TraceLine::Step(record));
                }
                if let Some(reply) = reply {
                    let _ = reply.send(committed);
                }
            }
            StateMsg::AwaitDecision {
                pending,
                parked,
                decision,
            } => {
                state.park_decision(pending, decision);
                let _ = parked.send(state.persist(true).await);
            }
            StateMsg::Settle {
                tool_call_id,
                settlement,
                reply,
            } => {
                let answer = match state.settle(&tool_call_id) {
                    Some(port) => {
                        let applied = (state.inputs, state.version);
                        match state.persist(true).await {
                            Ok(()) => {
                                let _ = port.send((settlement, applied));
                                Ok(applied.0)
                            }
                            Err(e) => Err(format!("the settlement could not be stored: {e}")),
                        }
                    }
                    None => Err(format!(
                        "no call {tool_call_id:?} is waiting for a decision"
                    )),
                };
                let _ = reply.send(answer);
            }
            StateMsg::Snapshot(reply) => {
                let _ = reply.send(state.snapshot());
            }
            StateMsg::AwaitApproval(pending, port) => {
                state.park(pending, port);
                // The park itself is re-created when the step is acted on again.
                let _ = state.persist(false).await;
            }
            StateMsg::Resolve {
                tool_call_id,
                decision,
                reply,
            } => {
                let answer = match state.unpark(&tool_call_id) {
                    Some(port) => {
                        state.inputs += 1;
                        let seq = state.inputs;
                        let decision = ApprovalDecision {
                            applied: (seq, state.version),
                            ..decision
                        };
                        // An approval is an input from outside: on disk before it counts.
                        match state.persist(true).await {
                            Ok(()) => {
                                // The executor may have given up (deadline) just now.
                                let _ = port.send(decision);
                                Ok(seq)
                            }
                            Err(e) => Err(format!("the decision could not be stored: {e}")),
                        }
                    }
                    None => Err(format!("no call {tool_call_id:?} is waiting for approval")),
                };
                let _ = reply.send(answer);
            }
            StateMsg::Withdraw(tool_call_id) => {
                state.unpark(&tool_call_id);
            }
            StateMsg::Session(from, reply) => {
                let from = from.min(state.session.len());
                let _ = reply.send(state.session[from..].to_vec());
            }
        }
        Ok(())
    }
}
