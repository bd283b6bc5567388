//! Durable runs on the embedding API: a runtime on a store lists the runs it
//! holds and resumes an unfinished one from its last committed state.

use std::sync::Arc;

use agentry_protocol::state::RunStatus;
use agentry_protocol::state::SessionEntry;
use agentry_store::{Checkpoint, RunSummary, Store};
use agentry_tools::proc::Fenced;
use tokio::time::Duration;

use super::Runtime;
use super::handle::RunHandle;
use super::launch::{Durable, Launch};
use super::record::{Resumed, config_of, mark_of};
use super::regrow::{Place, StoredTree};
use crate::conductor::{Lineage, Restore};
use crate::config::RunConfig;
use crate::durable::{Durability, Progress, StoreWriter};
use crate::error::RuntimeError;
use crate::owner::Claim;
use crate::policy::Policy;
use crate::state::RunState;

impl Runtime {
    /// Commits every run this runtime starts to `store` (children included:
    /// a root's resume resumes its tree), so it can be resumed after the
    /// process dies. Starts the store's writer thread.
    pub fn with_store(
        mut self,
        store: Arc<dyn Store>,
        durability: Durability,
    ) -> Result<Self, RuntimeError> {
        let writer = StoreWriter::start(Arc::clone(&store)).map_err(|e| {
            RuntimeError::Store(agentry_store::StoreError::Io {
                path: store.location(),
                message: format!("cannot start the writer thread: {e}"),
            })
        })?;
        writer.set_lease(self.lease);
        self.store = Some(writer);
        self.durability = durability;
        Ok(self)
    }

