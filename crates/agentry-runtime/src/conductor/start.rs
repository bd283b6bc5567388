//! Start-up: the conductor spawns its four children, linked to it, in the order
//! they need each other (budget supervisor, state keeper, executor, policy), and
//! then arms itself (the cancellation watch, the ticker, the first step).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;

use agentry_protocol::state::{RunStatus, SessionEntry};
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};
use tokio_util::sync::CancellationToken;

use super::args::ConductorArgs;
use super::msg::{ConductorMsg, ConductorPost};
use super::outcome::Live;
use super::phase::Phase;
use super::state::{Children, ConductorState, Wiring};
use super::ticker::Ticker;
use crate::budget::{BudgetArgs, BudgetMsg, BudgetSupervisor, ParentLink, ToolCallAllowance};
use crate::clock::RunClock;
use crate::config::Driver;
use crate::durable::Progress;
use crate::executor::{ExecutorArgs, ToolExecutor};
use crate::policy::{PolicyActor, PolicyArgs, SpanContent};
use crate::registry::VisibleTools;
use crate::state::{RunState, StateKeeper, StateMsg};

/// Spawns the run's actors and builds the conductor's state (its `pre_start`).
pub(super) async fn start(
    myself: ActorRef<ConductorMsg>,
    mut args: Box<ConductorArgs>,
) -> Result<Box<ConductorState>, ActorProcessingErr> {
    let cell = myself.get_cell();
    // The run's clock, once: the supervisor's alarm and the executor's
    // `ETIMEDOUT` read the same deadline.
    let clock = RunClock::start(
        args.restore.as_ref().map(|r| r.elapsed),
        args.config.limits.deadline_ms,
        args.lineage.deadline_at,
    );
    let own_calls = args
        .restore
        .as_ref()
        .map_or(0, |r| r.state.progress().tool_calls);
    let allowance = ToolCallAllowance::new(own_calls);
    let budget_args = budget_args(&args, clock, allowance.clone());
    let budget = spawn_child(BudgetSupervisor, budget_args, &cell).await?;
    let resumed = args.restore.is_some();
    let woken = args.restore.as_ref().is_some_and(|r| r.woken);
    let initial = initial_state(&mut args);
    let mut resumption = Resumption::new(&initial, resumed);
    resumption.asleep = woken && initial.snapshot().status == RunStatus::Sleeping;
    let state = spawn_child(StateKeeper, Box::new(initial), &cell).await?;
    let traceparent = super::span::run_traceparent(&args.span, &args.lineage, &args.run_id);
    let links = ExecutorLinks {
        deadline: clock.deadline_at,
        budget: &budget,
        state: &state,
        traceparent: &traceparent,
    };
    let executor_args = executor_args(&args, links)?;
    let executor = spawn_child(ToolExecutor, executor_args.clone(), &cell).await?;
    let model: Arc<str> = args.policy.name().into();
    let content = super::span::content_redactor(&args.config, &args.span, args.events.redactor());
    let policy_args = PolicyArgs {
        tools: VisibleTools::new(args.registry.clone(), args.config.grants.clone()),
        policy: args.policy,
        run_id: Arc::clone(&args.run_id),
        goal: args.config.goal.clone(),
        events: args.events.clone(),
        traceparent: Arc::clone(&traceparent),
        span: args.span.clone(),
        content: content.map(SpanContent),
    };
    let policy = spawn_child(PolicyActor, policy_args, &cell).await?;
    let children = Children {
        executor_args,
        policy,
        executor,
        state,
        budget,
    };
    args.live.set(Live {
        conductor: ConductorPost::new(myself.clone(), args.posted.clone()),
        actors: children.actors(),
    });
    let wiring = Wiring {
        durable: args.log.is_some(),
        run_id: args.run_id,
        config: args.config,
        run_token: args.run_token,
        claim: args.claim,
        outcome: args.outcome,
        events: args.events,
        trace: args.trace,
        parent_id: args.lineage.parent.as_ref().map(|p| Arc::clone(&p.run_id)),
        parent_budget: args.lineage.parent.and_then(|p| p.budget),
        posted: args.posted,
        live: args.live,
        gauge: args.gauge,
        cut: args.cut,
        traceparent,
        span: args.span,
    };
    Ok(Box::new(ConductorState::new(
        wiring, children, model, clock, resumption, allowance,
    )))
}

