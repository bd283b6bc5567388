//! One step as the page shows it: its calls classified by outcome with latency
//! and retries, the budget after it (limits only when they changed), and its
//! state as a diff against the step before.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentry::protocol::budget::{BudgetLimits, Remaining, Usage};
use agentry::protocol::decision::{Compaction, Decision, TokenUsage};
use agentry::protocol::envelope::{CutData, ErrorCode, ResourceRef, ResultEnvelope, ToolError};
use agentry::protocol::trace::{AttemptRecord, StepInterrupt, TraceStep};
use serde::Serialize;
use serde_json::Value;

use super::diff::{self, Change};

/// Subtrees of a step's state shown elsewhere: the budget (its own columns)
/// and the world's refs (listed as `refs`).
const SHOWN_ELSEWHERE: [&str; 3] = ["control.limits", "control.spent", "world.refs_changed"];

/// A step row.
#[derive(Debug, Serialize)]
pub(super) struct StepView {
    n: u64,
    attempt: u32,
    /// Milliseconds since the run started, before and after the step.
    pub(super) t0: u64,
    pub(super) t1: u64,
    at: u64,
    /// The model, when it is not the lane's.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<Arc<str>>,
    #[serde(skip_serializing_if = "TokenUsage::is_empty")]
    usage: TokenUsage,
    #[serde(skip_serializing_if = "Option::is_none")]
    compaction: Option<Compaction>,
    decision: Arc<Decision>,
    /// In request order, beside `calls` (which has their ids, tools, latency).
    results: Vec<ResultView>,
    calls: Vec<CallView>,
    spent: Spent,
    left: Left,
    /// The limits, when they are not the lane's (a resume that changed them).
    #[serde(skip_serializing_if = "Option::is_none")]
    limits: Option<BudgetLimits>,
    version: u64,
    changes: Vec<Change>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    refs: BTreeMap<String, ResourceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interrupted: Option<StepInterrupt>,
}

/// A call's result without what `CallView` or the step already says (ids,
/// cost, times, refs the world lists).
#[derive(Debug, Serialize)]
struct ResultView {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cut: Option<CutData>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ToolError>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    refs: Vec<ResourceRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    saved: Option<ResourceRef>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    replayed: bool,
}

impl ResultView {
    fn of(result: &ResultEnvelope, world: &BTreeMap<String, ResourceRef>) -> ResultView {
        ResultView {
            ok: result.ok,
            data: result.data.clone(),
            cut: result.cut.clone(),
            error: result.error.clone(),
            refs: result
                .refs
                .iter()
                .filter(|r| world.get(&r.path) != Some(*r))
                .cloned()
                .collect(),
            saved: result.saved.clone(),
            replayed: result.replayed,
        }
    }
}

/// What the run had spent after a step, on the dimensions the page draws.
#[derive(Debug, Serialize)]
struct Spent {
    steps: u64,
    tool_calls: u64,
    tokens: u64,
    cost_micros: u64,
    retries: u64,
}

impl From<&Usage> for Spent {
    fn from(u: &Usage) -> Spent {
        Spent {
            steps: u.steps,
            tool_calls: u.tool_calls,
            tokens: u.tokens_in + u.tokens_out,
            cost_micros: u.cost_micros,
            retries: u.retries,
        }
    }
}

/// What was left after a step; an unlimited dimension is absent.
#[derive(Debug, Serialize)]
struct Left {
    #[serde(skip_serializing_if = "Option::is_none")]
    steps_left: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls_left: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_left: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_micros_left: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wall_ms_left: Option<u64>,
}

impl From<&Remaining> for Left {
    fn from(r: &Remaining) -> Left {
        Left {
            steps_left: r.steps_left,
            tool_calls_left: r.tool_calls_left,
            tokens_left: r.tokens_left,
            cost_micros_left: r.cost_micros_left,
            wall_ms_left: r.wall_ms_left,
        }
    }
}