    /// Lease mode, for several processes sharing one store (the nodes of a
    /// cluster, which may share a machine): a run's owner counts as alive
    /// while its heartbeat is younger than `lease`, whatever its pid says (a
    /// paused or partitioned node's pid is alive, yet it no longer keeps its
    /// runs), and this runtime's runs beat every third of `lease`. A resume
    /// takes over a run whose owner's lease expired; that owner's next write
    /// or heartbeat is refused by the store (the run's fencing epoch moved
    /// on), and it stops working on the run ([`RuntimeError::TakenOver`]).
    /// Give every process on the store the same lease. Without it (the
    /// default) a local owner is judged by its pid and start time and a
    /// remote one by a heartbeat older than [`crate::owner::OWNER_EXPIRY`].
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        if let Some(writer) = &self.store {
            writer.set_lease(self.lease);
        }
        self
    }

    /// The lease of lease mode ([`Runtime::with_lease`]), if it is on.
    pub fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// Lets go of every run of this runtime as if its process had died:
    /// nothing more of them reaches the store (its writer refuses every later
    /// batch), they are cancelled, and they stay unfinished in the store, where
    /// another runtime, in this process or another, can resume them at once.
    /// For a service that goes away leaving its durable runs to its successor;
    /// the runtime is unusable afterwards.
    pub async fn abandon(&self) {
        if let Some(writer) = &self.store {
            writer.close().await;
            crate::owner::forget(writer.key());
        }
        // Not `shutdown`: a hibernated run stays as it is in the store,
        // unwoken.
        self.root.cancel();
    }

    /// Returns once every write queued so far is on disk; the store's
    /// failure if one was lost (the writer refuses every later write then).
    /// A cheap round trip to the store's writer: a service's health check.
    pub async fn flush(&self) -> Result<(), RuntimeError> {
        Ok(self.writer()?.sync().await?)
    }

    /// The store, if this runtime has one.
    pub fn store(&self) -> Option<&Arc<dyn Store>> {
        self.store.as_ref().map(StoreWriter::store)
    }

    fn writer(&self) -> Result<&StoreWriter, RuntimeError> {
        self.store.as_ref().ok_or(RuntimeError::NoStore)
    }

    /// Every run the store holds, newest first.
    pub async fn runs(&self) -> Result<Vec<RunSummary>, RuntimeError> {
        let writer = self.writer()?;
        // Whatever is queued lands first, so the list is current.
        writer.sync().await?;
        Ok(writer.store().runs()?)
    }

    /// Runs the store holds that have not stopped: what a service restarted after
    /// a crash resumes.
    pub async fn unfinished_runs(&self) -> Result<Vec<RunSummary>, RuntimeError> {
        Ok(self
            .runs()
            .await?
            .into_iter()
            // A child is resumed with its tree's root, never on its own.
            .filter(|r| r.unfinished() && r.parent_id.is_none())
            .collect())
    }

    /// The configuration a stored run was started with (for example to rebuild
    /// its policy from `policy_spec` before [`Runtime::resume`]).
    pub async fn stored_config(&self, run_id: &str) -> Result<RunConfig, RuntimeError> {
        config_of(&self.load(run_id).await?.record)
    }

    /// A stored run's state as its last checkpoint has it, or, for a run
    /// created and never stepped (no checkpoint yet), the state a resume
    /// starts it from: what a service shows of a run no process holds.
    pub async fn stored_snapshot(
        &self,
        run_id: &str,
    ) -> Result<agentry_protocol::state::RunSnapshot, RuntimeError> {
        let run = self.load(run_id).await?;
        match run.checkpoint {
            Some(checkpoint) => Ok(checkpoint.snapshot),
            None => Ok(RunState::initial(&config_of(&run.record)?).snapshot()),
        }
    }

    /// Everything stored about `run_id`, after whatever is queued has landed.
    pub(super) async fn load(
        &self,
        run_id: &str,
    ) -> Result<agentry_store::StoredRun, RuntimeError> {
        let writer = self.writer()?;
        writer.sync().await?;
        writer
            .store()
            .load(run_id)?
            .ok_or_else(|| RuntimeError::NoSuchRun {
                run_id: run_id.to_string(),
                store: writer.store().location(),
            })
    }

    /// Continues an unfinished run from its last committed state, with `policy`.
    /// Refused with [`RuntimeError::Owned`] while another live process (or a
    /// run of this one) runs it; taken over once that owner is gone (see
    /// [`crate::owner`]). Calls with a recorded outcome are never run again; a call that started
    /// but has no outcome is settled by its tool's contract (run again when that
    /// is safe, else the run parks `awaiting_decision` until
    /// [`RunHandle::settle`]). The budget goes on from what was spent, the
    /// deadline stays where it was, timers not yet fired are armed again.
    pub async fn resume(
        &self,
        run_id: &str,
        policy: impl Policy,
    ) -> Result<RunHandle, RuntimeError> {
        self.resume_boxed(run_id, Box::new(policy)).await
    }

    /// [`Runtime::resume`] with an already boxed policy.
    pub async fn resume_boxed(
        &self,
        run_id: &str,
        policy: Box<dyn Policy>,
    ) -> Result<RunHandle, RuntimeError> {
        self.resume_with(run_id, policy, ResumeOptions::default())
            .await
    }

    /// [`Runtime::resume_boxed`], changed by `options`: a service restarted
    /// with its own `hibernate_after`, bringing sleeping runs back dormant.
    pub async fn resume_with(
        &self,
        run_id: &str,
        policy: Box<dyn Policy>,
        options: ResumeOptions,
    ) -> Result<RunHandle, RuntimeError> {
        let run = self.load(run_id).await?;
        if let Some(parent) = &run.record.parent_id {
            return Err(RuntimeError::NotResumable {
                run_id: run_id.to_string(),
                message: format!("it is a child of run {parent}: resume its tree's root"),
            });
        }
        let store = self.writer()?.store();
        let tree = StoredTree::of(store.as_ref(), &store.runs()?, run)?;
        self.resume_tree(tree, None, policy, options).await
    }

    /// Resumes a stored run under `parent` (a child) or as a root, then its
    /// stored children under it.
    pub(super) async fn resume_tree(
        &self,
        tree: StoredTree,
        parent: Option<&RunHandle>,
        policy: Box<dyn Policy>,
        options: ResumeOptions,
    ) -> Result<RunHandle, RuntimeError> {
        // Size: one resume's steps in order (read, check, claim, fence, launch, adopt); split, the halves would pass the stored run's parts between them.
        let delegated = tree.delegated();
        let books = tree.books()?;
        let StoredTree { run, children } = tree;
        let run_id = run.record.run_id.clone();
        let run_id = run_id.as_str();
        if let Some(owner) = &run.owner {
            crate::owner::check_takeover(run_id, owner, self.lease)?;
        }
        let mut config = config_of(&run.record)?;
        config.run_id = Some(run_id.to_string());
        config.hibernate_after = options.hibernate_after.unwrap_or(config.hibernate_after);
        if !config.workdir.is_dir() {
            return Err(RuntimeError::NotResumable {
                run_id: run_id.to_string(),
                message: format!("its working directory {} is gone", config.workdir.display()),
            });
        }
        // Live in this process before it is on disk; a compare-and-set on the
        // owner read above, so a concurrent resumer that got there first wins.
        let writer = self.writer()?.clone();
        let claim = Claim::new(&Arc::from(run_id), writer.key());
        writer
            .claim(&claim, run.owner.as_ref())
            .await
            .map_err(|e| claim_refused(run_id, e))?;
        let token = Arc::clone(claim.lease().token());
        let claimed = async {
            // Read again under the claim: a commit the old owner (its lease
            // expired, its process still going) landed between the first read
            // and the claim is in this one; any later one is fenced.
            let run = self.load(run_id).await?;
            let dormant =
                options.dormant && parent.is_none() && children.is_empty() && at_rest(&run);
            let mut state = restored_state(run_id, run.checkpoint, run.session, &config)?;
            state.recount_children(delegated);
            let elapsed = Duration::from_millis(
                agentry_protocol::now_millis().saturating_sub(run.record.created_at_ms),
            );
            let place = match parent {
                Some(p) => Place::under(p, run.record.deadline_at_ms),
                None => Place {
                    lineage: Lineage::root(
                        Some(&run_id.to_string()),
                        config.traceparent.as_deref(),
                    ),
                    run_token: self.root_token(),
                    tree: config.tree,
                },
            };
            let grants = config.grants.clone();
            let mark = mark_of(&run.record);
            let fenced = fence(run_id, &mark, &run.ledger).await?;
            tracing::info!(run_id, steps = state.progress().steps, "resuming run");
            let launched = self
                .launch_run(Launch {
                    config,
                    policy,
                    lineage: place.lineage,
                    run_token: place.run_token,
                    tree: place.tree,
                    grants,
                    parent_redaction: parent.map(|p| Arc::clone(p.events.redaction())),
                    durable: Durable::Resume(Box::new(Resumed {
                        restore: Restore {
                            state,
                            elapsed,
                            children: books,
                            woken: false,
                        },
                        timers: run.timers,
                        inbox: run.inbox,
                        claim,
                        adopting: !children.is_empty(),
                        mark,
                        dormant,
                    })),
                })
                .await?;
            Ok::<_, RuntimeError>((launched, fenced))
        };
        let (launched, fenced) = match claimed.await {
            Ok(claimed) => claimed,
            Err(e) => {
                // Nothing runs it here: a claim left on disk would keep the
                // run this process's (in a cluster, a live node's) and no
                // other resumer would take it.
                writer.release(run_id, &token).await;
                return Err(e);
            }
        };
        // Set once, on the handle's own new `RunAbout`.
        let _ = launched.handle.about.fenced.set(Box::new(fenced));
        if !children.is_empty() {
            self.adopt_children(&launched, children).await?;
        }
        Ok(launched.handle)
    }
}