/// Spawns a child linked to the conductor. Boxed: nested inline, the four spawn
/// futures made the start-up future ~9 KB, moved several times per run.
fn spawn_child<A: Actor>(
    actor: A,
    args: A::Arguments,
    cell: &ActorCell,
) -> Pin<Box<impl Future<Output = Result<ActorRef<A::Msg>, SpawnErr>>>> {
    let cell = cell.clone();
    Box::pin(async move {
        let (child, _) = Actor::spawn_linked(None, actor, args, cell).await?;
        Ok(child)
    })
}

fn budget_args(args: &ConductorArgs, clock: RunClock, allowance: ToolCallAllowance) -> BudgetArgs {
    BudgetArgs {
        limits: args.config.limits,
        spent: args
            .restore
            .as_ref()
            .map(|r| r.state.snapshot().control.spent)
            .unwrap_or_default(),
        run_token: args.run_token.clone(),
        clock,
        parent: args
            .lineage
            .parent
            .as_ref()
            .and_then(|p| p.budget.clone())
            .map(|budget| ParentLink {
                budget,
                child_id: args.run_id.to_string(),
            }),
        allowance,
        tree: args.config.tree,
        delegated: args
            .restore
            .as_ref()
            .map(|r| r.state.snapshot().control.delegated)
            .unwrap_or_default(),
        children: args
            .restore
            .as_ref()
            .map(|r| r.children.clone())
            .unwrap_or_default(),
    }
}

/// The state keeper's state: a resumed run's (taken from `args`), or a fresh
/// one; with its store, and watched when the run's span is on.
fn initial_state(args: &mut ConductorArgs) -> RunState {
    let initial = match args.restore.take() {
        Some(r) => r.state,
        None => RunState::initial(&args.config),
    };
    let initial = match &args.log {
        Some(log) => initial
            .with_log(log.clone())
            .numbered_by(args.events.clone()),
        None => initial,
    };
    if args.span.is_disabled() {
        initial
    } else {
        initial.observed_as(Arc::clone(&args.run_id))
    }
}

/// What the executor gets besides the run's configuration: the run's clock,
/// its sibling actors and its traceparent.
struct ExecutorLinks<'a> {
    deadline: Option<tokio::time::Instant>,
    budget: &'a ActorRef<BudgetMsg>,
    state: &'a ActorRef<StateMsg>,
    traceparent: &'a Arc<str>,
}

fn executor_args(
    args: &ConductorArgs,
    links: ExecutorLinks<'_>,
) -> Result<ExecutorArgs, ActorProcessingErr> {
    let ExecutorLinks {
        deadline,
        budget,
        state,
        traceparent,
    } = links;
    let config = &args.config;
    // Opened once: every file operation of the run resolves beneath this
    // handle, whatever the model does to the path meanwhile.
    let root = Arc::new(agentry_tools::fs::WorkRoot::open(&config.workdir)?);
    Ok(ExecutorArgs {
        root,
        run_id: Arc::clone(&args.run_id),
        registry: args.registry.clone(),
        grants: config.grants.clone(),
        artifacts: Arc::from(
            config
                .artifacts
                .clone()
                .unwrap_or_else(|| config.workdir.join(".agentry"))
                .as_path(),
        ),
        workdir: Arc::from(config.workdir.as_path()),
        run_token: args.run_token.clone(),
        deadline,
        budget: budget.clone(),
        events: args.events.clone(),
        max_parallel: config.max_parallel,
        result_cap: config.result_cap,
        retry: config.retry,
        state: state.clone(),
        approval: config.approval.clone(),
        agents: Some(Arc::clone(&args.agents)),
        log: args.log.clone(),
        known_ledger: args.ledger.clone(),
        traceparent: Arc::clone(traceparent),
        span: args.span.clone(),
        content: super::span::content_redactor(config, &args.span, args.events.redactor()),
        sandbox: Arc::clone(&args.sandboxes),
    })
}

/// Where the conductor's counters start: a fresh run's zeros, or what a resumed
/// run's state keeper was restored with.
struct Resumption {
    progress: Progress,
    paused: bool,
    pending: Vec<SessionEntry>,
    world_digest: Arc<str>,
    /// A resumed (or woken) run's inputs so far: its next step's fingerprint
    /// goes on counting from there, so a reply to a new message after a wake
    /// is never a repeat of the one before it.
    inputs_applied: u64,
    /// Woken from hibernation and stored asleep.
    asleep: bool,
}

