use std::collections::HashSet;

use super::*;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::tool::ToolCall;
use proptest::prelude::*;
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

fn result_of(id: &str, len: usize) -> SessionEntry {
    SessionEntry::Tool {
        result: ResultEnvelope::success(id, "fs.read", json!({"content": "y".repeat(len)}), vec![])
            .into(),
    }
}

fn result(id: &str) -> SessionEntry {
    result_of(id, 400)
}

fn goal() -> SessionEntry {
    SessionEntry::User {
        text: "the goal".into(),
    }
}

fn budget(bytes: usize) -> SessionBudget {
    SessionBudget {
        bytes,
        result_cap: 16 * 1024,
    }
}

/// Bytes the projection counts for what it kept.
fn size(p: &Projection<'_>) -> usize {
    p.entries.iter().map(|e| entry_bytes(e, p.result_cap)).sum()
}

/// Call ids of the kept calls, and of the kept results.
fn calls_and_results(entries: &[SessionEntry]) -> (HashSet<String>, HashSet<String>) {
    let mut calls = HashSet::new();
    let mut results = HashSet::new();
    for e in entries {
        match e {
            SessionEntry::Assistant { decision, .. } => {
                if let Decision::ToolCalls { calls: c } = &**decision {
                    calls.extend(c.iter().map(|c| c.id.clone()));
                }
            }
            SessionEntry::Tool { result } => {
                results.insert(result.tool_call_id.clone());
            }
            SessionEntry::User { .. } | SessionEntry::Event { .. } | SessionEntry::Note { .. } => {}
        }
    }
    (calls, results)
}

#[test]
fn a_session_that_fits_is_sent_whole() {
    let s = vec![goal(), call(1, &["a"]), result("a")];
    let p = project_session(&s, budget(100_000));
    assert!(matches!(p.entries, Cow::Borrowed(_)));
    assert_eq!(p.elided, 0);
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
    // Room for the goal, the note and two turns, not three.
    let two_turns: usize = s[4..].iter().map(|e| entry_bytes(e, 16 * 1024)).sum();
    let fixed = entry_bytes(&s[0], 16 * 1024) + NOTE_BYTES;
    let p = project_session(&s, budget(fixed + two_turns + 10));
    assert_eq!(p.entries[0], goal());
    assert!(
        matches!(&p.entries[1], SessionEntry::Note { text } if text.contains("3 earlier")),
        "{:?}",
        p.entries[1]
    );
    assert_eq!(&p.entries[2..], &s[4..]);
    assert_eq!(p.elided, 3);
    let (calls, results) = calls_and_results(&p.entries);
    assert_eq!(calls, results);
}

#[test]
fn a_cut_never_separates_a_call_from_its_results() {
    // Room for the last result and part of its turn only: the whole turn goes.
    let s = vec![
        goal(),
        call(1, &["a"]),
        result("a"),
        call(2, &["b", "c"]),
        result("b"),
        result("c"),
    ];
    let last_two: usize = s[4..].iter().map(|e| entry_bytes(e, 16 * 1024)).sum();
    let turn2: usize = s[3..].iter().map(|e| entry_bytes(e, 16 * 1024)).sum();
    let fixed = entry_bytes(&s[0], 16 * 1024) + NOTE_BYTES;
    let p = project_session(&s, budget(fixed + turn2 + 5));
    assert_eq!(&p.entries[2..], &s[3..]);
    assert!(last_two < turn2);
}

#[test]
fn a_newest_turn_too_large_is_shown_with_shorter_results_and_fits() {
    let s = vec![
        goal(),
        call(1, &["a"]),
        result("a"),
        call(2, &["b", "c"]),
        result_of("b", 50_000),
        result_of("c", 50_000),
    ];
    let p = project_session(&s, budget(8_000));
    assert!(p.result_cap < 16 * 1024, "{}", p.result_cap);
    assert!(size(&p) <= 8_000, "{}", size(&p));
    assert_eq!(&p.entries[p.entries.len() - 3..], &s[3..]);
    let (calls, results) = calls_and_results(&p.entries);
    assert_eq!(calls, results);
}

#[test]
fn the_estimate_learns_a_denser_tokenizer_and_never_a_sparser_one() {
    let mut e = TokenEstimate::default();
    assert_eq!(e.tokens_for(4_000), 1_000);
    // The server counted twice as many tokens as bytes / 4.
    e.learn(4_000, 2_000);
    assert_eq!(e.tokens_for(4_000), 2_000);
    assert_eq!(e.bytes_for(1_000), 2_000);
    // Fewer tokens than bytes / 4: the estimate stays at bytes / 4.
    e.learn(4_000, 10);
    assert_eq!(e.tokens_for(4_000), 1_000);
    // Nothing reported: nothing learned. Absurd counts are capped.
    e.learn(4_000, 0);
    assert_eq!(e.tokens_for(4_000), 1_000);
    e.learn(4_000, 1_000_000);
    assert_eq!(e.tokens_for(4_000), 4_000);
}

/// A session of turns: each turn is 0-3 calls with results of random sizes,
/// a user message, or a final answer.
fn sessions() -> impl Strategy<Value = Vec<SessionEntry>> {
    let turn = prop_oneof![
        (0usize..4, 0usize..6_000).prop_map(|(n, len)| (n, len, 0u8)),
        (0usize..1, 0usize..500).prop_map(|(n, len)| (n, len, 1u8)),
        (0usize..1, 0usize..500).prop_map(|(n, len)| (n, len, 2u8)),
    ];
    proptest::collection::vec(turn, 0..40).prop_map(|turns| {
        let mut s = vec![goal()];
        for (t, (n, len, kind)) in turns.into_iter().enumerate() {
            match kind {
                0 => {
                    let ids: Vec<String> = (0..n.max(1)).map(|i| format!("c{t}_{i}")).collect();
                    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
                    s.push(call(t as u64, &refs));
                    s.extend(ids.iter().map(|id| result_of(id, len)));
                }
                1 => s.push(SessionEntry::User {
                    text: "m".repeat(len),
                }),
                _ => s.push(SessionEntry::Assistant {
                    step: t as u64,
                    decision: Decision::Final {
                        answer: "a".repeat(len),
                    }
                    .into(),
                }),
            }
        }
        s
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Whatever the session and the budget: the goal stays, what is kept is a
    /// suffix of the session, every kept call has its results and every kept
    /// result its call, and, when anything is kept after the goal, it fits.
    #[test]
    fn any_projection_keeps_the_goal_a_suffix_and_whole_turns(
        s in sessions(),
        bytes in 2_000usize..60_000,
    ) {
        let p = project_session(&s, budget(bytes));
        prop_assert_eq!(&p.entries[0], &s[0]);
        let kept = if p.elided == 0 { &p.entries[1..] } else { &p.entries[2..] };
        prop_assert_eq!(kept, &s[s.len() - kept.len()..]);
        prop_assert_eq!(p.elided + kept.len() + 1, s.len());
        let (calls, results) = calls_and_results(&p.entries);
        prop_assert_eq!(calls, results);
        if p.elided > 0 && !kept.is_empty() {
            prop_assert!(size(&p) <= bytes, "{} > {}", size(&p), bytes);
        }
    }
}

#[test]
fn a_session_that_fits_is_sent_whole_even_with_a_result_that_answers_no_call() {
    let orphan = SessionEntry::Tool {
        result: ResultEnvelope::success("", "policy", json!("x"), vec![]).into(),
    };
    let s = vec![goal(), orphan, call(1, &["a"]), result("a")];
    let p = project_session(&s, budget(100_000));
    assert!(matches!(p.entries, Cow::Borrowed(_)));
}
