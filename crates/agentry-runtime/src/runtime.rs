//! The embedding API: a [`Runtime`] that starts runs, and a [`RunHandle`] per run.

use std::sync::Arc;

use agentry_protocol::event::EventRecord;
use agentry_protocol::state::RunSnapshot;
use agentry_protocol::stop::StopReason;
use ractor::Actor;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::conductor::{
    Conductor, ConductorArgs, ConductorMsg, ConductorPost, Lineage, Posted, RunActors, RunOutcome,
};
use crate::config::RunConfig;
use crate::config::TreeLimits;
use crate::desk::{ChildPolicyFactory, RunDesk};
use crate::durable::{Durability, RunLog, StoreWriter};
use crate::error::RuntimeError;
use crate::events::EventSink;
use crate::policy::Policy;
use crate::registry::Grants;
use crate::registry::ToolRegistry;
use crate::state::{AppliedAt, ApprovalDecision, HumanInputError, StateMsg};
use crate::trace::TraceWriter;
use agentry_protocol::state::PendingApproval;
use agentry_protocol::trace::RunInput;

/// Starts runs. Cheap to clone; clones share the tool registry and the shutdown token.
#[derive(Clone)]
pub struct Runtime {
    registry: Arc<ToolRegistry>,
    root: CancellationToken,
    child_policy: Option<ChildPolicyFactory>,
    /// The store runs are committed to, if any.
    pub(crate) store: Option<StoreWriter>,
    pub(crate) durability: Durability,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime with these tools.
    pub fn new(registry: ToolRegistry) -> Self {
        Runtime {
            registry: Arc::new(registry),
            root: CancellationToken::new(),
            child_policy: None,
            store: None,
            durability: Durability::Strict,
        }
    }

    /// A runtime with only the built-in tools.
    pub fn with_builtins() -> Result<Self, RuntimeError> {
        Ok(Runtime::new(ToolRegistry::with_builtins()?))
    }

    /// Sets how children started by `agent.spawn` without an inline script get
    /// their policy (e.g. the same model adapter as their parent).
    pub fn with_child_policy(mut self, factory: ChildPolicyFactory) -> Self {
        self.child_policy = Some(factory);
        self
    }

    pub(crate) fn child_policy(&self) -> Option<&ChildPolicyFactory> {
        self.child_policy.as_ref()
    }

    pub(crate) fn root_token(&self) -> CancellationToken {
        self.root.child_token()
    }

    /// The tool registry.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Starts a run and returns its handle at once. Must be called inside a tokio
    /// runtime. The working directory must exist.
    pub async fn start(
        &self,
        config: RunConfig,
        policy: impl Policy,
    ) -> Result<RunHandle, RuntimeError> {
        self.start_boxed(config, Box::new(policy)).await
    }

    /// [`Runtime::start`] with an already boxed policy.
    pub async fn start_boxed(
        &self,
        mut config: RunConfig,
        policy: Box<dyn Policy>,
    ) -> Result<RunHandle, RuntimeError> {
        if let Some(id) = &config.run_id {
            crate::config::check_run_id(id)?;
        }
        if self.store.is_some() && config.run_id.is_none() {
            // Fixed now: the stored record and the trace id derive from it.
            config.run_id = Some(uuid::Uuid::now_v7().to_string());
        }
        let lineage = Lineage::root(config.run_id.as_ref().filter(|_| self.store.is_some()));
        let tree = config.tree;
        let grants = config.grants.clone();
        self.start_inner(
            config,
            policy,
            lineage,
            self.root.child_token(),
            tree,
            grants,
            Durable::New,
        )
        .await
    }

    /// Starts a child of `parent`: its budget is carved out of what the parent has
    /// left (a requested limit must fit; an unset one on a dimension the parent
    /// limits gets all that is left; the deadline is clamped to the parent's), its
    /// grants may not exceed the parent's, every spend is charged up the tree, and
    /// what it does not use returns to the parent when it ends. Cancelling or
    /// stopping the parent cancels the child. Refused, naming why, when the parent
    /// cannot cover it or a depth or fan-out limit would be passed.
    pub async fn start_child(
        &self,
        parent: &RunHandle,
        config: RunConfig,
        policy: impl Policy,
    ) -> Result<RunHandle, RuntimeError> {
        self.start_child_boxed(parent, config, Box::new(policy))
            .await
    }