/// How [`Runtime::resume_with`] brings a run back besides what it stored.
#[derive(Debug, Clone, Default)]
pub struct ResumeOptions {
    /// Replaces the stored `hibernate_after` when set.
    hibernate_after: Option<Option<std::time::Duration>>,
    dormant: bool,
}

impl ResumeOptions {
    /// The run hibernates after `after` asleep (`None`: never), whatever it
    /// was started with: the resuming service's setting.
    #[must_use]
    pub fn hibernate_after(mut self, after: Option<std::time::Duration>) -> Self {
        self.hibernate_after = Some(after);
        self
    }

    /// A run stored asleep at rest (event-driven, sleeping, no call in
    /// flight or parked on a human, no child, no input waiting) comes back
    /// hibernated: its handle and its deadline's alarm, no actors, until its
    /// first input, timer or deadline wakes it. Only where the run may
    /// hibernate (a store, a wake policy, `hibernate_after`); any other run
    /// resumes awake.
    #[must_use]
    pub fn dormant(mut self, dormant: bool) -> Self {
        self.dormant = dormant;
        self
    }
}

/// Whether a stored run sleeps with nothing open: no input waiting, no call
/// between intent and outcome, none parked on a human.
fn at_rest(run: &agentry_store::StoredRun) -> bool {
    use agentry_store::LedgerState;
    run.inbox.is_empty()
        && (run.checkpoint.as_ref()).is_some_and(|cp| cp.snapshot.status == RunStatus::Sleeping)
        && run.ledger.iter().all(|row| match row.state {
            LedgerState::Outcome | LedgerState::Denied => true,
            LedgerState::AwaitingApproval
            | LedgerState::Approved
            | LedgerState::Intent
            | LedgerState::AwaitingDecision => false,
        })
}

