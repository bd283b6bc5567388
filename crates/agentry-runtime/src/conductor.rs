//! The conductor: one per run. It wires the four actors and drives the loop purely
//! by messages.
//!
//! Each step is one [`ConductorMsg::Step`] the conductor sends itself, so anything
//! else in its mailbox (an abort, a user message) is handled between steps, at a
//! safe point. Within a step it asks the budget supervisor and the state keeper
//! (which never block) and the policy and executor (which may), always selecting
//! against the run's cancellation token so a deadline interrupts a stuck policy or
//! tool at once.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentry_protocol::accept::CheckOutcome;
use agentry_protocol::budget::{BudgetSnapshot, Usage};
use agentry_protocol::decision::{Decision, PolicyOutput, TokenUsage};
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::event::RunEvent;
use agentry_protocol::fingerprint::Fingerprinter;
use agentry_protocol::state::{RunSnapshot, RunStatus, SessionEntry};
use agentry_protocol::stop::StopReason;
use agentry_protocol::tool::{ToolArguments, ToolCall};
use agentry_protocol::trace::{AttemptRecord, RunInput, TraceEnd, TraceLine, TraceStep};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::budget::{
    BudgetArgs, BudgetMsg, BudgetSupervisor, DecideAfterSpend, ParentLink, SpendReply,
    ToolCallTally,
};
use crate::call::ask;
use crate::config::{Driver, RunConfig};
use crate::durable::{Ending, InFlight, RunLog};
use crate::events::EventSink;
use crate::executor::{Executed, ExecutorArgs, ExecutorMsg, ToolExecutor};
use crate::policy::{Policy, PolicyActor, PolicyArgs, PolicyMsg};
use crate::registry::ToolRegistry;
use crate::state::{Applied, RunState, StateKeeper, StateMsg, StateUpdate};
use crate::trace::TraceWriter;

/// How long a cancelled step waits for the executor's own cancelled envelopes
/// (the executor itself gives each tool `executor::CANCEL_GRACE` to clean up)
/// before it writes them itself.
const CANCEL_GRACE: Duration = Duration::from_millis(150);

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

/// The addresses of a run's four actors, as spawned. For embedders that want
/// actor-level access (supervision, diagnostics). The executor may be replaced
/// by a restart later; the others live as long as the run.
#[derive(Debug, Clone)]
pub struct RunActors {
    /// The policy actor.
    pub policy: ActorRef<PolicyMsg>,
    /// The tool executor.
    pub executor: ActorRef<ExecutorMsg>,
    /// The state keeper.
    pub state: ActorRef<StateMsg>,
    /// The budget supervisor.
    pub budget: ActorRef<BudgetMsg>,
}

/// Messages the conductor accepts.
pub enum ConductorMsg {
    /// Run the next step.
    Step,
    /// Stop the run: cancel in-flight calls and end with this reason.
    Abort(StopReason),
    /// An input from outside (message, event, pause, resume), applied at the next
    /// safe point: between steps.
    Input(RunInput),
    /// Timer tick `n` is due (time-driven agents).
    Tick(u64),
    /// An input a durable run kept in the store (a fired timer, an inbox
    /// entry); it leaves the store with the input's commit.
    StoredInput {
        /// Where it was kept.
        source: crate::state::InputSource,
        /// The input.
        input: RunInput,
    },
    /// The run's token was cancelled (deadline, abort, shutdown) while no step was
    /// running to notice it.
    TokenCancelled,
}

/// Start-up arguments.
pub struct ConductorArgs {
    /// Run id.
    pub run_id: Arc<str>,
    /// Configuration.
    pub config: RunConfig,
    /// Tools.
    pub registry: Arc<ToolRegistry>,
    /// The policy.
    pub policy: Box<dyn Policy>,
    /// The run's token (a child of the runtime's).
    pub run_token: CancellationToken,
    /// Where the outcome is published.
    pub outcome: watch::Sender<Option<RunOutcome>>,
    /// Where events are published.
    pub events: EventSink,
    /// The trace writer, opened before the run starts so a bad path is an error
    /// for the caller, not a failed actor.
    pub trace: Option<TraceWriter>,
    /// Receives the four actors' addresses once they run, so a handle can read
    /// state without waiting for the conductor's step to end.
    pub actors: Option<tokio::sync::oneshot::Sender<RunActors>>,
    /// Where this run sits in an agent tree.
    pub lineage: Lineage,
    /// Starts children for `agent.spawn`.
    pub agents: Arc<dyn agentry_tools::agents::AgentDesk>,
    /// Where a durable run commits its state and ledger.
    pub log: Option<RunLog>,
    /// The state to continue from, for a resumed run.
    pub restore: Option<Restore>,
    /// Counts what is posted to the conductor from outside.
    pub posted: Posted,
    /// A durable run: this process's claim on it, held while the run runs.
    pub(crate) claim: Option<crate::owner::Claim>,
}

/// How many messages other than its own `Step` wake-ups were posted to a
/// conductor. Every sender outside the conductor adds one before it casts; the
/// conductor counts what it handled. While the two agree nothing is waiting in
/// its mailbox, so a pull-driven run takes its next step in the same handler
/// instead of casting a `Step` to itself: a message to itself would be one more
/// hop per step, and a task that wakes itself while running is requeued by tokio
/// behind a wake-up of another worker thread. A post whose cast fails leaves the
/// counts apart for good, which only turns the batching off.
#[derive(Debug, Clone, Default)]
pub struct Posted(Arc<AtomicU64>);

