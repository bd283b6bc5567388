//! Taking over the runs of nodes that are gone, and waking resting runs.
//!
//! Every node looks, every eighth of the lease (at most every 500 ms), for unfinished root runs
//! whose owner is no live node (its process key matches no node that beat
//! within the lease) and whose owner's lease expired (or that have no owner,
//! are not asleep, and were last written a lease ago). Each is resumed here
//! by `agentry resume`'s rules: the runtime's claim is a compare-and-set on
//! the owner row, so of several nodes trying, one wins and the others are
//! refused.
//!
//! A hibernated run rests owned by no node (it let its lease go): the node
//! its next input reaches wakes it (`inbox`). The scan wakes one only when
//! something else is due for it: a timer, its deadline, or an input waiting
//! in `agentry.cluster_inbox` that no node took.
//! A node that cannot reach a run's working directory leaves the run to one
//! that can, and notes why in `agentry.cluster_notes` (`GET /runs/{id}`
//! shows it while no node holds the run). A resume that fails otherwise
//! (it let its claim go) is tried again by this node after a pause that
//! doubles, from one second to a minute: a run that cannot come back is not
//! claimed twice a second.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use agentry::RuntimeError;
use agentry_serve::{App, RunMeta};
use futures::StreamExt;

use super::super::resume::{AtRest, Resumer};
use super::node::{Node, blocking, now_ms};
use crate::error::RunError;

/// Runs looked at per scan (the rest wait for the next).
const SCAN_LIMIT: i64 = 64;
/// Runs resumed at once: a dead node's runs go on elsewhere together, not
/// one after another.
const RESUMING_AT_ONCE: usize = 8;

/// Looks for runs to take over until the process ends.
pub(super) async fn keep_taking_over(node: Arc<Node>, app: App, resumer: Arc<Resumer>) {
    // Often, so a dead node's runs wait little beyond its lease: a scan is
    // one indexed query.
    let every = (node.lease / 8).clamp(Duration::from_millis(50), Duration::from_millis(500));
    let failed = Mutex::new(Failed::default());
    loop {
        tokio::time::sleep(every).await;
        if app.is_draining() {
            return;
        }
        let orphans = match orphans(&node).await {
            Ok(orphans) => orphans,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for runs to take over");
                continue;
            }
        };
        let now = Instant::now();
        let lock = || failed.lock().unwrap_or_else(PoisonError::into_inner);
        lock().forget_all_but(&orphans);
        let orphans = orphans
            .into_iter()
            .filter(|o| !app.holds(&o.run_id) && lock().due(&o.run_id, now));
        futures::stream::iter(orphans)
            .for_each_concurrent(RESUMING_AT_ONCE, |orphan| {
                let (node, app, resumer, lock) = (&node, &app, &resumer, &lock);
                async move {
                    let took = take_over(node, app, resumer, &orphan.run_id, orphan.at_rest).await;
                    lock().after(&orphan.run_id, took);
                }
            })
            .await;
    }
}

/// Runs whose resume failed here, and when this node tries each again.
#[derive(Default)]
struct Failed {
    runs: HashMap<String, Pause>,
}

/// When a failed run is tried again, and how long the next pause is.
#[derive(Clone, Copy)]
struct Pause {
    until: Instant,
    next: Duration,
}

impl Failed {
    const FIRST: Duration = Duration::from_secs(1);
    const LONGEST: Duration = Duration::from_secs(60);

    /// Forgets runs no longer waiting for a node (taken, stopped).
    fn forget_all_but(&mut self, orphans: &[Orphan]) {
        self.runs
            .retain(|id, _| orphans.iter().any(|orphan| &orphan.run_id == id));
    }

    /// Whether `run_id` may be tried now.
    fn due(&self, run_id: &str, now: Instant) -> bool {
        self.runs.get(run_id).is_none_or(|pause| pause.until <= now)
    }

    /// Remembers how the attempt on `run_id` went.
    fn after(&mut self, run_id: &str, took: TakeOver) {
        match took {
            TakeOver::Failed => {
                let next = self.runs.get(run_id).map_or(Self::FIRST, |p| p.next);
                self.runs.insert(
                    run_id.to_string(),
                    Pause {
                        until: Instant::now() + next,
                        next: (next * 2).min(Self::LONGEST),
                    },
                );
            }
            TakeOver::Here | TakeOver::Elsewhere | TakeOver::Not => {
                self.runs.remove(run_id);
            }
        }
    }
}

/// A run for this node to take: a gone node's, or a resting one with
/// something due.
struct Orphan {
    run_id: String,
    /// How it comes back if it is asleep at rest.
    at_rest: AtRest,
}

