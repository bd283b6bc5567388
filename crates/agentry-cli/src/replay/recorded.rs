//! A recorded run as replay sees it: its decisions and results step by step,
//! the inputs applied to it, how it stopped and where it came from; read from
//! a JSONL trace (a run of `agentry run --trace`, or the replay's own) or from
//! a store's session.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use agentry::protocol::budget::BudgetLimits;
use agentry::protocol::decision::PolicyOutput;
use agentry::protocol::state::SessionEntry;
use agentry::protocol::trace::{RunInput, TraceEnd, TraceLine, TraceOrigin, TraceStep};
use agentry::{RunConfig, StopReason};
use serde_json::Value;

use super::error::ReplayError;

/// One step of a recorded run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedStep {
    /// Step number, from 1.
    pub(crate) step: u64,
    /// What the policy returned (its decision, usage and model name).
    pub(crate) output: PolicyOutput,
    /// The step's result envelopes as JSON, in request order.
    pub(crate) results: Vec<Value>,
}

/// How a recorded run stopped.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedStop {
    pub(crate) reason: StopReason,
    pub(crate) detail: String,
    pub(crate) steps: u64,
    pub(crate) answer: Option<String>,
}

/// A human's recorded decision on a call that waited for approval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RecordedApproval {
    pub(crate) approved: bool,
    pub(crate) reason: Option<String>,
}

/// A message or event as recorded, and when to send it again.
#[derive(Debug, Clone)]
pub(crate) struct RecordedInput {
    /// The steps recorded before it was applied: it is sent once the replay
    /// has decided that many.
    pub(crate) after_steps: u64,
    pub(crate) input: RunInput,
}

/// A run, as recorded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorded {
    pub(crate) run_id: String,
    /// In step order; a step recorded twice (re-run after a crash) counts as
    /// its last record says.
    pub(crate) steps: Vec<RecordedStep>,
    /// Approvals and denials, by call id.
    pub(crate) approvals: BTreeMap<String, RecordedApproval>,
    /// Messages and events, in the order they were applied.
    pub(crate) messages: Vec<RecordedInput>,
    pub(crate) stop: Option<RecordedStop>,
    /// The child runs it spawned, in spawn order.
    pub(crate) children: Vec<String>,
    pub(crate) origin: Option<TraceOrigin>,
    /// The budget limits the run had (overrides included).
    pub(crate) limits: Option<BudgetLimits>,
}

impl Recorded {
    /// The decisions to play, by step.
    pub(crate) fn decisions(&self) -> impl Iterator<Item = (u64, PolicyOutput)> + '_ {
        self.steps.iter().map(|s| (s.step, s.output.clone()))
    }

    /// The recorded result of call `call_id`: its first, the one that ran (a
    /// later step repeating the id gets it back `replayed`).
    pub(crate) fn result_of(&self, call_id: &str) -> Option<&Value> {
        self.steps
            .iter()
            .flat_map(|s| &s.results)
            .find(|r| r.get("tool_call_id").and_then(Value::as_str) == Some(call_id))
    }

    /// How a replay answers call `call_id` when it waits for approval: as its
    /// step record shows it was answered. Approved only when its recorded
    /// result got past approval (it ran, or failed running) and no recorded
    /// human denied it; never from the stop line's `origin.approved`, which
    /// nothing checks against the steps.
    pub(crate) fn answer(&self, call_id: &str) -> RecordedApproval {
        let denied = |reason: String| RecordedApproval {
            approved: false,
            reason: Some(reason),
        };
        match (self.approvals.get(call_id), self.result_of(call_id)) {
            (Some(human), _) if !human.approved => human.clone(),
            (_, Some(result)) if got_past_approval(result) => RecordedApproval {
                approved: true,
                reason: None,
            },
            (_, Some(result)) => denied(format!(
                "replay: the recording shows this call refused ({})",
                error_of(result)
            )),
            (_, None) => denied("replay: the recorded run has no approval for this call".into()),
        }
    }
}

/// What the runtime's refusals before a call runs begin with: a grant, a
/// human's denial, nobody answering (`agentry-runtime/src/executor/`
/// `pipeline.rs`, `approval.rs`). An `EPERM` saying anything else is the
/// tool's own, given after approval.
const REFUSED_BEFORE_RUNNING: [&str; 3] = [
    "this run is not granted tool",
    "a human denied this call",
    "no human approved this call",
];

