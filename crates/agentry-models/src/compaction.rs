//! `[policy] compaction = "summarize"`: when the session passes a share of what
//! a request may carry, the adapter asks the model, in a request of its own, to
//! summarize the older turns, and from then on sends the goal, the summary (as a
//! host note) and the newer entries. The summary's tokens are charged to the
//! step's usage, and the step's policy output records it with the entries it
//! replaces ([`Compaction`], in the trace); the session itself stays whole in
//! the state and the store. A summary is the adapter's own memory: a resumed run
//! starts without one (and summarizes again when it must). A failed summary
//! request is logged and the adapter elides, as with `compaction = "elide"`.
//!
//! What a summary request carries is bounded like any request: the entries to
//! summarize are rendered newest first until the room is used, so its cost does
//! not grow with the session either.

use agentry_protocol::decision::{Compaction, Decision, TokenUsage};
use agentry_protocol::state::SessionEntry;

use crate::config::CompactionMode;
use crate::context::{Projection, SessionBudget, fits_from, project_after, project_session};
use crate::conversation::arguments_text;
use crate::results::{head, result_text};

/// The share of a request's session room past which older turns are summarized.
pub const SUMMARIZE_AT_PERCENT: usize = 75;

/// The summary an adapter sends instead of `session[1..covers]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) text: String,
    pub(crate) covers: usize,
}

/// Older entries to summarize now: `session[from..to]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ToSummarize {
    pub(crate) from: usize,
    pub(crate) to: usize,
}

/// The entries to summarize, when what follows the current summary takes more
/// than the share of `budget`; `None` when it does not.
pub(crate) fn due(
    session: &[SessionEntry],
    summary: Option<&Summary>,
    budget: SessionBudget,
) -> Option<ToSummarize> {
    let from = summary
        .map_or(goal_len(session), |s| s.covers)
        .min(session.len());
    let share = SessionBudget {
        bytes: budget.bytes / 100 * SUMMARIZE_AT_PERCENT,
        ..budget
    };
    let head = head_entries(session, summary);
    let keep_from = fits_from(&head, &session[from..], share);
    (keep_from > 0).then_some(ToSummarize {
        from,
        to: from + keep_from,
    })
}

/// 1 when the session starts with the goal, else 0.
pub(crate) fn goal_len(session: &[SessionEntry]) -> usize {
    usize::from(matches!(session.first(), Some(SessionEntry::User { .. })))
}

/// What every request starts with under a summary: the goal and the summary.
pub(crate) fn head_entries(
    session: &[SessionEntry],
    summary: Option<&Summary>,
) -> Vec<SessionEntry> {
    let mut head: Vec<SessionEntry> = session[..goal_len(session)].to_vec();
    if let Some(s) = summary {
        head.push(SessionEntry::Note {
            text: format!(
                "[agentry] a summary of session entries {} to {} (you wrote it; they are elided): {}",
                goal_len(session),
                s.covers,
                s.text
            ),
        });
    }
    head
}

/// The text of a summary request: the goal, the summary so far, and the entries
/// to summarize, newest first until `room` bytes are used, in session order.
pub(crate) fn summary_prompt(
    session: &[SessionEntry],
    summary: Option<&Summary>,
    what: ToSummarize,
    room: usize,
    result_cap: usize,
) -> String {
    let goal = match session.first() {
        Some(SessionEntry::User { text }) => text.as_str(),
        _ => "",
    };
    let mut lines: Vec<String> = Vec::new();
    let mut used = 0usize;
    for entry in session[what.from..what.to].iter().rev() {
        let line = transcript_line(entry, result_cap);
        used += line.len() + 1;
        if used > room {
            lines.push(format!(
                "[{} older entries left out]",
                what.to - what.from - lines.len()
            ));
            break;
        }
        lines.push(line);
    }
    lines.reverse();
    format!(
        "You are summarizing the working memory of an agent so it can continue its task with less context.\n\
         The agent's goal: {goal}\n\
         Summary so far: {}\n\
         Newer entries (calls, results, messages):\n{}\n\n\
         Write one concise summary, replacing the summary so far: what was done, what was learned \
         (keep file names, numbers, identifiers, refs and open questions the agent needs), and what is left. \
         Plain text, at most 300 words.",
        summary.map_or("(none)", |s| s.text.as_str()),
        lines.join("\n")
    )
}

/// One entry as a transcript line; results as the model saw them (cut at the cap).
fn transcript_line(entry: &SessionEntry, result_cap: usize) -> String {
    match entry {
        SessionEntry::User { text } => format!("user: {}", head(text, result_cap)),
        SessionEntry::Note { text } => format!("host: {}", head(text, result_cap)),
        SessionEntry::Event { name, payload } => {
            format!("event {name}: {}", head(&payload.to_string(), result_cap))
        }
        SessionEntry::Tool { result } => format!("result: {}", result_text(result, result_cap)),
        SessionEntry::Assistant { decision, .. } => match &**decision {
            Decision::ToolCalls { calls } => {
                let calls: Vec<String> = calls
                    .iter()
                    .map(|c| {
                        format!(
                            "{} {} {}",
                            c.id,
                            c.name,
                            head(&arguments_text(&c.arguments), result_cap)
                        )
                    })
                    .collect();
                format!("assistant called: {}", calls.join("; "))
            }
            Decision::Final { answer } => format!("assistant: {}", head(answer, result_cap)),
            Decision::Failed { message, .. } => format!("host: a turn failed: {message}"),
        },
    }
}

