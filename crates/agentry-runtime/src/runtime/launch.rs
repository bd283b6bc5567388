//! Starting a run: a root run ([`Runtime::start`]), a child carved from its
//! parent ([`Runtime::start_child`]), or a stored run going on (`resume.rs`).
//! Every start ends in [`Runtime::launch`], which spawns the conductor.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use agentry_protocol::trace::RunInput;
use agentry_store::{InboxRecord, TimerRecord};
use ractor::Actor;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Runtime;
use super::about::RunAbout;
use super::children::RunChildren;
use super::handle::{ChildEntry, ChildList, RunHandle, RunParts};
use super::record::{Resumed, create_record, fresh_mark};
use crate::ask::ask;
use crate::budget::BudgetMsg;
use crate::conductor::{
    Conductor, ConductorArgs, ConductorMsg, Lineage, LiveActors, ParentRun, Posted, Restore,
    run_span,
};
use crate::config::{RunConfig, TreeLimits};
use crate::durable::RunLog;
use crate::error::{ChildRefusal, RuntimeError};
use crate::events::EventSink;
use crate::inbox::InboxGauge;
use crate::interrupt::StepCut;
use crate::owner::Claim;
use crate::policy::Policy;
use crate::redaction::RunRedaction;
use crate::registry::Grants;
use crate::trace::{Sampling, TraceWriter};

/// Whether a run is committed to the runtime's store.
pub(crate) enum Durable {
    /// In memory only.
    No,
    /// A new run: its record is written before the handle is returned.
    New,
    /// A run read back from the store.
    Resume(Box<Resumed>),
}

/// Everything a run is started with, whichever way it starts.
pub(super) struct Launch {
    pub(super) config: RunConfig,
    pub(super) policy: Box<dyn Policy>,
    /// Where the run sits in its tree.
    pub(super) lineage: Lineage,
    /// Cancelled with the runtime (a root) or with the parent (a child).
    pub(super) run_token: CancellationToken,
    /// The tree's depth and fan-out limits (the root's).
    pub(super) tree: TreeLimits,
    pub(super) grants: Grants,
    pub(super) durable: Durable,
    /// The parent's redaction (a child's redactor builds on it).
    pub(super) parent_redaction: Option<Arc<RunRedaction>>,
}

/// The id a run starts under (its configured one, else a fresh one), once its
/// working directory is known to exist.
fn checked_run_id(config: &RunConfig) -> Result<Arc<str>, RuntimeError> {
    if !config.workdir.is_dir() {
        return Err(RuntimeError::Workdir {
            path: config.workdir.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
        });
    }
    Ok(match &config.run_id {
        Some(id) => Arc::from(id.as_str()),
        None => Arc::from(uuid::Uuid::now_v7().to_string()),
    })
}

/// The run's trace writer, if it writes one: a resumed run goes on writing
/// the trace it started. Its lines pass `redactor`; its step lines are
/// sampled by the tree's trace id.
fn open_trace(
    config: &RunConfig,
    stored: &Stored,
    lineage: &Lineage,
    redactor: &Arc<agentry_redact::Redactor>,
) -> Result<Option<TraceWriter>, RuntimeError> {
    let resumed = stored.restore.is_some();
    let sampling = Sampling::of(config.observe.sample, &lineage.trace_id);
    config
        .trace
        .as_deref()
        .map(|path| TraceWriter::open(path, resumed, Arc::clone(redactor), sampling))
        .transpose()
}

/// A run just started: its handle, and the desk its `agent.*` calls go through
/// (a resumed run's stored children are adopted there).
pub(super) struct Launched {
    pub(super) handle: RunHandle,
    pub(super) desk: Arc<RunChildren>,
}

/// What a resumed run brings back from the store besides its record; empty for
/// a new run.
struct Stored {
    restore: Option<Restore>,
    timers: Vec<TimerRecord>,
    /// Inputs accepted but not applied before the restart: (position, input).
    inbox: Vec<InboxRecord>,
    claim: Option<Claim>,
    /// Brought back hibernated (see `ResumeOptions::dormant`).
    dormant: bool,
}

impl Stored {
    /// A resumed run's parts; for a new run only its claim (if durable).
    fn of(durable: Durable, new_claim: Option<Claim>) -> Stored {
        match durable {
            Durable::Resume(r) => {
                let r = *r;
                Stored {
                    restore: Some(r.restore),
                    timers: r.timers,
                    inbox: r.inbox,
                    claim: Some(r.claim),
                    dormant: r.dormant,
                }
            }
            Durable::New | Durable::No => Stored {
                restore: None,
                timers: Vec::new(),
                inbox: Vec::new(),
                claim: new_claim,
                dormant: false,
            },
        }
    }

