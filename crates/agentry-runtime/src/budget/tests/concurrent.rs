//! The concurrent phase of the tree property: every node runs its program in a
//! task of its own on a multi-thread runtime — steps (spend and decide, the
//! turn's charge, the tool calls booked through the allowance), ticks, retries,
//! children carved in its own steps, its end — while the embedder carves more
//! children from outside at arbitrary moments. Replies are counted where they
//! arrive. A node that ends cancels its subtree and, before it releases its
//! allowance, waits for its subtree to end, so that every charge-up reaches
//! the parent before the release.

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use agentry_protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use ractor::ActorRef;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::model::{Amounts, add, allowance};
use super::plan::{Op, StepSpec, TreePlan};
use super::standin::{StandInRun, StepOutcome, reserve};
use crate::budget::{BudgetMsg, ParentLink, SpendReply};

/// What one node did, counted where the replies arrived.
pub(crate) struct NodeReport {
    pub(crate) id: usize,
    pub(crate) parent: Option<usize>,
    pub(crate) limits: BudgetLimits,
    /// What its parent set aside for it.
    pub(crate) allowance: Amounts,
    /// Everything granted to or charged on the node itself.
    pub(crate) own: Usage,
    /// Its largest single model turn (the most one charge can cross a limit by).
    pub(crate) largest_turn: Amounts,
    /// Spends asked (steps, ticks, retries), granted and refused.
    pub(crate) asked: usize,
    pub(crate) granted: usize,
    pub(crate) refused: usize,
    /// The run, while the node is live.
    pub(crate) run: Option<StandInRun>,
    /// The budget it ended with.
    pub(crate) last: Option<BudgetSnapshot>,
}

impl NodeReport {
    fn new(id: usize, parent: Option<usize>, limits: BudgetLimits, allowance: Amounts) -> Self {
        NodeReport {
            id,
            parent,
            limits,
            allowance,
            own: Usage::default(),
            largest_turn: Amounts::default(),
            asked: 0,
            granted: 0,
            refused: 0,
            run: None,
            last: None,
        }
    }

    fn spent(&mut self, usage: Usage) {
        self.own = add(&self.own, &usage);
    }
}

type Task = JoinHandle<Result<Vec<NodeReport>, String>>;

/// A node's task, boxed: `drive` starts the tasks of the children it carves, so
/// its future's type refers to itself.
type Driving = Pin<Box<dyn Future<Output = Result<Vec<NodeReport>, String>> + Send>>;

fn driving(shared: Arc<Shared>, report: NodeReport, run: StandInRun) -> Driving {
    Box::pin(drive(shared, report, run))
}

/// What the embedder needs of a live node to carve a child under it.
#[derive(Clone)]
struct NodeRef {
    budget: ActorRef<BudgetMsg>,
    token: CancellationToken,
    limits: BudgetLimits,
}

#[derive(Default)]
struct Slot {
    run: OnceLock<NodeRef>,
    /// The tasks of the children carved here; `None` once the node ends.
    kids: Mutex<Option<Vec<Task>>>,
}

/// Reservations asked, granted and refused, all nodes together.
#[derive(Default)]
pub(crate) struct Reservations {
    pub(crate) asked: AtomicUsize,
    pub(crate) granted: AtomicUsize,
    pub(crate) refused: AtomicUsize,
}

struct Shared {
    plan: TreePlan,
    slots: Vec<Slot>,
    reservations: Reservations,
}

fn name(id: usize) -> String {
    format!("n{id}")
}