/// Unfinished root runs no live node holds that need one, oldest first.
async fn orphans(node: &Node) -> Result<Vec<Orphan>, agentry::store::StoreError> {
    let now = now_ms();
    let expired = now - node.lease_ms();
    blocking(&node.db, move |tx| {
        tx.query(
            "SELECT r.run_id, o.run_id IS NULL AND r.status = 'sleeping'
             FROM agentry.runs r
             LEFT JOIN agentry.owners o ON o.run_id = r.run_id
             LEFT JOIN agentry.cluster_nodes n
                    ON n.owner_key = o.machine || '#' || o.pid AND n.heartbeat_ms >= $1
             WHERE r.parent_id IS NULL AND r.status <> 'stopped' AND n.node_id IS NULL
               AND (o.heartbeat_ms < $1
                    OR (o.run_id IS NULL AND r.status <> 'sleeping' AND r.updated_at_ms < $1)
                    OR (o.run_id IS NULL AND r.status = 'sleeping'
                        AND (r.deadline_at_ms <= $3
                             OR EXISTS (SELECT 1 FROM agentry.timers t
                                        WHERE t.run_id = r.run_id AND t.due_at_ms <= $3)
                             OR EXISTS (SELECT 1 FROM agentry.inbox s WHERE s.run_id = r.run_id)
                             OR EXISTS (SELECT 1 FROM agentry.cluster_inbox i
                                        WHERE i.run_id = r.run_id AND i.status IS NULL
                                          AND i.target_node IS NULL))))
             ORDER BY r.created_at_ms LIMIT $2",
            &[&expired, &SCAN_LIMIT, &now],
        )
        .map(|rows| {
            rows.iter()
                .map(|row| Orphan {
                    run_id: row.get(0),
                    at_rest: match row.get::<_, bool>(1) {
                        true => AtRest::Wake,
                        false => AtRest::Stay,
                    },
                })
                .collect()
        })
    })
    .await
}

/// What became of an attempt to take a run over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TakeOver {
    /// It runs here now.
    Here,
    /// Another node was first (or its owner is back): it runs there.
    Elsewhere,
    /// This node cannot run it (its note says why): it waits for one that can.
    Not,
    /// Its resume failed here (its note says why; the claim was let go).
    Failed,
}

/// Resumes `run_id` here (a run stored asleep at rest comes back as
/// `at_rest` says), or notes why this node cannot.
pub(super) async fn take_over(
    node: &Node,
    app: &App,
    resumer: &Resumer,
    run_id: &str,
    at_rest: AtRest,
) -> TakeOver {
    let config = match app.runtime().stored_config(run_id).await {
        Ok(config) => config,
        Err(e) => {
            tracing::warn!(run_id, error = %e, "cannot read a run to take over");
            return TakeOver::Not;
        }
    };
    if !config.workdir.is_dir() {
        let why = format!(
            "node {} cannot reach its working directory {}; a node that can will take it over",
            node.id,
            config.workdir.display()
        );
        note(node, run_id, Some(why)).await;
        return TakeOver::Not;
    }
    let meta = RunMeta::stored(&config);
    let resumed = match &meta.agent {
        Some(_) => super::super::resume::resume_one(resumer, run_id, &config, &meta, at_rest)
            .await
            .map(|launched| app.adopt(launched)),
        None => app
            .resume_inline(run_id)
            .await
            .map(|_| ())
            .map_err(RunError::BadInput),
    };
    match resumed {
        Ok(()) => {
            match at_rest {
                AtRest::Stay => {
                    eprintln!("agentry: serve: node {} took over run {run_id}", node.id)
                }
                AtRest::Wake => eprintln!("agentry: serve: node {} woke run {run_id}", node.id),
            }
            note(node, run_id, None).await;
            TakeOver::Here
        }
        // Another node was first, or the owner is back: not ours.
        Err(RunError::BadInput(RuntimeError::Owned { .. } | RuntimeError::TakenOver { .. })) => {
            TakeOver::Elsewhere
        }
        Err(e) => {
            tracing::warn!(run_id, error = %e, "run not taken over");
            note(
                node,
                run_id,
                Some(format!("node {} cannot take it over: {e}", node.id)),
            )
            .await;
            TakeOver::Failed
        }
    }
}

/// Writes (or, with `None`, clears) this node's note on why `run_id` waits.
async fn note(node: &Node, run_id: &str, why: Option<String>) {
    let (run_id, me) = (run_id.to_string(), node.id.clone());
    let written = blocking(&node.db, move |tx| {
        match &why {
            Some(why) => tx.execute(
                "INSERT INTO agentry.cluster_notes (run_id, node_id, note, at_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (run_id) DO UPDATE
                 SET node_id = EXCLUDED.node_id, note = EXCLUDED.note, at_ms = EXCLUDED.at_ms",
                &[&run_id, &me, why, &now_ms()],
            ),
            None => tx.execute(
                "DELETE FROM agentry.cluster_notes WHERE run_id = $1",
                &[&run_id],
            ),
        }
        .map(|_| ())
    })
    .await;
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot write a take-over note");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn orphan(id: &str) -> Orphan {
        Orphan {
            run_id: id.to_string(),
            at_rest: AtRest::Stay,
        }
    }

    /// A failed resume waits a second, then two, ...; a run that comes back
    /// (or is no longer waiting for a node) is forgotten.
    #[test]
    fn a_run_whose_resume_failed_waits_longer_each_time() {
        let mut failed = Failed::default();
        let start = Instant::now();
        assert!(failed.due("r", start));
        failed.after("r", TakeOver::Failed);
        assert!(!failed.due("r", Instant::now()));
        assert!(failed.due("r", Instant::now() + Duration::from_millis(1001)));
        failed.after("r", TakeOver::Failed);
        assert!(!failed.due("r", Instant::now() + Duration::from_millis(1500)));
        assert!(failed.due("r", Instant::now() + Duration::from_millis(2001)));
        for _ in 0..10 {
            failed.after("r", TakeOver::Failed);
        }
        assert!(failed.due("r", Instant::now() + Failed::LONGEST));
        failed.after("r", TakeOver::Here);
        assert!(failed.due("r", Instant::now()));

        failed.after("gone", TakeOver::Failed);
        failed.forget_all_but(&[orphan("other")]);
        assert!(failed.due("gone", Instant::now()));
    }
}