impl Posted {
    fn count(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The conductor as every sender outside it holds it: each cast is counted in
/// its [`Posted`], so none can be sent uncounted.
#[derive(Debug, Clone)]
pub(crate) struct ConductorPost {
    actor: ActorRef<ConductorMsg>,
    posted: Posted,
}

impl ConductorPost {
    pub(crate) fn new(actor: ActorRef<ConductorMsg>, posted: Posted) -> Self {
        ConductorPost { actor, posted }
    }

    /// Casts `msg`, counted.
    pub(crate) fn cast(&self, msg: ConductorMsg) -> Result<(), ractor::MessagingErr<ConductorMsg>> {
        self.posted.0.fetch_add(1, Ordering::Release);
        self.actor.cast(msg)
    }
}

/// Steps a pull-driven run takes in one handler at most, and for how long, before
/// it lets its mailbox's other ports (supervision, stop) in.
const STEP_BATCH: u32 = 64;
const STEP_BATCH_TIME: Duration = Duration::from_millis(2);

/// What a resumed run continues from.
pub struct Restore {
    /// The state read back from the store.
    pub state: RunState,
    /// Wall-clock time since the run was created: the budget's clock (and so the
    /// absolute deadline) goes on from there.
    pub elapsed: Duration,
}

/// Where a run sits in an agent tree.
#[derive(Debug, Clone)]
pub struct Lineage {
    /// The parent run and its budget supervisor, for a child.
    pub parent: Option<(Arc<str>, ActorRef<BudgetMsg>)>,
    /// Depth in the tree (the root is 0).
    pub depth: u32,
    /// W3C trace id shared by the whole tree (32 hex digits).
    pub trace_id: String,
    /// The parent's absolute deadline, which bounds this run's.
    pub deadline_at: Option<Instant>,
}

impl Lineage {
    /// A root run's lineage. A durable run's trace id is derived from its id, so
    /// a resumed run keeps it; others get a fresh one.
    pub fn root(durable_id: Option<&String>) -> Lineage {
        let trace_id = match durable_id {
            Some(id) => {
                let mut f = Fingerprinter::new();
                f.str("trace").str(id);
                format!("{:032x}", f.finish_u128())
            }
            None => uuid::Uuid::now_v7().simple().to_string(),
        };
        Lineage {
            parent: None,
            depth: 0,
            trace_id,
            deadline_at: None,
        }
    }

    /// The W3C `traceparent` of run `run_id` in this tree.
    pub fn traceparent(&self, run_id: &str) -> String {
        let mut f = agentry_protocol::fingerprint::Fingerprinter::new();
        f.str(run_id);
        format!("00-{}-{}-01", self.trace_id, f.finish_short())
    }
}

struct Children {
    /// Kept to restart the executor if it dies.
    executor_args: ExecutorArgs,
    policy: ActorRef<PolicyMsg>,
    executor: ActorRef<ExecutorMsg>,
    state: ActorRef<StateMsg>,
    budget: ActorRef<BudgetMsg>,
}

impl Children {
    /// Whether every child is up: a dead one's supervision event must be handled
    /// (the executor restarted) before the next step.
    fn all_running(&self) -> bool {
        use ractor::ActorStatus::Running;
        self.policy.get_status() == Running
            && self.executor.get_status() == Running
            && self.state.get_status() == Running
            && self.budget.get_status() == Running
    }
}

/// Conductor state.
pub struct ConductorState {
    run_id: Arc<str>,
    config: RunConfig,
    /// Shared by every trace record of the run, as are the ids below.
    model: Arc<str>,
    task_id: Arc<str>,
    children: Children,
    run_token: CancellationToken,
    /// This process's claim on a durable run: let go before the outcome is
    /// published (and, declared first, dropped before it if the conductor dies),
    /// so whoever sees the run end here can resume it in this process.
    claim: Option<crate::owner::Claim>,
    outcome: watch::Sender<Option<RunOutcome>>,
    events: EventSink,
    trace: Option<TraceWriter>,
    /// Session entries applied since the policy last decided.
    pending: Vec<SessionEntry>,
    fingerprints: VecDeque<u64>,
    /// Content digest of the world as of the last applied update.
    world_digest: Arc<str>,
    /// When the run started (the budget supervisor counts from the same instant).
    started: Instant,
    steps: u64,
    /// Tool calls this run made itself (the budget also counts its children's).
    own_tool_calls: u64,
    stopped: bool,
    /// Paused by the user: no new step starts until `resume`.
    paused: bool,
    /// A step was wanted while paused; it runs on resume.
    step_due: bool,
    /// A wake-up `Step` is already in the mailbox (event-driven agents).
    wake_pending: bool,
    /// Timer state of a time-driven agent.
    ticks: Option<inputs::Ticker>,
    /// Parent run id, for the trace.
    parent_id: Option<Arc<str>>,
    /// W3C traceparent of this run.
    traceparent: Arc<str>,
    /// The parent's budget supervisor, for a child (to learn why it was cancelled).
    parent_budget: Option<ActorRef<BudgetMsg>>,
    /// A durable run records each decision before acting on it.
    durable: bool,
    /// A resumed run's decided-but-unapplied step, acted on again first.
    redrive: Option<InFlight>,
    /// A resumed run whose last step ended it: finish that, take no new step.
    ending: Option<Ending>,
    /// Where this run takes its tool calls from (see [`ToolCallTally`]).
    tool_call_tally: ToolCallTally,
    /// Messages posted from outside, and how many of them were handled.
    posted: Posted,
    handled: u64,
    /// A child did not answer during this batch of steps.
    lost_child: bool,
}

mod inputs;

pub(crate) enum Flow {
    Continue,
    Stop {
        reason: StopReason,
        detail: String,
        checks: Vec<CheckOutcome>,
    },
}

impl Flow {
    fn stop(reason: StopReason, detail: impl Into<String>) -> Flow {
        Flow::Stop {
            reason,
            detail: detail.into(),
            checks: Vec::new(),
        }
    }
}

/// The conductor actor.
#[derive(Debug, Default)]
pub struct Conductor;

impl Actor for Conductor {
    type Msg = ConductorMsg;
    type State = ConductorState;
    type Arguments = ConductorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ConductorMsg>,
        args: ConductorArgs,
    ) -> Result<ConductorState, ActorProcessingErr> {
        let ConductorArgs {
            run_id,
            config,
            registry,
            policy,
            run_token,
            outcome,
            events,
            trace,
            actors,
            lineage,
            agents,
            log,
            restore,
            posted,
            claim,
        } = args;
        let now = Instant::now();
        let started = restore
            .as_ref()
            .and_then(|r| now.checked_sub(r.elapsed))
            .unwrap_or(now);
        let own_deadline = config
            .limits
            .deadline_ms
            .map(|ms| crate::clock::later(started, Duration::from_millis(ms)));
        let deadline = match (own_deadline, lineage.deadline_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let workdir: Arc<std::path::Path> = Arc::from(config.workdir.as_path());
        let visible = registry.visible_specs(|contract| config.grants.allows(contract));
        let model: Arc<str> = policy.name().into();
        let cell = myself.get_cell();
        let tool_call_tally = ToolCallTally::default();
        // Each spawn boxed: nested inline, the four spawn futures made this
        // start-up future ~9 KB, moved several times per run.
        let (budget, _) = Box::pin(Actor::spawn_linked(
            None,
            BudgetSupervisor,
            BudgetArgs {
                limits: config.limits,
                spent: restore
                    .as_ref()
                    .map(|r| r.state.snapshot().control.spent)
                    .unwrap_or_default(),
                run_token: run_token.clone(),
                started,
                parent_deadline: lineage.deadline_at,
                parent: lineage.parent.as_ref().map(|(_, budget)| ParentLink {
                    budget: budget.clone(),
                    child_id: run_id.to_string(),
                }),
                tool_calls: tool_call_tally.clone(),
            },
            cell.clone(),
        ))
        .await?;
        let resumed = restore.is_some();
        let mut initial = match restore {
            Some(r) => r.state,
            None => RunState::initial(&config),
        };
        if let Some(log) = &log {
            initial = initial.with_log(log.clone());
        }
        let progress = initial.progress().clone();
        let paused = resumed && initial.snapshot().status == RunStatus::Paused;
        let pending = initial.session().to_vec();
        let initial_world: Arc<str> = initial.world_digest().into();
        let (state, _) = Box::pin(Actor::spawn_linked(
            None,
            StateKeeper,
            initial,
            cell.clone(),
        ))
        .await?;
        // Opened once: every file operation of the run resolves beneath this
        // handle, whatever the model does to the path meanwhile.
        let root = Arc::new(agentry_tools::fs::WorkRoot::open(&config.workdir)?);
        let executor_args = ExecutorArgs {
            root,
            run_id: Arc::clone(&run_id),
            registry,
            grants: config.grants.clone(),
            artifacts: Arc::from(
                config
                    .artifacts
                    .clone()
                    .unwrap_or_else(|| config.workdir.join(".agentry"))
                    .as_path(),
            ),
            workdir,
            run_token: run_token.clone(),
            deadline,
            budget: budget.clone(),
            events: events.clone(),
            max_parallel: config.max_parallel,
            retry: config.retry,
            state: state.clone(),
            approval: config.approval.clone(),
            agents: Some(agents),
            log: log.clone(),
        };
        let (executor, _) = Box::pin(Actor::spawn_linked(
            None,
            ToolExecutor,
            executor_args.clone(),
            cell.clone(),
        ))
        .await?;

        let (policy, _) = Box::pin(Actor::spawn_linked(
            None,
            PolicyActor,
            PolicyArgs {
                policy,
                run_id: Arc::clone(&run_id),
                goal: config.goal.clone(),
                tools: visible,
                events: events.clone(),
            },
            cell,
        ))
        .await?;
        if let Some(tx) = actors {
            let _ = tx.send(RunActors {
                policy: policy.clone(),
                executor: executor.clone(),
                state: state.clone(),
                budget: budget.clone(),
            });
        }
        let traceparent = lineage.traceparent(&run_id);
        let fingerprints = progress
            .fingerprints
            .iter()
            .rev()
            .take(config.progress_window)
            .rev()
            .copied()
            .collect();
        Ok(ConductorState {
            task_id: config.task_id.as_str().into(),
            run_id,
            config,
            model,
            children: Children {
                executor_args,
                policy,
                executor,
                state,
                budget,
            },
            run_token,
            claim,
            outcome,
            events,
            trace,
            pending,
            fingerprints,
            world_digest: initial_world,
            started,
            steps: progress.steps,
            own_tool_calls: progress.tool_calls,
            stopped: false,
            paused,
            durable: log.is_some(),
            redrive: progress.in_flight,
            ending: progress.ending,
            tool_call_tally,
            posted,
            handled: 0,
            lost_child: false,
            step_due: false,
            wake_pending: false,
            ticks: None,
            parent_id: lineage.parent.as_ref().map(|(id, _)| Arc::clone(id)),
            parent_budget: lineage.parent.as_ref().map(|(_, b)| b.clone()),
            traceparent: traceparent.into(),
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<ConductorMsg>,
        st: &mut ConductorState,
    ) -> Result<(), ActorProcessingErr> {
        // A cancellation while no step runs (paused, sleeping) must still stop the run.
        let token = st.run_token.clone();
        let me = myself.clone();
        let me = ConductorPost::new(me, st.posted.clone());
        tokio::spawn(async move {
            token.cancelled().await;
            let _ = me.cast(ConductorMsg::TokenCancelled);
        });
        if let Some(every) = st.config.tick_every {
            // Ticks make the agent time-driven: it steps on ticks, not in a loop.
            st.config.driver = Driver::Events;
            st.ticks = Some(inputs::Ticker::start(&myself, every));
        }
        if st.paused {
            // Resumed while paused: the step (or the decided one) runs on resume.
            st.step_due = true;
            return Ok(());
        }
        match st.config.driver {
            Driver::Pull => myself.cast(ConductorMsg::Step)?,
            // A resumed event-driven agent first finishes the step it had decided.
            Driver::Events if st.redrive.is_some() || st.ending.is_some() => {
                myself.cast(ConductorMsg::Step)?
            }
            // Event- and time-driven agents sleep until their first event.
            Driver::Events => st.set_status(RunStatus::Sleeping).await,
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<ConductorMsg>,
        message: ConductorMsg,
        st: &mut ConductorState,
    ) -> Result<(), ActorProcessingErr> {
        if st.stopped {
            return Ok(());
        }
        match message {
            // Boxed: the step's state machine is large, and ractor moves each
            // handler future it polls; a pointer is cheap to move.
            ConductorMsg::Step => {
                st.wake_pending = false;
                if st.paused {
                    st.step_due = true;
                    return Ok(());
                }
                let flow = match (st.ending.take(), st.redrive.take()) {
                    (Some(Ending::Verify { answer }), _) => Box::pin(st.verify(answer)).await,
                    (Some(Ending::Stop { reason, detail }), _) => Flow::stop(reason, detail),
                    (None, Some(in_flight)) => Box::pin(st.redrive_step(in_flight)).await,
                    (None, None) => Box::pin(st.run_steps()).await,
                };
                st.after_step(&myself, flow).await;
            }
            ConductorMsg::Input(input) => {
                st.handled += 1;
                Box::pin(st.on_input(&myself, input, None)).await
            }
            ConductorMsg::StoredInput { source, input } => {
                st.handled += 1;
                Box::pin(st.on_input(&myself, input, Some(source))).await
            }
            // Not counted: ticks drive event-driven runs, which never batch steps.
            ConductorMsg::Tick(n) => Box::pin(st.on_tick(&myself, n)).await,
            ConductorMsg::TokenCancelled => {
                st.handled += 1;
                let reason = st.cancel_cause().await;
                let detail = format!("{reason} while the run was idle (step {})", st.steps);
                st.finish(&myself, reason, detail, Vec::new()).await;
            }
            ConductorMsg::Abort(reason) => {
                st.handled += 1;
                let _ = st.children.budget.cast(BudgetMsg::CancelAll(reason));
                st.run_token.cancel();
                st.finish(
                    &myself,
                    reason,
                    format!("run stopped from outside ({reason})"),
                    Vec::new(),
                )
                .await;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<ConductorMsg>,
        event: SupervisionEvent,
        st: &mut ConductorState,
    ) -> Result<(), ActorProcessingErr> {
        Box::pin(st.on_child_exit(&myself, event)).await;
        Ok(())
    }
}

impl ConductorState {
    /// A child actor failed or ended: restart the executor, stop the run otherwise.
    async fn on_child_exit(&mut self, myself: &ActorRef<ConductorMsg>, event: SupervisionEvent) {
        if self.stopped {
            return;
        }
        let (who, detail) = match event {
            SupervisionEvent::ActorFailed(who, err) => {
                let detail = format!("actor {} failed: {err}", who.get_id());
                (who, detail)
            }
            SupervisionEvent::ActorTerminated(who, _, reason) => {
                let detail = format!(
                    "actor {} ended unexpectedly: {}",
                    who.get_id(),
                    reason.unwrap_or_default()
                );
                (who, detail)
            }
            _ => return,
        };
        if who.get_id() == self.children.executor.get_id() {
            // The executor holds no run state the run cannot do without: restart it.
            // Calls it had in flight were already reported as lost to the step
            // that sent them (their reply port closed).
            tracing::warn!(run_id = %self.run_id, %detail, "restarting the tool executor");
            let args = self.children.executor_args.clone();
            match Actor::spawn_linked(None, ToolExecutor, args, myself.get_cell()).await {
                Ok((executor, _)) => {
                    self.children.executor = executor;
                    return;
                }
                Err(e) => {
                    let detail = format!("{detail}; restarting it failed: {e}");
                    self.run_token.cancel();
                    self.finish(myself, StopReason::UnrecoverableError, detail, Vec::new())
                        .await;
                    return;
                }
            }
        }
        self.run_token.cancel();
        self.finish(myself, StopReason::UnrecoverableError, detail, Vec::new())
            .await;
    }

    fn emit(&self, event: impl FnOnce() -> RunEvent) {
        self.events.emit(event);
    }

    /// Why the run's token was cancelled.
    /// Why the run's token was cancelled: its own budget's cause, else (a child
    /// cancelled with its parent) the parent's, else an abort or shutdown.
    async fn cancel_cause(&self) -> StopReason {
        if let Some(cause) = ask(&self.children.budget, BudgetMsg::StopCause)
            .await
            .ok()
            .flatten()
        {
            return cause;
        }
        if let Some(parent) = &self.parent_budget
            && let Some(cause) = ask(parent, BudgetMsg::StopCause).await.ok().flatten()
        {
            return cause;
        }
        StopReason::UserAbort
    }

    async fn cancelled_flow(&self, during: &str) -> Flow {
        let reason = self.cancel_cause().await;
        Flow::stop(
            reason,
            format!("{reason} while {during} (step {})", self.steps),
        )
    }

    /// Spends one step, checked first; remembers the tool calls left. The error
    /// is the stop when the step is refused.
    async fn spend_step(&mut self, step: u64, when: &str) -> Result<BudgetSnapshot, Flow> {
        let reply = ask(&self.children.budget, |r| {
            BudgetMsg::Spend(Usage::step(), r)
        })
        .await;
        self.step_granted(step, when, reply)
    }

    /// The budget's answer to step `step`'s spend: the snapshot before it, or
    /// the stop.
    fn step_granted(
        &self,
        step: u64,
        when: &str,
        reply: Result<SpendReply, String>,
    ) -> Result<BudgetSnapshot, Flow> {
        match reply {
            Ok(SpendReply::Granted { before }) => Ok(before),
            Ok(SpendReply::Refused(reason)) => Err(Flow::stop(
                reason,
                format!("{reason}: step {step} was refused {when}"),
            )),
            Err(e) => Err(Flow::stop(StopReason::UnrecoverableError, e)),
        }
    }

    /// Runs steps while the run is pull-driven, continues, and nothing else is
    /// waiting in the mailbox; bounded in count and time (see [`Posted`]).
    async fn run_steps(&mut self) -> Flow {
        let began = Instant::now();
        let mut taken = 0;
        self.lost_child = false;
        loop {
            let flow = self.run_step().await;
            taken += 1;
            let more = matches!(flow, Flow::Continue)
                && self.config.driver == Driver::Pull
                && !self.paused
                && self.posted.count() == self.handled
                && !self.lost_child
                && self.children.all_running()
                && taken < STEP_BATCH
                && began.elapsed() < STEP_BATCH_TIME;
            if !more {
                return flow;
            }
        }
    }

    async fn run_step(&mut self) -> Flow {
        // 1. Check-before-spend, 2. decide: one message. The budget supervisor
        // answers `granted` (step max+1 is refused there, never run) and, if it
        // granted the step, publishes `StepStarted` and hands the request on to
        // the policy, whose decision comes straight back here.
        let step = self.steps + 1;
        let (granted_tx, granted_rx) = tokio::sync::oneshot::channel();
        let (decided_tx, decided_rx) = tokio::sync::oneshot::channel();
        let request = DecideAfterSpend {
            step,
            new_entries: std::mem::take(&mut self.pending),
            policy: self.children.policy.clone(),
            events: self.events.clone(),
            granted: granted_tx.into(),
            decided: decided_tx.into(),
        };
        if let Err(e) = self
            .children
            .budget
            .cast(BudgetMsg::SpendAndDecide(Box::new(request)))
        {
            return Flow::stop(
                StopReason::UnrecoverableError,
                format!("the budget supervisor is gone: {e}"),
            );
        }
        let decided = tokio::select! {
            biased;
            _ = self.run_token.cancelled() => None,
            r = decided_rx => Some(r),
        };
        // The supervisor answers `granted` before it asks the policy, and never
        // waits on anything: this is at hand.
        let reply = granted_rx
            .await
            .map_err(|_| "the budget supervisor did not answer a step's spend".to_string());
        let before = match self.step_granted(step, "before it ran", reply) {
            Ok(before) => before,
            Err(stop) => return stop,
        };
        self.steps = step;
        let out: PolicyOutput = match decided {
            None => return self.cancelled_flow("the policy was deciding").await,
            Some(Ok(out)) => out,
            Some(Err(_)) => {
                return Flow::stop(
                    StopReason::UnrecoverableError,
                    format!("actor {} did not answer", self.children.policy.get_id()),
                );
            }
        };
        self.charge_tokens(&out);
        if self.durable {
            // Recorded before acting, so a resumed run acts on this decision again
            // (the ledger says which calls already ran) instead of asking anew.
            // The reply means the state keeper has queued it at the store writer,
            // so it lands before any intent the executor commits for this step
            // (both go through the one writer, in order); nobody waits for the
            // disk here.
            let decided = StateUpdate::Decided(Box::new(InFlight {
                step,
                output: out.clone(),
                before,
            }));
            match ask(&self.children.state, |r| StateMsg::Apply(decided, Some(r))).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    return Flow::stop(
                        StopReason::UnrecoverableError,
                        format!("step {step}'s decision could not be stored: {e}"),
                    );
                }
                Err(e) => return Flow::stop(StopReason::UnrecoverableError, e),
            }
        }
        self.act(step, before, out, false).await
    }

    /// Acts on a resumed run's decided step again, without asking the policy.
    /// The checkpoint the run resumed from predates the step, so the step, its
    /// tokens and its tool calls are spent again here, exactly once.
    async fn redrive_step(&mut self, in_flight: InFlight) -> Flow {
        let InFlight { step, output, .. } = in_flight;
        let before = match self.spend_step(step, "when the run resumed").await {
            Ok(before) => before,
            Err(stop) => return stop,
        };
        self.steps = step;
        self.emit(|| RunEvent::StepStarted { step });
        self.charge_tokens(&output);
        self.act(step, before, output, true).await
    }

    fn charge_tokens(&self, out: &PolicyOutput) {
        if out.usage.tokens_in + out.usage.tokens_out + out.cost_micros > 0 {
            let _ = self.children.budget.cast(BudgetMsg::Charge(Usage {
                tokens_in: out.usage.tokens_in,
                tokens_out: out.usage.tokens_out,
                cost_micros: out.cost_micros,
                ..Usage::default()
            }));
        }
    }

    /// Steps 3–6 of a step: act on the decision, update, record, check.
    async fn act(
        &mut self,
        step: u64,
        before: BudgetSnapshot,
        mut out: PolicyOutput,
        redrive: bool,
    ) -> Flow {
        // Shared from here on: the executor, the event, the session and the
        // policy's view all hold this one decision.
        let decision = Arc::new(out.decision);
        self.emit(|| RunEvent::DecisionMade {
            step,
            decision: Arc::clone(&decision),
        });

        // 3. Act.
        let mut flow = Flow::Continue;
        let mut answer = None;
        let mut final_text = false;
        let mut attempts = Vec::new();
        let mut approvals = Vec::new();
        let mut granted_calls = 0;
        let mut side_effects = false;
        let results = match &*decision {
            Decision::ToolCalls { calls } if !calls.is_empty() => {
                let (executed, short, spent) = self.execute(step, &decision, calls, redrive).await;
                granted_calls = spent;
                side_effects = executed.side_effects;
                if let Some(short) = short {
                    flow = short;
                }
                answer = finish_answer(&executed.results);
                attempts = executed.attempts;
                approvals = executed.approvals;
                executed.results
            }
            Decision::ToolCalls { .. } => vec![Arc::new(policy_error(
                "the model proposed an empty list of tool calls",
            ))],
            Decision::Final { answer: text } => {
                answer = Some(text.clone());
                final_text = true;
                Vec::new()
            }
            Decision::Failed { message, fatal } => {
                if *fatal {
                    flow = Flow::stop(
                        StopReason::UnrecoverableError,
                        format!("policy failed: {message}"),
                    );
                }
                vec![Arc::new(policy_error(message))]
            }
        };
        for r in &results {
            self.emit(|| RunEvent::ToolCallFinished {
                step,
                result: Arc::clone(r),
            });
        }

        // Approval decisions were applied (and numbered) by the state keeper while
        // the step ran; their trace lines go before the step's.
        for (seq, version, input) in &approvals {
            self.trace_input(*seq, *version, input);
        }

        // 4. Update: one state update per step, applied by the state keeper. The
        // fingerprint uses the world as the action found it; what the action did to
        // it is in the observation (refs).
        let after = self.after_snapshot(
            before,
            &out.usage,
            out.cost_micros,
            granted_calls,
            &attempts,
        );
        let fp = step_fingerprint(&decision, &results, &self.world_digest);
        self.pending.push(SessionEntry::Assistant {
            step,
            decision: Arc::clone(&decision),
        });
        self.pending.extend(
            results
                .iter()
                .cloned()
                .map(|result| SessionEntry::Tool { result }),
        );
        // The step's trace record, but for the state after the update: the state
        // keeper completes it and queues it as it applies the update, so the
        // trace needs no round trip (every other trace line is written after one,
        // so lines stay in order).
        let traced = self.trace.as_ref().map(|t| {
            let record = TraceStep {
                run_id: Arc::clone(&self.run_id),
                task_id: Arc::clone(&self.task_id),
                parent_id: self.parent_id.clone(),
                traceparent: Arc::clone(&self.traceparent),
                step,
                attempt: 1,
                model: if out.model.is_empty() {
                    Arc::clone(&self.model)
                } else {
                    std::mem::take(&mut out.model).into()
                },
                prompt_hash: out.prompt_hash.take(),
                decision: Arc::clone(&decision),
                results: results.clone(),
                attempts: std::mem::take(&mut attempts),
                budget_before: before,
                budget_after: after,
                state_version: 0,
                fingerprint: format!("{fp:016x}"),
                state: RunSnapshot::default(),
                at: agentry_protocol::now_millis(),
            };
            (t.sender(), Box::new(record))
        });
        // What ends the run, should the process die before the stop is on disk.
        let ending = match (&flow, &answer) {
            (Flow::Stop { reason, detail, .. }, _) => Some(Ending::Stop {
                reason: *reason,
                detail: detail.clone(),
            }),
            (Flow::Continue, Some(a)) if !(final_text && self.config.driver == Driver::Events) => {
                Some(Ending::Verify { answer: a.clone() })
            }
            _ => None,
        }
        .filter(|_| self.durable);
        let world_may_change = results.iter().any(|r| !r.refs.is_empty());
        let update = StateUpdate::Step {
            step,
            decision,
            results,
            spent: after.spent,
            answer: answer.clone(),
            tool_calls: self.own_tool_calls,
            fingerprint: fp,
            side_effects,
            ending,
        };
        // Nobody needs the reply when the store is off, the trace is off, nobody
        // listens and no result carries a ref (so the world cannot change): the
        // update is handed over without a round trip. The state keeper applies it
        // before anything sent after it, so every later read sees it.
        let apply = move |reply| match traced {
            Some((trace, record)) => StateMsg::ApplyTraced {
                update,
                record,
                trace,
                reply,
            },
            None => StateMsg::Apply(update, reply),
        };
        if !(self.durable || self.events.listening() || world_may_change) {
            let _ = self.children.state.cast(apply(None));
            return self.check_end(flow, answer, final_text, fp).await;
        }
        let reply = ask(&self.children.state, |r| apply(Some(r))).await;
        let applied: Applied = match reply {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                return Flow::stop(
                    StopReason::UnrecoverableError,
                    format!("step {step} could not be stored: {e}"),
                );
            }
            Err(e) => return Flow::stop(StopReason::UnrecoverableError, e),
        };
        self.emit(|| RunEvent::StateUpdated {
            version: applied.version,
        });
        self.emit(|| RunEvent::BudgetSpent {
            budget: Box::new(after),
        });
        self.world_digest = applied.world_digest;

        self.check_end(flow, answer, final_text, fp).await
    }

    /// 6. Termination checks, after the step's effects are on record.
    async fn check_end(
        &mut self,
        flow: Flow,
        answer: Option<String>,
        final_text: bool,
        fp: u64,
    ) -> Flow {
        if let Flow::Stop { .. } = flow {
            return flow;
        }
        if let Some(answer) = answer {
            // An event-driven agent's text answer is a reply; it sleeps until the
            // next event. Only `task.finish` ends such a run.
            if !(final_text && self.config.driver == Driver::Events) {
                return self.verify(answer).await;
            }
        }
        if self.progress_stalled(fp) {
            let window = self.config.progress_window;
            return Flow::stop(
                StopReason::NoProgress,
                format!(
                    "the last {window} steps repeated the same action, observation and world state"
                ),
            );
        }
        Flow::Continue
    }

    /// Spends the tool-call budget and runs the calls. The second value is set
    /// when the step must end the run; the third is the budget after the spend.
    async fn execute(
        &mut self,
        step: u64,
        decision: &Arc<Decision>,
        calls: &[ToolCall],
        redrive: bool,
    ) -> (Executed, Option<Flow>, u64) {
        let n = calls.len() as u64;
        // Taken from what is left in one atomic step shared with the supervisor,
        // which books them (this conductor is the only spender of its run's own
        // tool calls): check-before-spend without a round trip.
        let granted = if self.run_token.is_cancelled() {
            0
        } else {
            self.tool_call_tally.take_up_to(n)
        };
        self.own_tool_calls += granted;
        let run = ask(&self.children.executor, |reply| ExecutorMsg::Execute {
            step,
            decision: Arc::clone(decision),
            granted: granted as usize,
            redrive,
            reply,
        });
        let token = self.run_token.clone();
        let results = tokio::select! {
            // An executor that died mid-call cannot say what happened: the calls
            // are reported as lost (its supervisor, this conductor, restarts it).
            r = run => r.unwrap_or_else(|e| {
                self.lost_child = true;
                Executed {
                    results: calls.iter().map(|c| Arc::new(lost_call(c, &e))).collect(),
                    ..Executed::default()
                }
            }),
            // The executor answers cancelled calls itself; if it cannot within the
            // grace period, the conductor records them as cancelled.
            _ = async { token.cancelled().await; tokio::time::sleep(CANCEL_GRACE).await } => Executed {
                results: calls.iter().map(|c| Arc::new(ResultEnvelope::failure(&c.id, &c.name,
                    ToolError::new(ErrorCode::Ecanceled, "cancelled: the executor did not answer in time")))).collect(),
                ..Executed::default()
            },
        };
        let flow = if self.run_token.is_cancelled() {
            Some(self.cancelled_flow("tools were running").await)
        } else if granted < n {
            Some(Flow::stop(
                StopReason::MaxToolCalls,
                format!(
                    "tool-call budget exhausted: {} of {n} calls at step {step} were refused",
                    n - granted
                ),
            ))
        } else {
            None
        };
        (results, flow, granted)
    }

    async fn verify(&mut self, answer: String) -> Flow {
        if self.config.accept.is_empty() {
            return Flow::stop(
                StopReason::Done,
                "the model finished; the task declares no acceptance checks",
            );
        }
        let checks = self.config.accept.clone();
        let token = self.run_token.clone();
        let outcomes = tokio::select! {
            biased;
            _ = token.cancelled() => return self.cancelled_flow("acceptance checks were running").await,
            r = ask(&self.children.executor, |reply| ExecutorMsg::Verify { checks, reply }) => match r {
                Ok(o) => o,
                Err(e) => return Flow::stop(StopReason::UnrecoverableError, e),
            },
        };
        let failed: Vec<&str> = outcomes
            .iter()
            .filter(|o| !o.passed)
            .map(|o| o.detail.as_str())
            .collect();
        let (reason, detail) = if failed.is_empty() {
            (
                StopReason::Done,
                format!(
                    "answer {answer:?} accepted: {} checks passed",
                    outcomes.len()
                ),
            )
        } else {
            (
                StopReason::VerificationMissing,
                format!(
                    "the model finished but acceptance failed: {}",
                    failed.join("; ")
                ),
            )
        };
        Flow::Stop {
            reason,
            detail,
            checks: outcomes,
        }
    }

    /// The budget after the step, from the supervisor's last answer plus what was
    /// spent since (a model turn's tokens, retries), without another round trip.
    fn after_snapshot(
        &self,
        before: BudgetSnapshot,
        usage: &TokenUsage,
        cost_micros: u64,
        tool_calls: u64,
        attempts: &[AttemptRecord],
    ) -> BudgetSnapshot {
        let retries = attempts.iter().filter(|a| a.attempt > 1).count() as u64;
        let spent = before.spent.plus(&Usage {
            steps: 1,
            tool_calls,
            tokens_in: usage.tokens_in,
            tokens_out: usage.tokens_out,
            cost_micros,
            retries,
            ..Usage::default()
        });
        BudgetSnapshot::new(
            self.config.limits,
            spent,
            self.started.elapsed().as_millis() as u64,
        )
    }

    fn progress_stalled(&mut self, fp: u64) -> bool {
        let window = self.config.progress_window;
        if window < 2 {
            return false;
        }
        self.fingerprints.push_back(fp);
        while self.fingerprints.len() > window {
            self.fingerprints.pop_front();
        }
        self.fingerprints.len() == window
            && self.fingerprints.iter().all(|f| *f == self.fingerprints[0])
    }

    /// Stops the run. Boxed so the handler futures that may call it stay small
    /// (ractor moves a handler future per message; see `handle`).
    async fn finish(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        reason: StopReason,
        detail: String,
        checks: Vec<CheckOutcome>,
    ) {
        Box::pin(self.finish_inner(myself, reason, detail, checks)).await
    }

    async fn finish_inner(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
        reason: StopReason,
        detail: String,
        checks: Vec<CheckOutcome>,
    ) {
        self.stopped = true;
        if let Some(ticker) = self.ticks.take() {
            ticker.stop();
        }
        // Nothing of this run may outlive it.
        self.run_token.cancel();
        let budget = ask(&self.children.budget, BudgetMsg::Snapshot)
            .await
            .unwrap_or_default();
        let applied = ask(&self.children.state, |r| {
            StateMsg::Apply(
                StateUpdate::Stopped {
                    reason,
                    spent: budget.spent,
                },
                Some(r),
            )
        })
        .await;
        let applied = match applied {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => {
                tracing::error!(run_id = %self.run_id, error = %e, "the run's stop could not be stored");
                Err(e)
            }
            Err(e) => Err(e),
        };
        let state = ask(&self.children.state, StateMsg::Snapshot)
            .await
            .unwrap_or_default();
        let answer = state.task.answer.clone();
        let mut trace_path = None;
        let mut trace_error = None;
        if let Some(trace) = self.trace.take() {
            let children = ask(&self.children.budget, BudgetMsg::Children)
                .await
                .unwrap_or_default();
            trace.write(TraceLine::Stop(Box::new(TraceEnd {
                run_id: self.run_id.to_string(),
                parent_id: self.parent_id.as_deref().map(str::to_string),
                traceparent: self.traceparent.to_string(),
                children,
                task_id: self.config.task_id.clone(),
                steps: self.steps,
                tool_calls: self.own_tool_calls,
                stop_reason: reason,
                detail: detail.clone(),
                answer: answer.clone(),
                budget,
                state_version: applied.as_ref().map_or(state.version, |a| a.version),
                world: state.world.clone(),
                at: agentry_protocol::now_millis(),
            })));
            let path = trace.path().to_path_buf();
            if let Err(e) = trace.finish().await {
                tracing::error!(run_id = %self.run_id, error = %e, "trace could not be written completely");
                trace_error = Some(e.to_string());
            }
            trace_path = Some(path);
        }
        self.emit(|| RunEvent::RunStopped {
            stop_reason: reason,
        });
        tracing::info!(run_id = %self.run_id, %reason, steps = self.steps, "run stopped");
        let outcome = RunOutcome {
            run_id: self.run_id.to_string(),
            task_id: self.config.task_id.clone(),
            stop_reason: reason,
            detail,
            answer,
            steps: self.steps,
            tool_calls: self.own_tool_calls,
            budget,
            checks,
            state,
            workdir: self.config.workdir.clone(),
            trace: trace_path,
            trace_error,
        };
        // What this run did not use of its allowance returns to its parent (its
        // budget supervisor also says so when it stops; a second release is a no-op).
        if let Some(parent) = &self.parent_budget {
            let _ = parent.cast(BudgetMsg::Release {
                child_id: self.run_id.to_string(),
            });
        }
        drop(self.claim.take());
        self.outcome.send_replace(Some(outcome));
        // The policy or executor may be stuck inside a handler (a hung model call, a
        // tool ignoring cancellation): kill, which aborts the handler, rather than
        // stop, which would wait for it.
        self.children.policy.kill();
        self.children.executor.kill();
        self.children.state.stop(None);
        self.children.budget.stop(None);
        myself.stop(None);
    }
}

/// The answer of a successful, freshly executed `task.finish` call in this step.
fn finish_answer(results: &[Arc<ResultEnvelope>]) -> Option<String> {
    results
        .iter()
        .find(|r| r.ok && r.tool == agentry_tools::FINISH_TOOL)
        .and_then(|r| r.data.as_ref())
        .and_then(|d| d.get("answer"))
        .and_then(|a| a.as_str())
        .map(str::to_string)
}

fn policy_error(message: &str) -> ResultEnvelope {
    ResultEnvelope::failure(
        "",
        "policy",
        ToolError::new(ErrorCode::Einval, message.to_string())
            .with_action("propose tool calls with valid JSON arguments, or a final answer"),
    )
}

fn lost_call(call: &ToolCall, why: &str) -> ResultEnvelope {
    ResultEnvelope::failure(
        &call.id,
        &call.name,
        ToolError::new(
            ErrorCode::Einternal,
            format!(
                "the tool executor stopped during this call, so its outcome is unknown \
                 ({why}); the executor was restarted"
            ),
        )
        .with_action("check whether the action took effect before repeating it"),
    )
}

/// hash(action, observation, world version). Call ids and timings are left out so
/// a model that repeats itself under fresh ids is still seen repeating. Raw
/// argument strings are hashed as sent (not re-parsed): a looping model repeats
/// them byte for byte.
fn step_fingerprint(decision: &Decision, results: &[Arc<ResultEnvelope>], world: &str) -> u64 {
    let mut f = Fingerprinter::new();
    match decision {
        Decision::ToolCalls { calls } => {
            for c in calls {
                f.str(&c.name);
                match &c.arguments {
                    ToolArguments::Raw(raw) => f.str(raw.trim()),
                    ToolArguments::Parsed(v) => f.value(v),
                };
            }
        }
        Decision::Final { answer } => {
            f.str("final").str(answer);
        }
        Decision::Failed { message, .. } => {
            f.str("failed").str(message);
        }
    }
    for r in results {
        r.fingerprint_observation(&mut f);
    }
    f.str(world);
    (f.finish_u128() >> 64) as u64
}