    /// The next free inbox position: after every stored one.
    fn next_inbox(&self) -> AtomicU64 {
        let next = self.inbox.iter().map(|e| e.seq + 1).max().unwrap_or(1);
        AtomicU64::new(next)
    }
}

impl Runtime {
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
        let lineage = Lineage::root(
            config.run_id.as_ref().filter(|_| self.store.is_some()),
            config.traceparent.as_deref(),
        );
        let tree = config.tree;
        let grants = config.grants.clone();
        self.launch(Launch {
            config,
            policy,
            lineage,
            run_token: self.root.child_token(),
            tree,
            grants,
            durable: Durable::New,
            parent_redaction: None,
        })
        .await
    }

    /// Starts a child of `parent`: its budget is carved out of what the parent has
    /// left beyond its reserve (a requested limit must fit; an unset one on a
    /// dimension the parent limits gets the child's share, see [`TreeLimits`];
    /// the deadline is clamped to the parent's), its
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
        // The span the caller runs in (the `execute_tool agent.spawn` span, for
        // a model's spawn) is the child's span's parent.
        let span = tracing::Span::current();
        let depth = admit_child(parent, &config).await?;
        if let Some(id) = &config.run_id {
            crate::config::check_run_id(id)?;
        }
        let run_id = config
            .run_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let child_id = run_id.clone();
        let request = config.limits;
        let parent_budget = parent
            .live
            .budget()
            .ok_or_else(|| refuse(parent, ChildRefusal::ParentStopped))?;
        let grant = ask(&parent_budget, |reply| BudgetMsg::Reserve {
            child_id,
            request,
            reply,
        })
        .await
        .map_err(|e| refuse(parent, ChildRefusal::ParentGone(e)))?
        .map_err(|r| refuse(parent, ChildRefusal::Budget(r)))?;
        config.limits = grant.limits;
        config.run_id = Some(run_id.clone());
        let lineage = Lineage {
            parent: Some(Box::new(ParentRun {
                run_id: Arc::clone(&parent.run_id),
                budget: Some(parent_budget.clone()),
                root_id: root_of(parent),
                span,
            })),
            depth,
            trace_id: parent.lineage.trace_id.clone(),
            deadline_at: grant.deadline_at,
        };
        let grants = config.grants.clone();
        let started = self
            .launch(Launch {
                config,
                policy,
                lineage,
                run_token: parent.run_token.child_token(),
                tree: parent.tree,
                grants,
                // A durable parent's children are durable too: stored with
                // their parent link, limits and deadline, resumed with it.
                durable: if parent.log.is_some() {
                    Durable::New
                } else {
                    Durable::No
                },
                parent_redaction: Some(Arc::clone(parent.events.redaction())),
            })
            .await;
        match &started {
            Ok(child) => parent.children.push(ChildEntry {
                handle: child.clone(),
                recorded: recorded_at_stop(child),
            }),
            // Nothing runs: the reservation goes back.
            Err(_) => {
                let _ = parent_budget.cast(BudgetMsg::Release { child_id: run_id });
            }
        }
        started
    }

    /// [`Runtime::launch_run`], for its handle.
    pub(super) async fn launch(&self, launch: Launch) -> Result<RunHandle, RuntimeError> {
        Ok(self.launch_run(launch).await?.handle)
    }

    /// Starts the run's actors (the conductor spawns the others) and returns its
    /// handle and its `agent.*` desk; a durable run's record is on disk first,
    /// and a resumed run's stored inputs and timers are delivered before
    /// anything sent through the handle.
    pub(super) async fn launch_run(&self, launch: Launch) -> Result<Launched, RuntimeError> {
        // Size: one list of what the run's actors and its handle share; split, the halves would pass ~18 values between them.
        let Launch {
            config,
            policy,
            mut lineage,
            run_token,
            tree,
            grants,
            durable,
            parent_redaction,
        } = launch;
        let run_id = checked_run_id(&config)?;
        // Before anything is recorded: a kernel that cannot enforce the
        // sandbox (or a tool's override of it) fails the start.
        let sandboxes = crate::sandbox::prepare_sandboxes(
            &config.sandbox,
            &config.workdir,
            &config.sandbox_host,
            Some(&self.registry.current()),
        )?;
        if config.sandbox.mode == agentry_sandbox::Mode::Off {
            tracing::warn!(run_id = %run_id, "[sandbox] mode = \"off\": this run's processes run with the operator's full reach");
        }
        let redaction =
            RunRedaction::for_run(&config, parent_redaction.as_ref(), &self.registry.current())?;
        // Before the handle is made: an exported span's trace id becomes the run's.
        let span = run_span(&config, &mut lineage, &run_id, &*policy, &redaction);
        let (log, new_claim) = self
            .recorded_log(&run_id, &durable, &redaction, &config, &lineage)
            .await?;
        if let Some(log) = &log {
            // Taken over by another process: the run stops here.
            log.lease.stops(&run_token);
        }
        let adopting = matches!(&durable, Durable::Resume(r) if r.adopting);
        let stored = Stored::of(durable, new_claim);
        let inbox = log.as_ref().map(|_| stored.next_inbox());

        let trace = open_trace(&config, &stored, &lineage, &redaction.redactor)?;
        // A resumed run numbers its events on after its store's record.
        let numbered =
            (stored.restore.as_ref()).map_or(0, |r| r.state.progress().resumed_numbering());
        let events = EventSink::new(Arc::clone(&run_id), config.events_from_start, redaction)
            .numbered_after(numbered);
        let about = RunAbout::of(&config, policy.as_ref(), lineage.parent.is_some());
        let children = Arc::new(RunChildren::new(self.clone(), &config, !adopting));
        let live = LiveActors::default();
        let (outcome_tx, outcome_rx) = crate::conductor::outcome_channel(&live);
        let posted = Posted::default();
        let gauge = Arc::new(InboxGauge::new(config.inbox_capacity));
        let cut = StepCut::new(&run_token);
        let hibernates = self.hibernates(&config, lineage.parent.is_none(), log.is_some());
        let dormant = hibernates && stored.dormant;
        let hibernate_after = config.hibernate_after;
        // Boxed: ractor's spawn moves its arguments at every level (~2.5 KB).
        let args = Box::new(ConductorArgs {
            run_id: Arc::clone(&run_id),
            config,
            registry: self.registry.clone(),
            policy,
            run_token: run_token.clone(),
            outcome: outcome_tx,
            events: events.clone(),
            trace,
            live: live.clone(),
            lineage: lineage.clone(),
            span,
            agents: Arc::clone(&children) as Arc<dyn agentry_tools::agents::AgentDesk>,
            log: log.clone(),
            // A new run has no ledger yet: its executor need not read one.
            ledger: if stored.restore.is_none() {
                crate::executor::KnownLedger::new(Vec::new())
            } else {
                crate::executor::KnownLedger::default()
            },
            restore: stored.restore,
            posted,
            gauge: Arc::clone(&gauge),
            claim: stored.claim,
            cut: cut.clone(),
            sandboxes,
        });
        let handle = RunHandle::from_parts(RunParts {
            run_id,
            live,
            run_token,
            cut,
            outcome: outcome_rx,
            events,
            lineage,
            tree,
            grants,
            log,
            inbox,
            gauge,
            about,
            children: ChildList::default(),
        });
        if hibernates {
            // Before the conductor arms itself: it plans its hibernation then.
            self.allow_hibernation(&handle, hibernate_after);
        }
        if dormant {
            crate::conductor::rest(args).await;
        } else if let Err(e) = spawn_conductor(&handle.run_id, args).await {
            // Its waker holds the handle: the slot lets it go.
            handle.live.fail_wake();
            return Err(e);
        }
        children.set_parent(handle.clone());
        deliver_stored(&handle, stored.inbox, stored.timers);
        Ok(Launched {
            handle,
            desk: children,
        })
    }

    /// [`Runtime::run_log`], with a new durable run's record on disk before
    /// the caller gets a handle: a run it knows of can be resumed.
    async fn recorded_log(
        &self,
        run_id: &Arc<str>,
        durable: &Durable,
        redaction: &RunRedaction,
        config: &RunConfig,
        lineage: &Lineage,
    ) -> Result<(Option<RunLog>, Option<Claim>), RuntimeError> {
        let (log, new_claim) = self.run_log(run_id, durable, &redaction.redactor);
        if let (Some(log), Some(claim)) = (&log, &new_claim) {
            let parent_id = lineage.parent.as_ref().map(|p| &*p.run_id);
            create_record(log, config, claim, parent_id).await?;
        }
        Ok((log, new_claim))
    }

    /// A durable run's view of the store, and for a new one this process's
    /// claim on it (a resumed run was claimed by `resume` already).
    fn run_log(
        &self,
        run_id: &Arc<str>,
        durable: &Durable,
        redactor: &Arc<agentry_redact::Redactor>,
    ) -> (Option<RunLog>, Option<Claim>) {
        let Some(writer) = &self.store else {
            return (None, None);
        };
        let (lease, mark, claim) = match durable {
            Durable::No => return (None, None),
            Durable::Resume(r) => (Arc::clone(r.claim.lease()), Arc::clone(&r.mark), None),
            Durable::New => {
                let claim = Claim::new(run_id, writer.key());
                (Arc::clone(claim.lease()), fresh_mark(), Some(claim))
            }
        };
        let log = RunLog::new(
            Arc::clone(run_id),
            writer.clone(),
            self.durability,
            lease,
            mark,
            Arc::clone(redactor),
        );
        (Some(log), claim)
    }
}

