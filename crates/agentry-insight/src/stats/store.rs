//! The runs of a store: each run's last checkpoint (stop reason, spend), its
//! session (the results of its calls) and its record (task, model, start).

use agentry_protocol::state::{RunStatus, SessionEntry};
use agentry_protocol::stored_policy::StoredPolicy;
use agentry_store::{Store, StoredRun};

use super::facts::{CallFact, RunFacts, Runs, StatsError};

/// Every run of `store`: the finished ones' facts, and how many had not stopped.
pub fn runs_from_store(store: &dyn Store) -> Result<Runs, StatsError> {
    let mut runs = Runs::default();
    for summary in store.runs()? {
        // A run listed but gone by the time it is loaded was deleted meanwhile.
        let Some(stored) = store.load(&summary.run_id)? else {
            continue;
        };
        match facts(&stored, summary.updated_at_ms) {
            Some(run) => runs.finished.push(run),
            None => runs.unfinished += 1,
        }
    }
    Ok(runs)
}

/// A stored run's facts, if it stopped. `stopped_at_ms` is its last commit:
/// the stop is the last thing a run commits.
fn facts(stored: &StoredRun, stopped_at_ms: u64) -> Option<RunFacts> {
    let snapshot = &stored.checkpoint.as_ref()?.snapshot;
    let stop_reason = snapshot.control.stop_reason?;
    if snapshot.status != RunStatus::Stopped {
        return None;
    }
    // Its own spend: what its children spent is counted under their runs.
    let spent = &snapshot.control.spent;
    let delegated = &snapshot.control.delegated;
    let own = |total: u64, children: u64| total.saturating_sub(children);
    let record = &stored.record;
    Some(RunFacts {
        run_id: record.run_id.clone(),
        task_id: record.task_id.clone(),
        parent_id: record.parent_id.clone(),
        model: model_of(&record.policy),
        stop_reason,
        steps: own(spent.steps, delegated.steps),
        calls: stored
            .session
            .iter()
            .filter_map(|entry| match entry {
                SessionEntry::Tool { result } => Some(CallFact::of(result)),
                SessionEntry::User { .. }
                | SessionEntry::Assistant { .. }
                | SessionEntry::Event { .. }
                | SessionEntry::Note { .. } => None,
            })
            .collect(),
        tokens_in: own(spent.tokens_in, delegated.tokens_in),
        tokens_out: own(spent.tokens_out, delegated.tokens_out),
        tokens_cached: own(spent.cache_read_tokens, delegated.cache_read_tokens),
        cost_micros: own(spent.cost_micros, delegated.cost_micros),
        retries: own(spent.retries, delegated.retries),
        started_at_ms: record.created_at_ms,
        finished_at_ms: stopped_at_ms,
        wall_ms: stopped_at_ms.saturating_sub(record.created_at_ms),
    })
}

/// The model named by a stored policy description ([`StoredPolicy`]), as the
/// trace names it: a root's or a child's `policy`; a script (`script:FILE`)
/// is the model `script`, as its trace lines say. An embedder's free text is
/// taken as is.
fn model_of(policy: &str) -> String {
    let stored = StoredPolicy::parse(policy);
    let named = stored.policy_name();
    if named.is_empty() {
        "unknown".to_string()
    } else if named == "script" || named.starts_with("script:") {
        "script".to_string()
    } else {
        named.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::model_of;

    #[test]
    fn model_is_named_as_the_trace_names_it() {
        let root = r#"{"policy":"script:/t/sum/script.json","task_dir":"/t/sum"}"#;
        assert_eq!(model_of(root), "script");
        assert_eq!(model_of(r#"{"policy":"openai:gpt-4o"}"#), "openai:gpt-4o");
        assert_eq!(
            model_of(r#"child:{"policy":"anthropic:claude-x","model":null}"#),
            "anthropic:claude-x"
        );
        assert_eq!(model_of("my-policy"), "my-policy");
        assert_eq!(model_of(""), "unknown");
    }
}
