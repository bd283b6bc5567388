//! The run state and how each update changes it.

use std::collections::BTreeSet;
use std::sync::Arc;

use agentry_protocol::budget::Usage;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::state::{
    ControlState, PendingApproval, RunSnapshot, RunStatus, SessionEntry, TaskState, WorldChange,
    WorldState,
};
use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::RunInput;
use ractor::RpcReplyPort;

use super::msg::{
    Applied, AppliedAt, ApprovalDecision, InputSource, SettlementPort, StateUpdate, StepUpdate,
};
use crate::durable::{KEPT_FINGERPRINTS, Progress, RunLog};
use crate::events::EventSink;

/// A call parked until a human answers, with the executor's port for the answer.
#[derive(Debug)]
pub(super) struct Parked<P> {
    /// The call, as snapshots show it.
    pub(super) pending: PendingApproval,
    /// Where the answer goes.
    pub(super) port: P,
}

/// The run state, owned by the state keeper alone.
#[derive(Debug, Default)]
pub struct RunState {
    pub(super) version: u64,
    world: WorldState,
    world_digest: Arc<str>,
    task: TaskState,
    pub(super) session: Vec<SessionEntry>,
    control: ControlState,
    pub(super) status: RunStatus,
    /// Calls waiting for a human, with the executor's port for the decision.
    pub(super) pending: Vec<Parked<RpcReplyPort<ApprovalDecision>>>,
    /// Calls a crash interrupted, waiting for a human to settle them.
    pub(super) unsettled: Vec<Parked<SettlementPort>>,
    pub(super) inputs: u64,
    ticks_skipped: u64,
    /// What the conductor needs to continue the run.
    pub(super) progress: Progress,
    /// Where a durable run's updates are committed.
    pub(super) log: Option<RunLog>,
    /// The run's events, whose numbering each checkpoint records.
    pub(super) events: Option<EventSink>,
    /// Session entries already handed to the store.
    pub(super) committed_len: usize,
    /// Timers and inbox entries whose input was applied, to remove from the store.
    pub(super) consumed: Vec<InputSource>,
    /// Paths whose ref changed since the last traced step; `None` until this
    /// state keeper writes its first step line, which carries every ref (a
    /// resumed run's earlier lines may be lost with the process that wrote them).
    refs_untraced: Option<BTreeSet<String>>,
    /// The run id when the run's span is enabled: each status change is then
    /// an `agentry::metrics` event (see `observe`); `None` costs nothing.
    pub(super) observed: Option<Arc<str>>,
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
            status @ (RunStatus::Running
            | RunStatus::Paused
            | RunStatus::Sleeping
            | RunStatus::Stopped) => status,
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

    /// Tells every status change of run `run_id` (see `observe`).
    pub fn observed_as(mut self, run_id: Arc<str>) -> Self {
        self.observed = Some(run_id);
        self
    }

    /// Commits every update of this run to `log` from now on.
    pub fn with_log(mut self, log: RunLog) -> Self {
        self.log = Some(log);
        self
    }

    /// Records the numbering of `events` (the run's) in every checkpoint,
    /// so a resumed run numbers on after it.
    pub(crate) fn numbered_by(mut self, events: EventSink) -> Self {
        self.events = Some(events);
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
            StateUpdate::StoredInput { source, input } => {
                if self.log.is_some() {
                    self.consumed.push(source);
                }
                self.apply_input(input);
            }
            StateUpdate::Discard(seq) => {
                if self.log.is_some() {
                    self.consumed.push(InputSource::Inbox(seq));
                }
                return self.applied();
            }
            StateUpdate::Input(input) => self.apply_input(input),
            StateUpdate::Status(status) => self.status = status,
            StateUpdate::TicksSkipped(n) => self.ticks_skipped += n,
            StateUpdate::Decided(in_flight) => {
                self.progress.steps = in_flight.step;
                self.progress.in_flight = Some(in_flight);
            }
            StateUpdate::Step(step) => self.apply_step(*step),
            StateUpdate::Stopped { reason, spent } => self.apply_stopped(reason, spent),
        }
        self.version += 1;
        self.applied()
    }

    /// A resumed run's spend with its children counted from their own
    /// records: its own spend plus `children`, which they spent by the store.
    pub(crate) fn recount_children(&mut self, children: Usage) {
        let own = self.control.spent.minus(&self.control.delegated);
        self.control.spent = own.plus(&children);
        self.control.delegated = children;
    }

    /// An input from outside: counted, and (messages, events, ticks) added to
    /// the session.
    fn apply_input(&mut self, input: RunInput) {
        self.inputs += 1;
        match input {
            RunInput::Message { text }
            | RunInput::Interrupt {
                text: Some(text), ..
            } => self.session.push(SessionEntry::User { text }),
            RunInput::Interrupt { text: None } => self.status = RunStatus::Paused,
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

    /// A whole step: progress, the world's refs, the session, the spend.
    fn apply_step(&mut self, update: StepUpdate) {
        let StepUpdate {
            step,
            decision,
            results,
            spent,
            delegated,
            answer,
            tool_calls,
            fingerprint,
            side_effects: _,
            ending,
        } = update;
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
        self.control.delegated = delegated;
        if answer.is_some() {
            self.task.answer = answer;
        }
    }

    /// The run stopped.
    fn apply_stopped(&mut self, reason: StopReason, spent: Usage) {
        self.control.stop_reason = Some(reason);
        self.control.spent = spent;
        self.task.done = reason == StopReason::Done;
        self.status = RunStatus::Stopped;
        // Nobody will decide these any more; dropping the ports tells the
        // executor, if it is still waiting.
        self.pending.clear();
        self.unsettled.clear();
    }

    pub(super) fn applied(&self) -> Applied {
        Applied {
            at: self.applied_at(),
            world_digest: Arc::clone(&self.world_digest),
        }
    }

    /// The inputs applied so far and the current version.
    #[inline]
    pub(super) fn applied_at(&self) -> AppliedAt {
        AppliedAt {
            input_seq: self.inputs,
            state_version: self.version,
        }
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
            pending_approvals: self.pending.iter().map(|p| p.pending.clone()).collect(),
            pending_decisions: self.unsettled.iter().map(|p| p.pending.clone()).collect(),
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