/// The receiver turns `true` once `child`'s end is recorded: a durable child
/// committed its stop itself before its outcome was published; one in memory
/// has nothing to record.
pub(super) fn recorded_at_stop(child: &RunHandle) -> watch::Receiver<bool> {
    let (done, recorded) = watch::channel(child.log.is_none());
    if child.log.is_some() {
        let child = child.clone();
        tokio::spawn(async move {
            let _ = child.wait().await;
            done.send_replace(true);
        });
    }
    recorded
}

/// The root run id of `parent`'s tree.
pub(super) fn root_of(parent: &RunHandle) -> Arc<str> {
    match &parent.lineage.parent {
        Some(p) => Arc::clone(&p.root_id),
        None => Arc::clone(&parent.run_id),
    }
}

/// A child refused before anything is reserved.
fn refuse(parent: &RunHandle, reason: ChildRefusal) -> RuntimeError {
    RuntimeError::ChildRefused {
        parent: parent.run_id.to_string(),
        reason,
    }
}

/// Whether `parent` may start a child configured so: it still runs, the child
/// stays within the tree's depth and fan-out limits, and asks for no grant
/// the parent lacks. The child's depth, or why not.
async fn admit_child(parent: &RunHandle, config: &RunConfig) -> Result<u32, RuntimeError> {
    if parent.outcome().is_some() {
        return Err(refuse(parent, ChildRefusal::ParentStopped));
    }
    let depth = parent.lineage.depth + 1;
    if depth > parent.tree.max_depth {
        return Err(refuse(
            parent,
            ChildRefusal::Depth {
                depth,
                max_depth: parent.tree.max_depth,
            },
        ));
    }
    let budget = parent
        .live
        .budget()
        .ok_or_else(|| refuse(parent, ChildRefusal::ParentStopped))?;
    let live = ask(&budget, BudgetMsg::LiveChildren)
        .await
        .map_err(|e| refuse(parent, ChildRefusal::ParentGone(e)))?;
    if live >= parent.tree.max_children {
        return Err(refuse(parent, ChildRefusal::FanOut { live }));
    }
    if let Some(extra) = config
        .grants
        .entries()
        .iter()
        .find(|g| !parent.grants.covers(g))
    {
        return Err(refuse(
            parent,
            ChildRefusal::Grants {
                grant: extra.clone(),
                held: parent.grants.entries().to_vec(),
            },
        ));
    }
    Ok(depth)
}