impl Resumption {
    fn new(initial: &RunState, resumed: bool) -> Resumption {
        Resumption {
            progress: initial.progress().clone(),
            paused: resumed && initial.snapshot().status == RunStatus::Paused,
            pending: initial.session().to_vec(),
            world_digest: initial.world_digest().into(),
            inputs_applied: if resumed {
                initial.snapshot().inputs
            } else {
                0
            },
            asleep: false,
        }
    }
}

impl ConductorState {
    fn new(
        wiring: Wiring,
        children: Children,
        model: Arc<str>,
        clock: RunClock,
        resumption: Resumption,
        allowance: ToolCallAllowance,
    ) -> ConductorState {
        let Resumption {
            progress,
            paused,
            pending,
            world_digest,
            inputs_applied,
            asleep,
        } = resumption;
        let window = wiring.config.progress_window;
        let fingerprints: VecDeque<u64> = progress
            .fingerprints
            .iter()
            .rev()
            .take(window)
            .rev()
            .copied()
            .collect();
        ConductorState {
            task_id: wiring.config.task_id.as_str().into(),
            step_cut: wiring.cut.token(),
            wiring,
            model,
            children,
            pending,
            fingerprints,
            inputs_applied,
            world_digest,
            clock,
            steps: progress.steps,
            phase: Phase::starting(paused),
            in_flight: progress.in_flight,
            ending: progress.ending,
            allowance,
            unseen: 0,
            delegated: agentry_protocol::budget::Usage::default(),
            handled: 0,
            turn_open: false,
            denied: Vec::new(),
            wake_pending: false,
            ticks: None,
            sleeps: 0,
            released: None,
            stored_asleep: asleep,
        }
    }

    /// After start-up (the conductor's `post_start`): watch the run's token,
    /// start the ticker, take or schedule the first step.
    pub(super) async fn arm(
        &mut self,
        myself: &ActorRef<ConductorMsg>,
    ) -> Result<(), ActorProcessingErr> {
        // A cancellation while no step runs (paused, sleeping) must still stop the run.
        let token = self.wiring.run_token.clone();
        let me = ConductorPost::new(myself.clone(), self.wiring.posted.clone());
        if self.wiring.live.may_hibernate() && self.wiring.config.hibernate_after.is_some() {
            // Ends with this activation: a hibernated run holds no task.
            let released = CancellationToken::new();
            self.released = Some(released.clone());
            tokio::spawn(async move {
                tokio::select! {
                    () = token.cancelled() => {
                        let _ = me.cast(ConductorMsg::TokenCancelled);
                    }
                    () = released.cancelled() => {}
                }
            });
        } else {
            tokio::spawn(async move {
                token.cancelled().await;
                let _ = me.cast(ConductorMsg::TokenCancelled);
            });
        }
        if let Some(every) = self.wiring.config.tick_every {
            // Ticks make the agent time-driven: it steps on ticks, not in a loop.
            self.wiring.config.driver = Driver::Events;
            self.ticks = Some(Ticker::start(myself, every));
        }
        if self.phase.is_paused() {
            // Resumed while paused: the step (or the decided one) runs on resume.
            self.phase.take_step();
            return Ok(());
        }
        match self.wiring.config.driver {
            // Its first step was cast as it started (see `Conductor::pre_start`).
            Driver::Pull | Driver::Events if self.resumes_a_step() => {}
            Driver::Pull => myself.cast(ConductorMsg::Step)?,
            // Event- and time-driven agents sleep until their first event.
            Driver::Events => {
                // A woken run is stored asleep already: no commit for that.
                if !std::mem::take(&mut self.stored_asleep) {
                    self.set_status(RunStatus::Sleeping).await;
                }
                self.plan_hibernation(myself);
            }
        }
        Ok(())
    }

    /// A resumed run that first finishes the step it had decided (or the end
    /// it had reached), unless it is paused.
    pub(super) fn resumes_a_step(&self) -> bool {
        !self.phase.is_paused() && (self.in_flight.is_some() || self.ending.is_some())
    }
}