fn failed(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Runs the concurrent phase to its end and returns every node carved, live
/// (with its run) or ended, and the reservation counts.
pub(crate) async fn run(plan: &TreePlan) -> Result<(Vec<NodeReport>, Reservations), String> {
    let slots = plan.nodes.iter().map(|_| Slot::default()).collect();
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        slots,
        reservations: Reservations::default(),
    });
    let root = StandInRun::start(plan.root, Usage::default(), None, CancellationToken::new())
        .await
        .map_err(failed)?;
    *shared.slots[0].kids.lock().map_err(failed)? = Some(Vec::new());
    let _ = shared.slots[0].run.set(NodeRef {
        budget: root.budget().clone(),
        token: root.token().clone(),
        limits: plan.root,
    });
    let report = NodeReport::new(0, None, plan.root, Amounts::default());
    let root_task = tokio::spawn(driving(Arc::clone(&shared), report, root));
    tokio::spawn(embed(Arc::clone(&shared)))
        .await
        .map_err(failed)??;
    // Every task whose node is live has finished its program: collect them,
    // then the tasks of the children carved under each live node.
    let mut pending = vec![root_task];
    let mut reports = Vec::new();
    while let Some(task) = pending.pop() {
        for r in task.await.map_err(failed)?? {
            if r.run.is_some() {
                pending.extend(close(&shared, r.id)?);
            }
            reports.push(r);
        }
    }
    let shared = Arc::try_unwrap(shared).map_err(|_| "a task still holds the tree")?;
    Ok((reports, shared.reservations))
}

/// No more children under `id`: the tasks of those carved so far.
fn close(shared: &Shared, id: usize) -> Result<Vec<Task>, String> {
    Ok(shared.slots[id]
        .kids
        .lock()
        .map_err(failed)?
        .take()
        .unwrap_or_default())
}

/// Starts `task` as a child's under `parent`, unless `parent` has ended.
fn adopt(
    shared: &Shared,
    parent: usize,
    task: impl Future<Output = Result<Vec<NodeReport>, String>> + Send + 'static,
) -> Result<bool, String> {
    let mut kids = shared.slots[parent].kids.lock().map_err(failed)?;
    Ok(match kids.as_mut() {
        Some(list) => {
            list.push(tokio::spawn(task));
            true
        }
        None => false,
    })
}

