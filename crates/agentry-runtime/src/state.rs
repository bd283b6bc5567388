//! The state keeper: the only writer of run state.
//!
//! Every change is a [`StateMsg::Apply`] carrying one [`StateUpdate`]; the actor
//! applies them one at a time in mailbox order and bumps the version by one per
//! update, so updates that arrive together are serialized, never lost.

use agentry_protocol::budget::Usage;
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::state::{
    ControlState, PendingApproval, RunSnapshot, RunStatus, SessionEntry, TaskState, WorldState,
};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::RunInput;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;

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
    /// The run's status changed (paused, sleeping, running).
    Status(RunStatus),
    /// Timer ticks were skipped.
    TicksSkipped(u64),
    /// A whole step: the decision, its results, and the spend, applied atomically.
    Step {
        /// Step number.
        step: u64,
        /// What the policy decided.
        decision: Decision,
        /// Results, in request order.
        results: Vec<ResultEnvelope>,
        /// Total spend after the step.
        spent: Usage,
        /// The answer the model gave at this step, if any.
        answer: Option<String>,
    },
    /// The run stopped.
    Stopped {
        /// Why.
        reason: StopReason,
        /// Total spend at the stop.
        spent: Usage,
    },
}

/// What applying an update changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// State version after the update.
    pub version: u64,
    /// Content digest of the world layer after the update (path → sha256).
    pub world_digest: String,
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

/// Messages the state keeper accepts.
#[derive(RactorMessage)]
pub enum StateMsg {
    /// Apply one update; the reply says what changed.
    Apply(StateUpdate, Option<RpcReplyPort<Applied>>),
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
}

/// The run state, owned by the state keeper alone.
#[derive(Debug, Default)]
pub struct RunState {
    version: u64,
    world: WorldState,
    world_digest: String,
    task: TaskState,
    session: Vec<SessionEntry>,
    control: ControlState,
    status: RunStatus,
    /// Calls waiting for a human, with the executor's port for the decision.
    pending: Vec<(PendingApproval, RpcReplyPort<ApprovalDecision>)>,
    inputs: u64,
    ticks_skipped: u64,
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
        s.world_digest = s.digest_world();
        s
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
                    // Recorded through `Resolve`, which also answers the executor.
                    RunInput::Approval { .. } => {}
                }
            }
            StateUpdate::Status(status) => self.status = status,
            StateUpdate::TicksSkipped(n) => self.ticks_skipped += n,
            StateUpdate::Step {
                step,
                decision,
                results,
                spent,
                answer,
            } => {
                let mut world_changed = false;
                for r in results.iter().filter(|r| r.ok && !r.replayed) {
                    for reference in &r.refs {
                        let prev = self
                            .world
                            .refs
                            .insert(reference.path.clone(), reference.clone());
                        world_changed |= prev.as_ref() != Some(reference);
                    }
                }
                if world_changed {
                    self.world.version += 1;
                    self.world_digest = self.digest_world();
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
            }
        }
        self.version += 1;
        self.applied()
    }

    fn applied(&self) -> Applied {
        Applied {
            version: self.version,
            world_digest: self.world_digest.clone(),
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

    /// Key fields, as written to the trace.
    pub fn snapshot(&self) -> RunSnapshot {
        RunSnapshot {
            version: self.version,
            world: self.world.clone(),
            task: self.task.clone(),
            session_len: self.session.len() as u64,
            control: self.control.clone(),
            status: self.status,
            pending_approvals: self.pending.iter().map(|(p, _)| p.clone()).collect(),
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
                let applied = state.apply(update);
                if let Some(reply) = reply {
                    // The requester may have gone away (run stopping); nothing to do then.
                    let _ = reply.send(applied);
                }
            }
            StateMsg::Snapshot(reply) => {
                let _ = reply.send(state.snapshot());
            }
            StateMsg::AwaitApproval(pending, port) => state.park(pending, port),
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
                        // The executor may have given up (deadline) just now.
                        let _ = port.send(decision);
                        Ok(seq)
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
