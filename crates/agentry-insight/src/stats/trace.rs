//! The runs of JSONL trace files: each run's stop line (stop reason, spend,
//! wall time) and step lines (model, the results of its calls, children's
//! share of the spend).

use std::collections::BTreeMap;
use std::path::Path;

use agentry_protocol::budget::Usage;
use agentry_protocol::trace::{TraceEnd, TraceLine, TraceStep};

use super::facts::{CallFact, RunFacts, Runs, StatsError};

/// What the lines of one run said, as they are read.
#[derive(Default)]
struct Seen {
    /// The model of its last step line.
    model: Option<String>,
    /// Results of its step lines, by step (a step written twice, e.g. again
    /// after a resume, counts once).
    calls: BTreeMap<u64, Vec<CallFact>>,
    /// Its children's spend as of its last step line.
    delegated: Usage,
    /// Its stop line.
    end: Option<TraceEnd>,
}

/// Every run of these trace files (a run's lines may be spread over several):
/// the finished ones' facts, and how many had no stop line.
pub fn runs_from_traces<P: AsRef<Path>>(paths: &[P]) -> Result<Runs, StatsError> {
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    for path in paths {
        read_file(path.as_ref(), &mut seen)?;
    }
    let mut runs = Runs::default();
    for (run_id, run) in seen {
        match run.end {
            Some(end) => {
                runs.finished
                    .push(facts(run_id, end, run.model, run.calls, &run.delegated))
            }
            None => runs.unfinished += 1,
        }
    }
    Ok(runs)
}

fn read_file(path: &Path, seen: &mut BTreeMap<String, Seen>) -> Result<(), StatsError> {
    for record in crate::tracefile::read_trace(path)? {
        match record {
            TraceLine::Step(step) => {
                on_step(&step, seen.entry(step.run_id.to_string()).or_default())
            }
            // Inputs carry no figure; they make a run known (unfinished until
            // its stop line).
            TraceLine::Input(input) => {
                seen.entry(input.run_id.clone()).or_default();
            }
            TraceLine::Stop(end) => {
                let run_id = end.run_id.clone();
                seen.entry(run_id).or_default().end = Some(*end);
            }
        }
    }
    Ok(())
}

fn on_step(step: &TraceStep, run: &mut Seen) {
    run.model = Some(step.model.to_string());
    run.calls.insert(
        step.step,
        step.results.iter().map(|r| CallFact::of(r)).collect(),
    );
    run.delegated = step.state.control.delegated;
}

fn facts(
    run_id: String,
    end: TraceEnd,
    model: Option<String>,
    calls: BTreeMap<u64, Vec<CallFact>>,
    delegated: &Usage,
) -> RunFacts {
    // Its own spend: what its children spent is counted under their runs.
    let spent = &end.budget.spent;
    let own = |total: u64, children: u64| total.saturating_sub(children);
    let wall_ms = end.budget.elapsed_ms;
    RunFacts {
        run_id,
        task_id: end.task_id,
        parent_id: end.parent_id,
        model: model.unwrap_or_else(|| "unknown".to_string()),
        stop_reason: end.stop_reason,
        steps: end.steps,
        calls: calls.into_values().flatten().collect(),
        tokens_in: own(spent.tokens_in, delegated.tokens_in),
        tokens_out: own(spent.tokens_out, delegated.tokens_out),
        tokens_cached: own(spent.cache_read_tokens, delegated.cache_read_tokens),
        cost_micros: own(spent.cost_micros, delegated.cost_micros),
        retries: own(spent.retries, delegated.retries),
        started_at_ms: end.at.saturating_sub(wall_ms),
        finished_at_ms: end.at,
        wall_ms,
    }
}