/// Carves node `child` under `parent` as `Runtime::start_child` does: a
/// reservation, then the child's run (its token a child of the parent's).
async fn carve(
    shared: &Shared,
    child: usize,
    parent: &NodeRef,
) -> Result<Option<(StandInRun, NodeReport)>, String> {
    let plan = &shared.plan.nodes[child];
    let counts = &shared.reservations;
    counts.asked.fetch_add(1, Ordering::Relaxed);
    let limits = match reserve(&parent.budget, &name(child), plan.request)
        .await
        .map_err(failed)?
    {
        Ok(limits) => limits,
        Err(_) => {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
    };
    counts.granted.fetch_add(1, Ordering::Relaxed);
    let link = ParentLink {
        budget: parent.budget.clone(),
        child_id: name(child),
    };
    let run = StandInRun::start(
        limits,
        Usage::default(),
        Some(link),
        parent.token.child_token(),
    )
    .await
    .map_err(failed)?;
    *shared.slots[child].kids.lock().map_err(failed)? = Some(Vec::new());
    let _ = shared.slots[child].run.set(NodeRef {
        budget: run.budget().clone(),
        token: run.token().clone(),
        limits,
    });
    let report = NodeReport::new(
        child,
        Some(plan.parent),
        limits,
        allowance(&parent.limits, &limits),
    );
    Ok(Some((run, report)))
}

/// The embedder: carves its nodes in order, each after a few yields, under
/// parents that exist and have not ended by then.
async fn embed(shared: Arc<Shared>) -> Result<(), String> {
    for (child, node) in shared.plan.nodes.iter().enumerate().skip(1) {
        if !node.by_embedder {
            continue;
        }
        for _ in 0..node.embedder_pause {
            tokio::task::yield_now().await;
        }
        let Some(parent) = shared.slots[node.parent].run.get().cloned() else {
            continue;
        };
        if parent.token.is_cancelled() {
            continue; // start_child refuses a parent that has stopped
        }
        let task_shared = Arc::clone(&shared);
        adopt(&shared, node.parent, async move {
            match carve(&task_shared, child, &parent).await? {
                Some((run, report)) => driving(task_shared, report, run).await,
                None => Ok(Vec::new()),
            }
        })?;
    }
    Ok(())
}

/// Runs a node's program; the node stays live when the program is done, or
/// ends (with its subtree) at an `End`, a refused step or tick, or when an
/// ancestor ended.
async fn drive(
    shared: Arc<Shared>,
    mut report: NodeReport,
    mut run: StandInRun,
) -> Result<Vec<NodeReport>, String> {
    let program = shared.plan.nodes[report.id].program.clone();
    let mut goes_on = true;
    for op in program {
        if !goes_on || run.token().is_cancelled() {
            goes_on = false;
            break;
        }
        goes_on = match op {
            Op::Step(spec) => step(&shared, &mut run, &mut report, spec).await?,
            Op::Tick(spec) => tick(&shared, &mut run, &mut report, spec).await?,
            Op::Retry => {
                retry(&run, &mut report).await?;
                true
            }
            Op::End => false,
        };
        tokio::task::yield_now().await;
    }
    if goes_on && !run.token().is_cancelled() {
        report.run = Some(run);
        return Ok(vec![report]);
    }
    end(shared, report, run).await
}

/// A step; false when the run stops there.
async fn step(
    shared: &Arc<Shared>,
    run: &mut StandInRun,
    report: &mut NodeReport,
    spec: StepSpec,
) -> Result<bool, String> {
    report.asked += 1;
    match run.step(spec.turn).await.map_err(failed)? {
        StepOutcome::Refused(_) => {
            report.refused += 1;
            Ok(false)
        }
        StepOutcome::Cancelled { .. } => {
            report.granted += 1;
            report.spent(Usage::step());
            Ok(false)
        }
        StepOutcome::Granted { .. } => {
            report.granted += 1;
            report.spent(add(&Usage::step(), &spec.turn.usage()));
            report.largest_turn = report.largest_turn.max(&Amounts::of(&spec.turn.usage()));
            // The model decides meanwhile: others spend and carve.
            tokio::task::yield_now().await;
            let calls = run.tool_calls(spec.calls);
            report.spent(Usage::tool_calls(calls));
            if let Some(child) = spec.spawn.filter(|_| calls > 0) {
                spawn(shared, report.id, child).await?;
            }
            Ok(true)
        }
    }
}

/// A child carved by one of the node's own calls (`agent.spawn`).
async fn spawn(shared: &Arc<Shared>, id: usize, child: usize) -> Result<(), String> {
    let me = shared.slots[id]
        .run
        .get()
        .cloned()
        .ok_or(format!("node {id} runs but is not on record"))?;
    if let Some((child_run, report)) = carve(shared, child, &me).await? {
        let adopted = adopt(shared, id, driving(Arc::clone(shared), report, child_run))?;
        if !adopted {
            return Err(format!("node {id} carved node {child} after it ended"));
        }
    }
    Ok(())
}

/// A tick, then the step it wakes; false when the run stops.
async fn tick(
    shared: &Arc<Shared>,
    run: &mut StandInRun,
    report: &mut NodeReport,
    spec: StepSpec,
) -> Result<bool, String> {
    report.asked += 1;
    match run.tick().await.map_err(failed)? {
        SpendReply::Granted { .. } => {
            report.granted += 1;
            report.spent(Usage {
                ticks: 1,
                ..Usage::default()
            });
            step(shared, run, report, spec).await
        }
        SpendReply::Refused(_) => {
            report.refused += 1;
            Ok(false)
        }
    }
}

async fn retry(run: &StandInRun, report: &mut NodeReport) -> Result<(), String> {
    report.asked += 1;
    if run.retry().await.map_err(failed)? {
        report.granted += 1;
        report.spent(Usage {
            retries: 1,
            ..Usage::default()
        });
    } else {
        report.refused += 1;
    }
    Ok(())
}

/// Ends a node: cancels its subtree, waits for every child carved under it
/// to end, then finishes as the conductor does (final budget, release).
async fn end(
    shared: Arc<Shared>,
    mut report: NodeReport,
    run: StandInRun,
) -> Result<Vec<NodeReport>, String> {
    run.token().cancel();
    let mut out = Vec::new();
    for kid in close(&shared, report.id)? {
        for mut r in kid.await.map_err(failed)?? {
            match r.run.take() {
                Some(kid_run) => out.extend(Box::pin(end(Arc::clone(&shared), r, kid_run)).await?),
                None => out.push(r),
            }
        }
    }
    report.last = Some(run.finish().await.map_err(failed)?);
    out.push(report);
    Ok(out)
}
