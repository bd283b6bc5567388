//! The context projection's cost per request on a long session: a 10,000-entry
//! session against a 1,000-entry one, the same window. The projection walks
//! back from the newest entry and stops at the first that does not fit, so the
//! two must cost the same: what is elided is never looked at.
//!
//! `cargo bench -p agentry-models --bench projection` prints divan's table, then
//! the ratio of the medians (10,000 / 1,000 entries), which must be ~1.

use std::hint::black_box;
use std::time::{Duration, Instant};

use agentry_models::context::{SessionBudget, project_session};
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::{DEFAULT_RESULT_CAP, ResultEnvelope};
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolCall;
use serde_json::json;

/// The goal, then call/result pairs with 1 KiB results: `entries` in all.
fn session(entries: usize) -> Vec<SessionEntry> {
    let mut s = vec![SessionEntry::User {
        text: "read every part of big.txt".into(),
    }];
    for i in 0..(entries - 1) / 2 {
        let id = format!("call_{i}");
        s.push(SessionEntry::Assistant {
            step: i as u64,
            decision: Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    id.clone(),
                    "fs.read",
                    json!({"path": "big.txt", "offset": i * 1024, "limit": 1024}),
                )],
            }
            .into(),
        });
        let data = json!({"path": "big.txt", "content": "x".repeat(1024), "offset": i * 1024});
        s.push(SessionEntry::Tool {
            result: ResultEnvelope::success(&id, "fs.read", data, Vec::new()).into(),
        });
    }
    s
}

/// A 32k window's session share, as the adapters compute it (about 120 KB).
const BUDGET: SessionBudget = SessionBudget {
    bytes: 120_000,
    result_cap: DEFAULT_RESULT_CAP,
};

#[divan::bench(args = [1_000, 10_000])]
fn project(bencher: divan::Bencher, entries: usize) {
    let s = session(entries);
    bencher.bench_local(|| project_session(black_box(&s), BUDGET).elided);
}

/// Median time of one projection of a session of `entries`.
fn median(entries: usize) -> Duration {
    let s = session(entries);
    let mut times: Vec<Duration> = (0..201)
        .map(|_| {
            let start = Instant::now();
            black_box(project_session(black_box(&s), BUDGET).elided);
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn main() {
    divan::main();
    let small = median(1_000);
    let large = median(10_000);
    println!(
        "projection: {small:?} for 1,000 entries, {large:?} for 10,000 (same window): ratio {:.2}",
        large.as_secs_f64() / small.as_secs_f64()
    );
}
