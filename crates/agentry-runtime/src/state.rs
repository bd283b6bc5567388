//! The state keeper: the only writer of run state.
//!
//! Every change is a [`StateMsg::Apply`] carrying one [`StateUpdate`]; the actor
//! applies them one at a time in mailbox order and bumps the version by one per
//! update, so updates that arrive together are serialized, never lost.

use agentry_protocol::budget::Usage;
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::state::{ControlState, RunSnapshot, SessionEntry, TaskState, WorldState};
use agentry_protocol::stop::StopReason;
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
            }
        }
        self.version += 1;
        Applied {
            version: self.version,
            world_digest: self.world_digest.clone(),
            session_len: self.session.len(),
        }
    }

    /// Key fields, as written to the trace.
    pub fn snapshot(&self) -> RunSnapshot {
        RunSnapshot {
            version: self.version,
            world: self.world.clone(),
            task: self.task.clone(),
            session_len: self.session.len() as u64,
            control: self.control.clone(),
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
            StateMsg::Session(from, reply) => {
                let from = from.min(state.session.len());
                let _ = reply.send(state.session[from..].to_vec());
            }
        }
        Ok(())
    }
}