/// One call of a step.
#[derive(Debug, Serialize)]
pub(super) struct CallView {
    id: String,
    tool: String,
    outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<ErrorCode>,
    /// Milliseconds, every attempt's together.
    ms: u64,
    /// Executions, retries included (0: it never ran).
    tries: u32,
    #[serde(skip_serializing_if = "is_zero")]
    backoff_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a call ended, by the class of its error code: the page's colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Outcome {
    /// It succeeded.
    Ok,
    /// The host refused it: not granted or denied, no budget, no such tool.
    Refused,
    /// It was cancelled.
    Cancelled,
    /// The model's call was wrong: invalid arguments or an unmet precondition.
    BadCall,
    /// Timed out or unavailable: worth retrying.
    Transient,
    /// The tool failed unexpectedly.
    Failed,
}

impl Outcome {
    pub(super) fn of(result: &ResultEnvelope) -> (Outcome, Option<ErrorCode>) {
        if result.ok {
            return (Outcome::Ok, None);
        }
        let Some(code) = result.error.as_ref().map(|e| e.code) else {
            return (Outcome::Failed, None);
        };
        let outcome = match code {
            ErrorCode::Eperm | ErrorCode::Ebudget | ErrorCode::Enotool | ErrorCode::Esandbox => {
                Outcome::Refused
            }
            ErrorCode::Ecanceled => Outcome::Cancelled,
            ErrorCode::Einval | ErrorCode::Eprecond => Outcome::BadCall,
            ErrorCode::Etimedout | ErrorCode::Eunavail => Outcome::Transient,
            ErrorCode::Einternal => Outcome::Failed,
            // `ErrorCode` is non-exhaustive: a code added later shows as a failure.
            _ => Outcome::Failed,
        };
        (outcome, Some(code))
    }
}

/// The state leaves of the step before, to diff the next step against.
pub(super) type Leaves = BTreeMap<String, Value>;

impl StepView {
    /// `lane_model` and `lane_limits` are the run's first step's; `before` the
    /// previous step's state leaves (replaced with this step's).
    pub(super) fn build(
        step: &TraceStep,
        lane_model: &str,
        lane_limits: &BudgetLimits,
        before: &mut Leaves,
    ) -> StepView {
        let state = serde_json::to_value(&step.state).unwrap_or(Value::Null);
        let leaves = diff::flatten(&state, &SHOWN_ELSEWHERE);
        let changes = diff::changes(before, &leaves);
        *before = leaves;
        let after = &step.budget_after;
        StepView {
            n: step.step,
            attempt: step.attempt,
            t0: step.budget_before.elapsed_ms,
            t1: after.elapsed_ms.max(step.budget_before.elapsed_ms),
            at: step.at,
            model: (&*step.model != lane_model).then(|| Arc::clone(&step.model)),
            usage: step.usage,
            compaction: step.compaction.clone(),
            decision: Arc::clone(&step.decision),
            results: step
                .results
                .iter()
                .map(|r| ResultView::of(r, &step.state.world.refs_changed))
                .collect(),
            calls: step
                .results
                .iter()
                .map(|r| call(r, &step.attempts))
                .collect(),
            spent: Spent::from(&after.spent),
            left: Left::from(&after.remaining),
            limits: (after.limits != *lane_limits).then_some(after.limits),
            version: step.state_version,
            changes,
            refs: step.state.world.refs_changed.clone(),
            interrupted: step.interrupted.clone(),
        }
    }
}

fn call(result: &ResultEnvelope, attempts: &[AttemptRecord]) -> CallView {
    let (outcome, code) = Outcome::of(result);
    let mine = attempts
        .iter()
        .filter(|a| a.tool_call_id == result.tool_call_id);
    let (tries, ms, backoff_ms) = mine.fold((0u32, 0u64, 0u64), |(n, ms, b), a| {
        (n + 1, ms + a.latency_ms, b + a.backoff_ms.unwrap_or(0))
    });
    // Attempts are recorded only when a call was retried or failed; else the
    // result's own attempt number and latency say it all.
    let (tries, ms) = if tries == 0 {
        (result.attempt, result.cost.latency_ms)
    } else {
        (tries, ms)
    };
    CallView {
        id: result.tool_call_id.clone(),
        tool: result.tool.clone(),
        outcome,
        code,
        ms,
        tries,
        backoff_ms,
    }
}