/// Spawns the conductor. Its `pre_start` has spawned the other actors and
/// put every address in the run's [`LiveActors`] when this returns.
pub(super) async fn spawn_conductor(
    run_id: &str,
    args: Box<ConductorArgs>,
) -> Result<(), RuntimeError> {
    Actor::spawn(None, Conductor, args)
        .await
        .map_err(|e| RuntimeError::Spawn {
            run_id: run_id.to_string(),
            actor: "conductor",
            message: e.to_string(),
        })?;
    Ok(())
}

/// A resumed run's inputs accepted before the restart but never applied, in
/// their order, then its timers not yet fired.
fn deliver_stored(handle: &RunHandle, inbox: Vec<InboxRecord>, timers: Vec<TimerRecord>) {
    for InboxRecord { seq, input } in inbox {
        match serde_json::from_value::<RunInput>(input) {
            Ok(input) => {
                // Accepted before the restart: held even past the bound.
                if crate::inbox::takes_slot(&input) {
                    handle.gauge.force_take();
                }
                if let Some(conductor) = handle.live.conductor() {
                    let _ = conductor.cast(ConductorMsg::StoredInput {
                        source: crate::state::InputSource::Inbox(seq),
                        input,
                    });
                }
            }
            Err(e) => {
                tracing::warn!(run_id = %handle.run_id, seq, error = %e, "an inbox entry does not parse; dropped");
            }
        }
    }
    for timer in timers {
        handle.arm_timer(timer);
    }
}
