//! Host-made call ids for calls the model sent without one.
//!
//! Results, the idempotency table and the provider's pairing of a call with
//! its result are all keyed by the call id. Some servers send none (or a blank
//! one); such a call gets `call_<step>_<k>` (`k` its position in the turn),
//! with a suffix while that is taken by another call of the turn or of the
//! run so far, so it can never be mistaken for (or replayed as) another call.
//! The request renders the decision as stored, so the provider sees the host
//! id on the call and on its result alike.

use std::collections::HashSet;

use agentry_protocol::decision::Decision;
use agentry_protocol::state::SessionEntry;

/// True for an id no call can go by: empty or blank.
pub(crate) fn is_blank(id: &str) -> bool {
    id.trim().is_empty()
}

/// Gives every call of `decision` with a blank id a host-made id unique in the
/// turn and in `session`. Calls with an id keep it, duplicates included (the
/// executor refuses a duplicate by name).
pub(crate) fn assign_host_ids(decision: &mut Decision, step: u64, session: &[SessionEntry]) {
    let Decision::ToolCalls { calls } = decision else {
        return;
    };
    if !calls.iter().any(|c| is_blank(&c.id)) {
        return;
    }
    let mut taken: HashSet<String> = session_ids(session);
    taken.extend(calls.iter().map(|c| c.id.clone()));
    agentry_protocol::tool::assign_blank_ids(calls, step, &mut taken);
}

/// Every call id the run's decisions used so far.
fn session_ids(session: &[SessionEntry]) -> HashSet<String> {
    let mut ids = HashSet::new();
    for entry in session {
        if let SessionEntry::Assistant { decision, .. } = entry
            && let Decision::ToolCalls { calls } = &**decision
        {
            ids.extend(calls.iter().map(|c| c.id.clone()));
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::tool::ToolCall;
    use serde_json::json;

    fn ids(decision: &Decision) -> Vec<&str> {
        match decision {
            Decision::ToolCalls { calls } => calls.iter().map(|c| c.id.as_str()).collect(),
            Decision::Final { .. } | Decision::Failed { .. } => Vec::new(),
        }
    }

    fn calls(ids: &[&str]) -> Decision {
        Decision::ToolCalls {
            calls: ids
                .iter()
                .map(|id| ToolCall::new(*id, "fs.read", json!({})))
                .collect(),
        }
    }

    #[test]
    fn blank_ids_get_host_ids_that_collide_with_nothing() {
        // An earlier step already used call_3_0; this turn has call_3_1 itself.
        let session = vec![SessionEntry::Assistant {
            step: 1,
            decision: calls(&["call_3_0"]).into(),
        }];
        let mut d = calls(&["", "call_3_1", "  ", "x", "x"]);
        assign_host_ids(&mut d, 3, &session);
        assert_eq!(
            ids(&d),
            ["call_3_0_2", "call_3_1", "call_3_2", "x", "x"],
            "blank ids replaced, the model's own ids (duplicates too) kept"
        );
    }
}