    /// [`Runtime::start_child`] with an already boxed policy.
    pub async fn start_child_boxed(
        &self,
        parent: &RunHandle,
        mut config: RunConfig,
        policy: Box<dyn Policy>,
    ) -> Result<RunHandle, RuntimeError> {
        let refuse = |message: String| RuntimeError::ChildRefused {
            parent: parent.run_id.to_string(),
            message,
        };
        if parent.outcome().is_some() {
            return Err(refuse("the parent has stopped".to_string()));
        }
        let depth = parent.lineage.depth + 1;
        if depth > parent.tree.max_depth {
            return Err(refuse(format!(
                "a child at depth {depth} would pass the tree's max_depth of {}",
                parent.tree.max_depth
            )));
        }
        let live = ask(&parent.actors.budget, BudgetMsg::LiveChildren)
            .await
            .map_err(|e| refuse(e.to_string()))?;
        if live >= parent.tree.max_children {
            return Err(refuse(format!(
                "the parent already runs {live} children, its max_children"
            )));
        }
        if let Some(extra) = config
            .grants
            .entries()
            .iter()
            .find(|g| !parent.grants.covers(g))
        {
            return Err(refuse(format!(
                "grant {extra:?} is more than the parent holds ({:?})",
                parent.grants.entries()
            )));
        }
        if let Some(id) = &config.run_id {
            crate::config::check_run_id(id)?;
        }
        let run_id = config
            .run_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let request = config.limits;
        let child_id = run_id.clone();
        let (limits, parent_deadline) = ask(&parent.actors.budget, |reply| BudgetMsg::Reserve {
            child_id,
            request,
            reply,
        })
        .await
        .map_err(|e| refuse(e.to_string()))?
        .map_err(|m| refuse(format!("the parent cannot cover the child's budget: {m}")))?;
        config.limits = limits;
        config.run_id = Some(run_id.clone());
        let lineage = Lineage {
            parent: Some((Arc::clone(&parent.run_id), parent.actors.budget.clone())),
            depth,
            trace_id: parent.lineage.trace_id.clone(),
            deadline_at: parent_deadline,
        };
        let grants = config.grants.clone();
        let started = self
            .start_inner(
                config,
                policy,
                lineage,
                parent.run_token.child_token(),
                parent.tree,
                grants,
                // Children live in memory: resuming a parent does not resume them.
                Durable::No,
            )
            .await;
        if started.is_err() {
            // Nothing runs: the reservation goes back.
            let _ = parent
                .actors
                .budget
                .cast(BudgetMsg::Release { child_id: run_id });
        }
        started
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start_inner(
        &self,
        config: RunConfig,
        policy: Box<dyn Policy>,
        lineage: Lineage,
        run_token: CancellationToken,
        tree: TreeLimits,
        grants: Grants,
        durable: Durable,
    ) -> Result<RunHandle, RuntimeError> {
        if !config.workdir.is_dir() {
            return Err(RuntimeError::Workdir {
                path: config.workdir.clone(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
            });
        }
        let run_id: Arc<str> = Arc::from(
            config
                .run_id
                .clone()
                .unwrap_or_else(|| uuid::Uuid::now_v7().to_string())
                .as_str(),
        );
        let (log, new_claim) = self.run_log(&run_id, &durable);
        if let (Some(log), Some(claim)) = (&log, &new_claim) {
            // On disk before the caller gets a handle: a run it knows of can be resumed.
            crate::resume::create_record(log, &config, claim).await?;
        }
        let (restore, timers, stored_inbox, claim) = match durable {
            Durable::Resume(r) => {
                let r = *r;
                (Some(r.restore), r.timers, r.inbox, Some(r.claim))
            }
            Durable::New | Durable::No => (None, Vec::new(), Vec::new(), new_claim),
        };
        let inbox = log.as_ref().map(|_| {
            let next = stored_inbox
                .iter()
                .map(|(seq, _)| seq + 1)
                .max()
                .unwrap_or(1);
            Arc::new(std::sync::atomic::AtomicU64::new(next))
        });
        let (outcome_tx, outcome_rx) = watch::channel(None);
        // A resumed run goes on writing the trace it started.
        let resumed = restore.is_some();
        let trace = config
            .trace
            .as_deref()
            .map(|path| TraceWriter::open(path, resumed))
            .transpose()?;
        let from_start = config.events_from_start;
        let events = EventSink::new(Arc::clone(&run_id), from_start);
        let desk = Arc::new(RunDesk::new(self.clone(), config.workdir.clone()));
        let (actors_tx, actors_rx) = tokio::sync::oneshot::channel();
        let posted = Posted::default();
        let args = ConductorArgs {
            run_id: Arc::clone(&run_id),
            config,
            registry: Arc::clone(&self.registry),
            policy,
            run_token: run_token.clone(),
            outcome: outcome_tx,
            events: events.clone(),
            trace,
            actors: Some(actors_tx),
            lineage: lineage.clone(),
            agents: Arc::clone(&desk) as Arc<dyn agentry_tools::agents::AgentDesk>,
            log: log.clone(),
            restore,
            posted: posted.clone(),
            claim,
        };
        let (conductor, _) =
            Actor::spawn(None, Conductor, args)
                .await
                .map_err(|e| RuntimeError::Spawn {
                    run_id: run_id.to_string(),
                    actor: "conductor",
                    message: e.to_string(),
                })?;
        // The conductor's pre_start has run, so the address is there already.
        let actors = actors_rx.await.map_err(|_| RuntimeError::Spawn {
            run_id: run_id.to_string(),
            actor: "conductor",
            message: "the conductor did not report its actors".to_string(),
        })?;
        let handle = RunHandle {
            run_id,
            conductor: ConductorPost::new(conductor, posted),
            actors,
            run_token,
            outcome: outcome_rx,
            events,
            lineage,
            tree,
            grants,
            log,
            inbox,
        };
        desk.set_parent(handle.clone());
        // Inputs accepted before the restart but never applied, in their order,
        // before anything sent through the new handle.
        for (seq, input) in stored_inbox {
            match serde_json::from_value::<RunInput>(input) {
                Ok(input) => {
                    let _ = handle.conductor.cast(ConductorMsg::StoredInput {
                        source: crate::state::InputSource::Inbox(seq),
                        input,
                    });
                }
                Err(e) => {
                    tracing::warn!(run_id = %handle.run_id, seq, error = %e, "an inbox entry does not parse; dropped");
                }
            }
        }
        for timer in timers {
            handle.arm_timer(timer);
        }
        Ok(handle)
    }

    /// A durable run's view of the store, and for a new one this process's
    /// claim on it (a resumed run was claimed by `resume` already).
    fn run_log(
        &self,
        run_id: &Arc<str>,
        durable: &Durable,
    ) -> (Option<RunLog>, Option<crate::owner::Claim>) {
        let Some(writer) = &self.store else {
            return (None, None);
        };
        let (token, claim) = match durable {
            Durable::No => return (None, None),
            Durable::Resume(r) => (Arc::from(r.claim.owner.token.as_str()), None),
            Durable::New => {
                let claim = crate::owner::Claim::new(run_id, writer.key());
                (Arc::from(claim.owner.token.as_str()), Some(claim))
            }
        };
        let log = RunLog {
            run_id: Arc::clone(run_id),
            writer: writer.clone(),
            mode: self.durability,
            owner_token: token,
        };
        (Some(log), claim)
    }

    /// Starts a run and waits for its outcome.
    pub async fn run(
        &self,
        config: RunConfig,
        policy: impl Policy,
    ) -> Result<RunOutcome, RuntimeError> {
        self.start(config, policy).await?.wait().await
    }

    /// Cancels every run of this runtime: in-flight tools are cancelled and each run
    /// stops with `user_abort`.
    pub fn shutdown(&self) {
        self.root.cancel();
    }
}

/// A handle on one run. Cloneable; every clone can wait for the outcome.
#[derive(Debug, Clone)]
pub struct RunHandle {
    run_id: Arc<str>,
    /// Every message to the conductor is counted (see `Posted`).
    conductor: ConductorPost,
    /// The run's actors; state is read from the state keeper directly (it never
    /// blocks), not through the conductor, which may be mid-step.
    actors: RunActors,
    /// Cancelling it interrupts the step in progress (the conductor's mailbox is
    /// busy until the step ends, so a message alone would wait behind it).
    run_token: CancellationToken,
    outcome: watch::Receiver<Option<RunOutcome>>,
    events: EventSink,
    /// Where the run sits in its agent tree.
    lineage: Lineage,
    /// The tree's depth and fan-out limits (the root's).
    tree: TreeLimits,
    /// The run's grants (a child may not hold more).
    grants: Grants,
    /// Where a durable run commits (its timers too).
    log: Option<RunLog>,
    /// A durable run's next inbox position, shared by every clone.
    inbox: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// Whether a run is committed to the runtime's store.
pub(crate) enum Durable {
    /// In memory only.
    No,
    /// A new run: its record is written before the handle is returned.
    New,
    /// A run read back from the store.
    Resume(Box<crate::resume::Resumed>),
}

impl RunHandle {
    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Waits for the run to stop.
    pub async fn wait(&self) -> Result<RunOutcome, RuntimeError> {
        let mut rx = self.outcome.clone();
        let lost = || RuntimeError::Lost {
            run_id: self.run_id.to_string(),
        };
        let outcome = rx.wait_for(Option::is_some).await.map_err(|_| lost())?;
        outcome.clone().ok_or_else(lost)
    }

    /// The outcome, if the run has stopped.
    pub fn outcome(&self) -> Option<RunOutcome> {
        self.outcome.borrow().clone()
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
        let _ = self
            .conductor
            .cast(ConductorMsg::Abort(StopReason::UserAbort));
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
    /// stopped by then.
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
            log.writer.submit(vec![agentry_store::Write::SetTimer {
                run_id: log.run_id.to_string(),
                timer: timer.clone(),
            }]);
        }
        self.arm_timer(timer);
    }

    /// Schedules a (possibly restored) timer; a durable run's timer is removed
    /// from the store in the same commit as the event it delivers.
    fn arm_timer(&self, timer: agentry_store::TimerRecord) {
        let conductor = self.conductor.clone();
        let token = self.run_token.clone();
        let delay = std::time::Duration::from_millis(
            timer
                .due_at_ms
                .saturating_sub(agentry_protocol::now_millis()),
        );
        let durable = self.log.is_some();
        tokio::spawn(async move {
            tokio::select! {
                _ = token.cancelled() => {}
                _ = tokio::time::sleep(delay) => {
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
                    let _ = conductor.cast(msg);
                }
            }
        });
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

    fn input(&self, input: RunInput) -> Result<(), RuntimeError> {
        if self.outcome.borrow().is_some() {
            return Err(RuntimeError::Stopped {
                run_id: self.run_id.to_string(),
            });
        }
        let msg = match (&self.log, &self.inbox) {
            (Some(log), Some(next)) => {
                // Into the run's stored inbox first (queued at the writer, so on
                // disk before anything the run commits later), out of it in the
                // commit that applies it: a crash in between re-delivers it.
                let seq = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                log.writer.submit(vec![agentry_store::Write::Enqueue {
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
        self.conductor.cast(msg).map_err(|_| RuntimeError::Stopped {
            run_id: self.run_id.to_string(),
        })
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
        match self.actors.state.call(msg, None).await {
            Ok(ractor::rpc::CallResult::Success(Ok(seq))) => Ok(seq),
            Ok(ractor::rpc::CallResult::Success(Err(e))) => {
                Err(missing(self.run_id.to_string(), e.to_string()))
            }
            _ => Err(RuntimeError::Stopped {
                run_id: self.run_id.to_string(),
            }),
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
        self.lineage.parent.as_ref().map(|(id, _)| id.as_ref())
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
        ask(&self.actors.budget, BudgetMsg::Snapshot).await.ok()
    }

    /// The run's actors as spawned (see [`RunActors`]).
    pub fn actors(&self) -> &RunActors {
        &self.actors
    }

    /// Key fields of the run state, while it runs.
    pub async fn snapshot(&self) -> Option<RunSnapshot> {
        match self.actors.state.call(StateMsg::Snapshot, None).await {
            Ok(ractor::rpc::CallResult::Success(s)) => Some(s),
            _ => self.outcome().map(|o| o.state),
        }
    }
}
