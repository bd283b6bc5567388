//! The sequential phase of the tree property: one operation at a time, each
//! reply and each budget checked against the model exactly — a grant only
//! when the model has the allowance, a refusal naming an exhausted dimension,
//! the carved limits, the tool calls left, every spend charged up to the root.

use std::collections::BTreeMap;

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};

use super::model::{Dim, Model, justified};
use super::plan::{SeqOp, StepSpec};
use super::standin::{StandInRun, StepOutcome};
use crate::budget::{BudgetMsg, SpendReply};

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The live part of the tree: the model and the runs, by node id.
pub(crate) struct Tree {
    pub(crate) model: Model,
    pub(crate) runs: BTreeMap<usize, StandInRun>,
    pub(crate) next_id: usize,
    probes: usize,
}

impl Tree {
    pub(crate) fn new(model: Model, runs: BTreeMap<usize, StandInRun>, next_id: usize) -> Self {
        Tree {
            model,
            runs,
            next_id,
            probes: 0,
        }
    }

    fn run(&self, v: usize) -> Result<&StandInRun, String> {
        self.runs.get(&v).ok_or(format!("node {v} is not running"))
    }

    fn run_mut(&mut self, v: usize) -> Result<&mut StandInRun, String> {
        self.runs
            .get_mut(&v)
            .ok_or(format!("node {v} is not running"))
    }

    /// Runs `ops`, then ends the whole tree.
    pub(crate) async fn run_all(&mut self, ops: &[SeqOp]) -> Result<(), String> {
        for (n, op) in ops.iter().enumerate() {
            let live = self.model.live();
            if live.is_empty() {
                break;
            }
            let pick = |i: &proptest::sample::Index| live[i.index(live.len())];
            let done = match op {
                SeqOp::Step { node, spec } => self.step(pick(node), spec, false).await,
                SeqOp::Tick { node, spec } => self.step(pick(node), spec, true).await,
                SeqOp::Retry { node } => self.retry(pick(node)).await,
                SeqOp::Reserve { node, request } => self.reserve(pick(node), request).await,
                SeqOp::End { node } => self.end(pick(node)).await,
            };
            done.map_err(|e| format!("sequential op {n} ({op:?}): {e}"))?;
        }
        if self.model.is_live(0) {
            self.end(0).await?;
        }
        Ok(())
    }

    /// Every node from `v` up to the root shows the model's S.
    async fn settled(&self, v: usize) -> Result<(), String> {
        let mut at = Some(v);
        while let Some(u) = at.filter(|&u| self.model.is_live(u)) {
            let spent = self.run(u)?.snapshot().await.map_err(failed)?.spent;
            if spent != self.model.spent(u) {
                return Err(format!(
                    "node {u} spent {spent:?}, the model {:?}",
                    self.model.spent(u)
                ));
            }
            at = self.model.parent(u);
        }
        Ok(())
    }

    /// A tick (when `tick`) and a step at `v`, each granted exactly when the
    /// model has the allowance; a refusal stops the run, as in the conductor.
    async fn step(&mut self, v: usize, spec: &StepSpec, tick: bool) -> Result<(), String> {
        if tick {
            let want = self.model.tick_refusals(v);
            match self.run(v)?.tick().await.map_err(failed)? {
                SpendReply::Granted { before, .. } if want.is_empty() => {
                    self.same_spent(v, &before)?;
                    let tick = Usage {
                        ticks: 1,
                        ..Usage::default()
                    };
                    self.model.spend(v, &tick);
                }
                SpendReply::Refused(reason) if justified(reason, &want) => {
                    return self.end(v).await;
                }
                got @ (SpendReply::Granted { .. } | SpendReply::Refused(_)) => {
                    return Err(self.mismatch(v, "tick", &got, &want));
                }
            }
        }
        let want = self.model.step_refusals(v);
        match self.run_mut(v)?.step(spec.turn).await.map_err(failed)? {
            StepOutcome::Granted { before } if want.is_empty() => {
                self.same_spent(v, &before)?;
                self.model.spend(v, &Usage::step());
                self.model.spend(v, &spec.turn.usage());
                let left = self.model.tool_calls_left(v);
                let calls = self.run(v)?.tool_calls(spec.calls);
                if calls != left.map_or(spec.calls, |l| l.min(spec.calls)) {
                    return Err(format!(
                        "node {v}: {calls} of {} calls granted, the model has {left:?} left",
                        spec.calls
                    ));
                }
                self.model.spend(v, &Usage::tool_calls(calls));
            }
            StepOutcome::Refused(reason) if justified(reason, &want) => return self.end(v).await,
            got @ (StepOutcome::Granted { .. }
            | StepOutcome::Cancelled { .. }
            | StepOutcome::Refused(_)) => return Err(self.mismatch(v, "step", &got, &want)),
        }
        self.settled(v).await
    }

    fn same_spent(&self, v: usize, before: &BudgetSnapshot) -> Result<(), String> {
        if before.spent != self.model.spent(v) {
            return Err(format!(
                "node {v}: before the spend {:?}, the model {:?}",
                before.spent,
                self.model.spent(v)
            ));
        }
        Ok(())
    }