/// How long a resume waits for a killed earlier attempt's processes to go.
const FENCE_WAIT: Duration = Duration::from_secs(5);

/// Fencing (claimed, so no other live process runs the run): kills whatever
/// processes the run's earlier attempts left (recorded groups, and every
/// process marked with the run's fence `mark` or a recorded spawn; never by
/// the run's id, which a run of another store may share) and waits until
/// they are gone, before any call is run again, settled or reported. What it
/// killed is the handle's [`RunHandle::fenced`].
async fn fence(
    run_id: &str,
    mark: &Arc<str>,
    ledger: &[agentry_store::LedgerEntry],
) -> Result<Fenced, RuntimeError> {
    let groups: Vec<agentry_protocol::ProcessGroupRecord> = ledger
        .iter()
        .flat_map(|row| row.processes.iter().cloned())
        .collect();
    let id = run_id.to_string();
    let mark = Arc::clone(mark);
    let fenced = tokio::task::spawn_blocking(move || {
        agentry_tools::proc::fence(&id, &mark, &groups, FENCE_WAIT)
    })
    .await
    .map_err(|e| RuntimeError::NotResumable {
        run_id: run_id.to_string(),
        message: format!("fencing its processes failed: {e}"),
    })??;
    if !fenced.is_empty() {
        tracing::warn!(run_id, groups = ?fenced.groups, processes = ?fenced.processes, "killed processes an earlier attempt of the run left running");
    }
    Ok(fenced)
}

impl RunConfig {
    /// The configuration run `run_id` was started with, read from `store`
    /// directly (no runtime needed: e.g. to pick the tools and the policy of the
    /// runtime that will resume it).
    pub fn from_store(store: &dyn Store, run_id: &str) -> Result<RunConfig, RuntimeError> {
        let run = store.load(run_id)?.ok_or_else(|| RuntimeError::NoSuchRun {
            run_id: run_id.to_string(),
            store: store.location(),
        })?;
        config_of(&run.record)
    }
}

/// The state a stored run goes on from: its last checkpoint, or the start for a
/// run created but never stepped. Refused for a run that has stopped.
pub(super) fn restored_state(
    run_id: &str,
    checkpoint: Option<Checkpoint>,
    session: Vec<SessionEntry>,
    config: &RunConfig,
) -> Result<RunState, RuntimeError> {
    let Some(cp) = checkpoint else {
        // Created, never stepped: start from the beginning.
        return Ok(RunState::initial(config));
    };
    if cp.snapshot.status == RunStatus::Stopped {
        return Err(RuntimeError::AlreadyStopped {
            run_id: run_id.to_string(),
            reason: cp
                .snapshot
                .control
                .stop_reason
                .map(|r| r.to_string())
                .unwrap_or_else(|| "stopped".into()),
        });
    }
    let progress: Progress =
        serde_json::from_value(cp.progress).map_err(|e| RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message: format!("its progress record does not parse: {e}"),
        })?;
    Ok(RunState::restore(cp.snapshot, session, progress))
}

/// A claim the store refused because another process claimed the run first is
/// [`RuntimeError::Owned`]; every other store error passes through.
// `StoreError` is `#[non_exhaustive]`: a kind it adds passes through too.
#[allow(clippy::wildcard_enum_match_arm)]
fn claim_refused(run_id: &str, e: agentry_store::StoreError) -> RuntimeError {
    match e {
        agentry_store::StoreError::Claimed { .. } => RuntimeError::Owned {
            run_id: run_id.to_string(),
            owner: "another process that took it over a moment ago".to_string(),
        },
        other @ (agentry_store::StoreError::Open { .. }
        | agentry_store::StoreError::Corrupt { .. }
        | agentry_store::StoreError::NewerSchema { .. }
        | agentry_store::StoreError::Full { .. }
        | agentry_store::StoreError::Conflict { .. }
        | agentry_store::StoreError::NoRun { .. }
        | agentry_store::StoreError::Io { .. }
        | _) => other.into(),
    }
}