/// Whether a recorded result shows its call got past approval: it ran, or
/// failed while running. A call refused, cancelled, over budget or never
/// valid did not, whatever else the trace says.
pub(crate) fn got_past_approval(result: &Value) -> bool {
    if result.get("ok") == Some(&Value::Bool(true)) {
        return true;
    }
    let code = result.pointer("/error/code").and_then(Value::as_str);
    match code {
        None | Some("ENOTOOL" | "EINVAL" | "EBUDGET" | "ECANCELED") => false,
        Some("EPERM") => !refused_by_approval(result) && !refused_by_grant(result),
        Some(_) => true,
    }
}

/// Whether a recorded result is a refusal by approval: a human denied the
/// call, or nobody answered in time.
pub(crate) fn refused_by_approval(result: &Value) -> bool {
    eperm_starting(result, &REFUSED_BEFORE_RUNNING[1..])
}

fn refused_by_grant(result: &Value) -> bool {
    eperm_starting(result, &REFUSED_BEFORE_RUNNING[..1])
}

fn eperm_starting(result: &Value, prefixes: &[&str]) -> bool {
    let message = result.pointer("/error/message").and_then(Value::as_str);
    result.pointer("/error/code").and_then(Value::as_str) == Some("EPERM")
        && message.is_some_and(|m| prefixes.iter().any(|p| m.starts_with(p)))
}

/// `CODE: message` of a failed result, as recorded.
pub(crate) fn error_of(result: &Value) -> String {
    let text = |p: &str| result.pointer(p).and_then(Value::as_str).unwrap_or("");
    format!("{}: {}", text("/error/code"), text("/error/message"))
}

/// Reads `path` and keeps the lines of run `run_id`, else of its one root run.
/// Every line must be a trace record: the first that is not is named.
pub(crate) fn from_trace(path: &Path, run_id: Option<&str>) -> Result<Recorded, ReplayError> {
    let lines = agentry::insight::tracefile::read_trace(path)?;
    let from = format!("the trace {}", path.display());
    let run_id = match run_id {
        Some(id) => id.to_string(),
        None => root_run(&lines, &from)?,
    };
    let recorded = fold(&lines, &run_id);
    if recorded.steps.is_empty() && recorded.stop.is_none() {
        return Err(ReplayError::NoRun {
            from,
            what: format!("run {run_id}"),
        });
    }
    if let Some(stop) = &recorded.stop
        && (recorded.steps.len() as u64) < stop.steps
    {
        return Err(ReplayError::Incomplete {
            from,
            run_id,
            held: recorded.steps.len(),
            steps: stop.steps,
        });
    }
    Ok(recorded)
}

/// The one run of the trace without a parent.
fn root_run(lines: &[TraceLine], from: &str) -> Result<String, ReplayError> {
    let roots: BTreeSet<&str> = lines
        .iter()
        .filter_map(|l| match l {
            TraceLine::Step(s) if s.parent_id.is_none() => Some(&*s.run_id),
            TraceLine::Stop(e) if e.parent_id.is_none() => Some(e.run_id.as_str()),
            TraceLine::Step(_) | TraceLine::Stop(_) | TraceLine::Input(_) => None,
        })
        .collect();
    match roots.len() {
        1 => Ok(roots
            .into_iter()
            .map(str::to_string)
            .collect::<Vec<_>>()
            .remove(0)),
        0 => Err(ReplayError::NoRun {
            from: from.to_string(),
            what: "run record".to_string(),
        }),
        _ => Err(ReplayError::SeveralRuns {
            from: from.to_string(),
            ids: roots.into_iter().map(str::to_string).collect(),
        }),
    }
}