/// What a summary request brought back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SummaryTurn {
    pub(crate) text: String,
    pub(crate) usage: TokenUsage,
}

/// The system prompt of a summary request.
pub(crate) const SUMMARY_SYSTEM: &str =
    "You write short, faithful summaries of an agent's work so far. You never call tools.";

/// Summarizes the older entries if they are due (see [`due`]), with
/// `summarize` sending the request; on success `summary` is replaced and the
/// record for the step's output returned. A failed request is logged and
/// changes nothing (the adapter elides instead).
pub(crate) async fn compact<F, Fut>(
    mode: CompactionMode,
    session: &[SessionEntry],
    summary: &mut Option<Summary>,
    budget: SessionBudget,
    summarize: F,
) -> Option<Compaction>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<SummaryTurn, Decision>>,
{
    match mode {
        CompactionMode::Elide => return None,
        CompactionMode::Summarize => {}
    }
    let what = due(session, summary.as_ref(), budget)?;
    let prompt = summary_prompt(
        session,
        summary.as_ref(),
        what,
        budget.bytes,
        budget.result_cap,
    );
    match summarize(prompt).await {
        Ok(turn) if !turn.text.trim().is_empty() => {
            *summary = Some(Summary {
                text: turn.text.clone(),
                covers: what.to,
            });
            Some(Compaction {
                summary: turn.text,
                from: goal_len(session) as u64,
                to: what.to as u64,
                usage: turn.usage,
            })
        }
        Ok(_) => {
            tracing::warn!("the model's summary of older turns was empty; eliding them instead");
            None
        }
        Err(decision) => {
            tracing::warn!(
                ?decision,
                "summarizing older turns failed; eliding them instead"
            );
            None
        }
    }
}

/// The entries a request carries: under a summary, the goal, the summary and
/// the newest entries after it that fit; else [`project_session`].
pub(crate) fn project<'a>(
    session: &'a [SessionEntry],
    summary: Option<&Summary>,
    budget: SessionBudget,
) -> Projection<'a> {
    match summary {
        None => project_session(session, budget),
        Some(s) => {
            let head = head_entries(session, Some(s));
            project_after(&head, &session[s.covers.min(session.len())..], budget)
        }
    }
}

/// The step's output with a summary's record, its tokens added to the step's.
pub(crate) fn with_compaction(
    mut out: agentry_protocol::decision::PolicyOutput,
    compaction: Option<Compaction>,
) -> agentry_protocol::decision::PolicyOutput {
    if let Some(c) = &compaction {
        out.usage.tokens_in = out.usage.tokens_in.saturating_add(c.usage.tokens_in);
        out.usage.tokens_out = out.usage.tokens_out.saturating_add(c.usage.tokens_out);
    }
    out.compaction = compaction;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::envelope::ResultEnvelope;
    use agentry_protocol::tool::ToolCall;
    use serde_json::json;

    fn session(turns: usize) -> Vec<SessionEntry> {
        let mut s = vec![SessionEntry::User { text: "g".into() }];
        for i in 0..turns {
            let id = format!("c{i}");
            s.push(SessionEntry::Assistant {
                step: i as u64,
                decision: Decision::ToolCalls {
                    calls: vec![ToolCall::new(id.clone(), "fs.read", json!({"path": "a"}))],
                }
                .into(),
            });
            s.push(SessionEntry::Tool {
                result: ResultEnvelope::success(&id, "fs.read", json!("x".repeat(500)), vec![])
                    .into(),
            });
        }
        s
    }

    const BUDGET: SessionBudget = SessionBudget {
        bytes: 20_000,
        result_cap: 16 * 1024,
    };

    #[test]
    fn nothing_is_due_below_the_share_and_whole_turns_are_due_above_it() {
        assert_eq!(due(&session(5), None, BUDGET), None);
        let s = session(10_000);
        let what = due(&s, None, BUDGET).unwrap();
        assert_eq!(what.from, 1);
        // Whole turns: the cut is before an assistant turn.
        assert!(matches!(s[what.to], SessionEntry::Assistant { .. }));
        // Under a summary covering up to `to`, nothing more is due yet.
        let summary = Summary {
            text: "so far".into(),
            covers: what.to,
        };
        assert_eq!(due(&s, Some(&summary), BUDGET), None);
    }

    #[test]
    fn a_summary_request_stays_within_its_room_on_a_long_session() {
        let s = session(10_000);
        let what = ToSummarize {
            from: 1,
            to: s.len(),
        };
        let prompt = summary_prompt(&s, None, what, 20_000, 16 * 1024);
        assert!(prompt.len() < 21_000, "{}", prompt.len());
        assert!(prompt.contains("older entries left out"));
        // The newest entries are the ones shown.
        assert!(prompt.contains("c9999"));
    }
}