    fn mismatch(&self, v: usize, what: &str, got: &dyn std::fmt::Debug, want: &[Dim]) -> String {
        format!(
            "node {v}: {what} answered {got:?}; the model refuses on {want:?} (S {:?}, R {:?}, L {:?})",
            self.model.spent(v),
            self.model.reserved(v),
            self.model.limits(v)
        )
    }

    async fn retry(&mut self, v: usize) -> Result<(), String> {
        let want = self.model.retry_allowed(v);
        let got = self.run(v)?.retry().await.map_err(failed)?;
        if got != want {
            return Err(format!(
                "node {v}: a retry {}, the model says {want} (S {:?}, R {:?})",
                if got { "granted" } else { "refused" },
                self.model.spent(v),
                self.model.reserved(v)
            ));
        }
        if got {
            let retry = Usage {
                retries: 1,
                ..Usage::default()
            };
            self.model.spend(v, &retry);
        }
        self.settled(v).await
    }

    /// A child of `v` asking for `request`: carved exactly as the model carves
    /// it, or refused naming a dimension that does not fit, leaving `v`'s budget
    /// as it was.
    async fn reserve(&mut self, v: usize, request: &BudgetLimits) -> Result<(), String> {
        let id = self.next_id;
        let want = self.model.carve(v, request);
        let run = self.run(v)?;
        let before = run.snapshot().await.map_err(failed)?;
        let got = run
            .reserve(&format!("n{id}"), *request)
            .await
            .map_err(failed)?;
        match (got, want) {
            (Ok(limits), Ok((carved, reserved))) if limits == carved => {
                let child = StandInRun::start(
                    limits,
                    Usage::default(),
                    Some(run.link(&format!("n{id}"))),
                    run.token().child_token(),
                )
                .await
                .map_err(failed)?;
                let before = self.model.own_left(v);
                self.model.add_child(v, id, &limits, reserved);
                self.runs.insert(id, child);
                self.next_id += 1;
                // The parent keeps room to wait on its children and finish: a
                // carve never takes it below its reserve (2 steps, 2 calls).
                for (b, a) in before.iter().zip(self.model.own_left(v)) {
                    if let (Some(b), Some(a)) = (b, a)
                        && a < (*b).min(2)
                    {
                        return Err(format!(
                            "node {v}: a child left it {a} of {b} steps/calls, under its reserve"
                        ));
                    }
                }
            }
            (Err(message), Err(dims))
                if dims
                    .iter()
                    .any(|d| message.starts_with(&format!("{}:", d.name()))) =>
            {
                let after = run.snapshot().await.map_err(failed)?;
                let unchanged = (before.limits, before.spent, before.remaining)
                    == (after.limits, after.spent, after.remaining);
                if !unchanged {
                    return Err(format!(
                        "node {v}: a refused reservation moved {before:?} to {after:?}"
                    ));
                }
            }
            (got, want) => {
                return Err(format!(
                    "node {v}: {request:?} answered {got:?}, the model {want:?} (S {:?}, R {:?})",
                    self.model.spent(v),
                    self.model.reserved(v)
                ));
            }
        }
        self.left_as_modelled(v).await
    }

    /// What `v` has left to carve is what the model has: a child asking for
    /// nothing gets all of it on every dimension `v` limits. The probe child's
    /// start then fails, and its reservation is released, as
    /// `Runtime::start_child` does.
    pub(crate) async fn left_as_modelled(&mut self, v: usize) -> Result<(), String> {
        self.probes += 1;
        let probe = format!("probe{}", self.probes);
        let want = self.model.carve(v, &BudgetLimits::default());
        let run = self.run(v)?;
        let got = run
            .reserve(&probe, BudgetLimits::default())
            .await
            .map_err(failed)?;
        let _ = run.budget().cast(BudgetMsg::Release { child_id: probe });
        match (&got, &want) {
            (Ok(limits), Ok((carved, _))) if limits == carved => {}
            (Err(_), Err(_)) => {}
            _ => {
                return Err(format!(
                    "node {v} has {got:?} left to carve, the model {want:?} (S {:?}, R {:?})",
                    self.model.spent(v),
                    self.model.reserved(v)
                ));
            }
        }
        let live = run.live_children().await.map_err(failed)?;
        if live != self.model.children(v).len() {
            return Err(format!(
                "node {v} counts {live} live children, the model {:?}",
                self.model.children(v)
            ));
        }
        Ok(())
    }

    /// Ends `v` and its subtree, children first, each finishing as the
    /// conductor does; each final budget is the model's S, and what each
    /// reserved returns to its parent.
    async fn end(&mut self, v: usize) -> Result<(), String> {
        for c in self.model.children(v) {
            Box::pin(self.end(c)).await?;
        }
        let run = self
            .runs
            .remove(&v)
            .ok_or(format!("node {v} is not running"))?;
        let last = run.finish().await.map_err(failed)?;
        if last.spent != self.model.spent(v) {
            return Err(format!(
                "node {v} ended having spent {:?}, the model {:?}",
                last.spent,
                self.model.spent(v)
            ));
        }
        let parent = self.model.parent(v);
        self.model.release(v);
        match parent {
            Some(p) => self.left_as_modelled(p).await,
            None => Ok(()),
        }
    }
}
