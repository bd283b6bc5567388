//! Resuming a durable run's tree: its stored children (and theirs) are
//! resumed with it, under it, and its books count what they spent.
//!
//! A child's spend is charged to its parent in memory as it happens, but the
//! parent's checkpoint only has it as of its last step; the children may have
//! spent more before the crash. So a resumed run's spend is recounted from the
//! store: its own (`spent − delegated` of its checkpoint) plus each child's,
//! recursively; each live child's unspent limits are set aside again. The tree
//! then never spends more than the root's limits across the crash.

use agentry_protocol::budget::{BudgetSnapshot, Usage};
use agentry_protocol::state::RunStatus;
use agentry_protocol::stop::StopReason;
use agentry_protocol::stored_policy::{ChildSpec, StoredPolicy};
use agentry_store::{Store, StoredRun};

use super::Runtime;
use super::children::{ChildRef, RunChildren};
use super::handle::ChildEntry;
use super::handle::RunHandle;
use super::launch::{Launched, recorded_at_stop};
use super::record::config_of;
use crate::RunOutcome;
use crate::budget::ChildBooks;
use crate::conductor::{Lineage, ParentRun};
use crate::durable::Progress;
use crate::error::RuntimeError;

/// A stored run and its stored descendants.
pub(super) struct StoredTree {
    pub(super) run: StoredRun,
    pub(super) children: Vec<StoredTree>,
}

impl StoredTree {
    /// `run` and every stored run below it (`all` lists the store's runs).
    pub(super) fn of(
        store: &dyn Store,
        all: &[agentry_store::RunSummary],
        run: StoredRun,
    ) -> Result<StoredTree, RuntimeError> {
        let id = run.record.run_id.clone();
        let mut children = Vec::new();
        for summary in all
            .iter()
            .filter(|s| s.parent_id.as_deref() == Some(id.as_str()))
        {
            if let Some(child) = store.load(&summary.run_id)? {
                children.push(StoredTree::of(store, all, child)?);
            }
        }
        Ok(StoredTree { run, children })
    }

    /// What the run and its descendants spent, by the store.
    pub(super) fn total(&self) -> Usage {
        let control = self
            .run
            .checkpoint
            .as_ref()
            .map(|c| c.snapshot.control.clone())
            .unwrap_or_default();
        self.children
            .iter()
            .fold(control.spent.minus(&control.delegated), |sum, c| {
                sum.plus(&c.total())
            })
    }

    /// What its children spent, together.
    pub(super) fn delegated(&self) -> Usage {
        self.children
            .iter()
            .fold(Usage::default(), |sum, c| sum.plus(&c.total()))
    }

    fn stopped(&self) -> bool {
        self.run
            .checkpoint
            .as_ref()
            .is_some_and(|c| c.snapshot.status == RunStatus::Stopped)
    }

    /// The live children, as the parent's books take them back.
    pub(super) fn books(&self) -> Result<Vec<ChildBooks>, RuntimeError> {
        let mut books = Vec::new();
        for child in self.children.iter().filter(|c| !c.stopped()) {
            books.push(ChildBooks {
                child_id: child.run.record.run_id.clone(),
                limits: config_of(&child.run.record)?.limits,
                spent: child.total(),
            });
        }
        Ok(books)
    }
}

/// Where a resumed run sits: its lineage, the token it runs under and its
/// tree's limits.
pub(super) struct Place {
    pub(super) lineage: Lineage,
    pub(super) run_token: tokio_util::sync::CancellationToken,
    pub(super) tree: crate::config::TreeLimits,
}

impl Place {
    /// A stored child under its resumed parent: the parent's budget and
    /// token, one level down, the child's own stored deadline.
    pub(super) fn under(parent: &RunHandle, deadline_at_ms: Option<u64>) -> Place {
        let now = agentry_protocol::now_millis();
        let deadline_at = deadline_at_ms.map(|at| {
            tokio::time::Instant::now() + std::time::Duration::from_millis(at.saturating_sub(now))
        });
        let lineage = Lineage {
            parent: Some(Box::new(ParentRun {
                run_id: std::sync::Arc::clone(&parent.run_id),
                budget: parent.live.budget(),
                root_id: super::launch::root_of(parent),
                // The spawning span is gone: the child rejoins its trace
                // through the traceparent stored in its configuration.
                span: tracing::Span::none(),
            })),
            depth: parent.lineage.depth + 1,
            trace_id: parent.lineage.trace_id.clone(),
            deadline_at,
        };
        Place {
            lineage,
            run_token: parent.run_token.child_token(),
            tree: parent.tree,
        }
    }
}

impl Runtime {
    /// Resumes (or, ended, registers) each stored child of a just resumed
    /// run with its desk, then lets its `agent.*` calls go on. A child that
    /// cannot be resumed stops the resumed run with it.
    pub(super) async fn adopt_children(
        &self,
        launched: &Launched,
        children: Vec<StoredTree>,
    ) -> Result<(), RuntimeError> {
        for child in children {
            let id = child.run.record.run_id.clone();
            let spec = StoredPolicy::parse(&child.run.record.policy);
            if let StoredPolicy::Child(ChildSpec { operation_id, .. }) = &spec
                && !operation_id.is_empty()
            {
                launched.desk.remember_spawn(operation_id, &id);
            }
            let name = Some(child.run.record.task_id.clone())
                .filter(|n| !n.ends_with("/child") && n != &id);
            if child.stopped() {
                let outcome = stored_outcome(&child.run)?;
                let adopted = ChildRef::Ended(Box::new(outcome));
                launched.desk.adopt(&id, name.as_deref(), adopted);
                continue;
            }
            let policy = RunChildren::policy_of_spec(self, &id, &spec)?;
            let resumed = Box::pin(self.resume_tree(
                child,
                Some(&launched.handle),
                policy,
                // A child resumes as it stored itself.
                Default::default(),
            ))
            .await;
            let handle = match resumed {
                Ok(handle) => handle,
                Err(e) => {
                    launched.handle.abort();
                    return Err(e);
                }
            };
            launched.handle.children.push(ChildEntry {
                handle: handle.clone(),
                recorded: recorded_at_stop(&handle),
            });
            launched
                .desk
                .adopt(&id, name.as_deref(), ChildRef::Live(handle));
        }
        launched.desk.open();
        Ok(())
    }
}

/// A child that ended before the restart, as `agent.wait` reports it.
fn stored_outcome(run: &StoredRun) -> Result<RunOutcome, RuntimeError> {
    let config = config_of(&run.record)?;
    let checkpoint = run
        .checkpoint
        .clone()
        .unwrap_or_else(|| agentry_store::Checkpoint {
            snapshot: Default::default(),
            progress: serde_json::Value::Null,
        });
    let progress: Progress = serde_json::from_value(checkpoint.progress).unwrap_or_default();
    let snapshot = checkpoint.snapshot;
    let reason = snapshot
        .control
        .stop_reason
        .unwrap_or(StopReason::UnrecoverableError);
    Ok(RunOutcome {
        run_id: run.record.run_id.clone(),
        task_id: run.record.task_id.clone(),
        stop_reason: reason,
        detail: format!("{reason}: it ended before its parent was resumed"),
        answer: snapshot.task.answer.clone(),
        steps: progress.steps,
        tool_calls: progress.tool_calls,
        budget: BudgetSnapshot::new(config.limits, snapshot.control.spent, 0),
        checks: Vec::new(),
        state: snapshot,
        workdir: config.workdir,
        trace: None,
        trace_error: None,
    })
}