/// The run's lines, folded into what replay needs.
fn fold(lines: &[TraceLine], run_id: &str) -> Recorded {
    let mut steps: BTreeMap<u64, RecordedStep> = BTreeMap::new();
    let mut recorded = Recorded {
        run_id: run_id.to_string(),
        ..Recorded::default()
    };
    for line in lines {
        match line {
            TraceLine::Step(s) if &*s.run_id == run_id => {
                if recorded.limits.is_none() {
                    recorded.limits = Some(s.budget_before.limits);
                }
                steps.insert(s.step, step_of(s));
            }
            TraceLine::Input(i) if i.run_id == run_id => {
                let taken = steps.len() as u64;
                match &i.input {
                    RunInput::Approval {
                        tool_call_id,
                        approved,
                        reason,
                    } => {
                        recorded.approvals.insert(
                            tool_call_id.clone(),
                            RecordedApproval {
                                approved: *approved,
                                reason: reason.clone(),
                            },
                        );
                    }
                    RunInput::Message { .. } | RunInput::Event { .. } => {
                        recorded.messages.push(RecordedInput {
                            after_steps: taken,
                            input: i.input.clone(),
                        });
                    }
                    // Ticks, pauses, interrupts and settlements are the
                    // run's own or a crash's: not re-applied.
                    RunInput::Interrupt { .. }
                    | RunInput::Tick { .. }
                    | RunInput::Pause
                    | RunInput::Resume
                    | RunInput::Settlement { .. } => {}
                }
            }
            TraceLine::Stop(e) if e.run_id == run_id => {
                // The limits it started with: delegating to children lowers
                // them as the run goes.
                if recorded.limits.is_none() {
                    recorded.limits = Some(e.budget.limits);
                }
                recorded.children = e.children.clone();
                recorded.origin = e.origin.clone();
                recorded.stop = Some(stop_of(e));
            }
            TraceLine::Step(_) | TraceLine::Input(_) | TraceLine::Stop(_) => {}
        }
    }
    recorded.steps = steps.into_values().collect();
    recorded
}

fn step_of(s: &TraceStep) -> RecordedStep {
    let mut output = PolicyOutput::new((*s.decision).clone(), s.model.to_string());
    output.usage = s.usage;
    output.prompt_hash = s.prompt_hash.clone();
    output.compaction = s.compaction.clone();
    // The model turn's money: what the step spent less what its calls did.
    let tools: u64 = s.results.iter().map(|r| r.cost.money_micros).sum();
    output.cost_micros = s
        .budget_after
        .spent
        .cost_micros
        .saturating_sub(s.budget_before.spent.cost_micros)
        .saturating_sub(tools);
    RecordedStep {
        step: s.step,
        output,
        results: s
            .results
            .iter()
            .map(|r| serde_json::to_value(&**r).unwrap_or(Value::Null))
            .collect(),
    }
}

fn stop_of(e: &TraceEnd) -> RecordedStop {
    RecordedStop {
        reason: e.stop_reason,
        detail: e.detail.clone(),
        steps: e.steps,
        answer: e.answer.clone(),
    }
}

/// A run of a store, from its session (decisions and results) and its record
/// (limits, the task directory the CLI stored): a store keeps no token usage
/// per step, so replayed steps report none.
pub(crate) fn from_store(
    store: &dyn agentry::Store,
    location: &str,
    run_id: &str,
) -> Result<(Recorded, RunConfig), ReplayError> {
    let Some(stored) = store.load(run_id)? else {
        return Err(ReplayError::NoRun {
            from: format!("the store {location}"),
            what: format!("run {run_id}"),
        });
    };
    let config = RunConfig::from_store(store, run_id)?;
    let mut steps: Vec<RecordedStep> = Vec::new();
    for entry in &stored.session {
        match entry {
            SessionEntry::Assistant { step, decision } => steps.push(RecordedStep {
                step: *step,
                output: PolicyOutput::new((**decision).clone(), "replay"),
                results: Vec::new(),
            }),
            SessionEntry::Tool { result } => {
                if let Some(last) = steps.last_mut() {
                    last.results
                        .push(serde_json::to_value(&**result).unwrap_or(Value::Null));
                }
            }
            SessionEntry::User { .. } | SessionEntry::Event { .. } | SessionEntry::Note { .. } => {}
        }
    }
    let runs = store.runs()?;
    let children = runs
        .iter()
        .filter(|r| r.parent_id.as_deref() == Some(run_id))
        .map(|r| r.run_id.clone())
        .collect();
    let summary = runs.into_iter().find(|r| r.run_id == run_id);
    let stop = summary.and_then(|s| {
        s.stop_reason.map(|reason| RecordedStop {
            reason,
            detail: String::new(),
            steps: steps.len() as u64,
            answer: stored
                .checkpoint
                .as_ref()
                .and_then(|c| c.snapshot.task.answer.clone()),
        })
    });
    let recorded = Recorded {
        run_id: run_id.to_string(),
        steps,
        stop,
        children,
        limits: Some(config.limits),
        origin: config.origin.clone(),
        ..Recorded::default()
    };
    Ok((recorded, config))
}
