//! Context projection under a budget: which session entries a request carries.
//!
//! The task layer (the first user message: the goal) is never dropped. When the
//! session is larger than the budget, the oldest turns after it are elided whole —
//! an assistant turn with tool calls goes together with every result answering it,
//! so a request never holds a call without its result or a result without its
//! call — and one note says how many entries were left out. The newest turn is
//! always kept. Size is estimated from the entries' JSON length (about four
//! characters per token), which is provider-neutral and cheap.

use std::borrow::Cow;
use std::collections::HashSet;

use agentry_protocol::decision::Decision;
use agentry_protocol::state::SessionEntry;

/// Characters per token assumed by the size estimate.
pub const CHARS_PER_TOKEN: usize = 4;

/// The entries to send: the whole session when it fits in `max_tokens`, else the
/// goal, a note naming how many entries were elided, and the newest whole turns
/// that fit.
pub fn project_session(
    session: &[SessionEntry],
    max_tokens: Option<u64>,
) -> Cow<'_, [SessionEntry]> {
    let Some(max_tokens) = max_tokens else {
        return Cow::Borrowed(session);
    };
    let budget = usize::try_from(max_tokens)
        .unwrap_or(usize::MAX)
        .saturating_mul(CHARS_PER_TOKEN);
    let size = |e: &SessionEntry| serde_json::to_string(e).map(|s| s.len()).unwrap_or(0);
    let total: usize = session.iter().map(size).sum();
    if total <= budget {
        return Cow::Borrowed(session);
    }
    let head = usize::from(matches!(session.first(), Some(SessionEntry::User { .. })));
    let units = turns(&session[head..]);
    let mut used: usize = session[..head].iter().map(size).sum();
    // Walk back from the newest turn, keeping whole turns while they fit.
    let mut keep_from = units.len();
    for (i, unit) in units.iter().enumerate().rev() {
        let unit_size: usize = unit.iter().map(size).sum();
        if keep_from < units.len() && used + unit_size > budget {
            break;
        }
        used += unit_size;
        keep_from = i;
    }
    let elided: usize = units[..keep_from].iter().map(|u| u.len()).sum();
    if elided == 0 {
        return Cow::Borrowed(session);
    }
    let mut out: Vec<SessionEntry> = session[..head].to_vec();
    out.push(SessionEntry::Note {
        text: format!(
            "[agentry] {elided} earlier session entries were elided to fit the context budget"
        ),
    });
    for unit in &units[keep_from..] {
        out.extend(unit.iter().cloned());
    }
    Cow::Owned(out)
}

/// Splits entries into turns: an assistant tool-call turn runs until every one of
/// its calls is answered; any other entry is a turn of its own.
fn turns(entries: &[SessionEntry]) -> Vec<&[SessionEntry]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut pending: HashSet<&str> = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        match entry {
            SessionEntry::Assistant { decision, .. } if pending.is_empty() => {
                if let Decision::ToolCalls { calls } = &**decision {
                    pending.extend(calls.iter().map(|c| c.id.as_str()));
                }
            }
            SessionEntry::Tool { result } => {
                pending.remove(result.tool_call_id.as_str());
            }
            _ => {}
        }
        if pending.is_empty() {
            out.push(&entries[start..=i]);
            start = i + 1;
        }
    }
    if start < entries.len() {
        out.push(&entries[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::envelope::ResultEnvelope;
    use agentry_protocol::tool::ToolCall;
    use serde_json::json;

    fn call(step: u64, ids: &[&str]) -> SessionEntry {
        SessionEntry::Assistant {
            step,
            decision: Decision::ToolCalls {
                calls: ids
                    .iter()
                    .map(|id| ToolCall::new(*id, "fs.read", json!({"path": "x".repeat(200)})))
                    .collect(),
            }
            .into(),
        }
    }

    fn result(id: &str) -> SessionEntry {
        let envelope: ResultEnvelope = serde_json::from_value(json!({
            "tool_call_id": id, "tool": "fs.read", "ok": true, "data": {"content": "y".repeat(400)},
            "cost": {"latency_ms": 0}, "observed_at": 0
        }))
        .unwrap();
        SessionEntry::Tool {
            result: envelope.into(),
        }
    }

    fn goal() -> SessionEntry {
        SessionEntry::User {
            text: "the goal".into(),
        }
    }

    #[test]
    fn a_session_that_fits_is_sent_whole() {
        let s = vec![goal(), call(1, &["a"]), result("a")];
        assert!(matches!(
            project_session(&s, Some(10_000)),
            Cow::Borrowed(_)
        ));
        assert!(matches!(project_session(&s, None), Cow::Borrowed(_)));
    }

    #[test]
    fn old_turns_are_elided_whole_and_the_goal_stays() {
        let s = vec![
            goal(),
            call(1, &["a", "b"]),
            result("a"),
            result("b"),
            call(2, &["c"]),
            result("c"),
            call(3, &["d"]),
            result("d"),
        ];
        // Room for about one turn.
        let p = project_session(&s, Some(200));
        assert_eq!(p[0], goal());
        assert!(
            matches!(&p[1], SessionEntry::Note { text } if text.contains("5 earlier")),
            "{:?}",
            p[1]
        );
        assert_eq!(&p[2..], &s[6..]);
        // Every result kept has its call kept, and the reverse.
        let calls: HashSet<String> = p
            .iter()
            .flat_map(|e| match e {
                SessionEntry::Assistant { decision, .. } => match &**decision {
                    Decision::ToolCalls { calls } => calls.iter().map(|c| c.id.clone()).collect(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            })
            .collect();
        let results: HashSet<String> = p
            .iter()
            .filter_map(|e| match e {
                SessionEntry::Tool { result } => Some(result.tool_call_id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(calls, results);
    }

    #[test]
    fn the_newest_turn_is_kept_even_when_it_alone_is_too_big() {
        let s = vec![
            goal(),
            call(1, &["a"]),
            result("a"),
            call(2, &["b"]),
            result("b"),
        ];
        let p = project_session(&s, Some(1));
        assert_eq!(p.len(), 4);
        assert_eq!(&p[2..], &s[3..]);
    }
}
