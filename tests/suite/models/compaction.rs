//! `compaction = "summarize"` through the real runtime and the OpenAI adapter,
//! against the strict mock server: once the session passes its share of the
//! window the adapter asks the model for a summary (a request without tools),
//! charges its tokens to the step, records it in the trace with the entries it
//! stands for, and sends the summary instead of those entries from then on,
//! every request fitting the window; the session stays whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentry::{Runtime, StopReason};
use agentry_models::{CompactionMode, OpenAiPolicy};
use agentry_test_support::TestTask;
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError, split_events};
use super::sse::{call_args, call_start, chunk, config, finish, usage};

const WINDOW: u64 = 6_000;
const RESERVED: u64 = 1024;
const STEPS: u64 = 30;
const PART: u64 = 1_000;
/// Prompt and completion tokens the mock reports for a summary request.
const SUMMARY_USAGE: (u64, u64) = (1_000, 50);

fn call(id: &str, name: &str, args: &str) -> Reply {
    let events = [
        call_start(0, id, name),
        call_args(0, args),
        finish("tool_calls"),
        usage(10, 5),
        "[DONE]".into(),
    ];
    Reply::sse(split_events(&events, usize::MAX))
}

fn summary(n: u64) -> Reply {
    let events = [
        chunk(json!({"role": "assistant", "content": format!("SUMMARY-{n}: parts read so far")})),
        finish("stop"),
        usage(SUMMARY_USAGE.0, SUMMARY_USAGE.1),
        "[DONE]".into(),
    ];
    Reply::sse(split_events(&events, usize::MAX))
}

/// Answers a request without tools with a summary, any other with the next
/// step: read part i, then write the count, then finish.
fn responder(steps: Arc<AtomicU64>, summaries: Arc<AtomicU64>) -> Reply {
    Reply::from_request(move |body| {
        if body.get("tools").is_none() {
            return summary(summaries.fetch_add(1, Ordering::SeqCst));
        }
        let i = steps.fetch_add(1, Ordering::SeqCst);
        match i {
            i if i < STEPS => {
                let args = json!({"path": "big.txt", "offset": i * PART, "limit": PART});
                call(&format!("r{i}"), "fs_read", &args.to_string())
            }
            i if i == STEPS => call(
                "write",
                "fs_write",
                &json!({"path": "count.txt", "content": "done"}).to_string(),
            ),
            _ => call("fin", "task_finish", r#"{"answer":"counted"}"#),
        }
    })
}

#[tokio::test]
async fn summarize_replaces_older_turns_charges_the_step_and_is_traced() -> Result<(), TestError> {
    let text: String = (0..STEPS * PART / 50)
        .map(|i| format!("{i:06} {}\n", "q".repeat(43)))
        .collect();
    let task = TestTask::new("read big.txt part by part", &[("big.txt", &text)])?
        .grant(&["fs.read", "fs.write"])
        .max_steps(STEPS + 5)
        .accept_file_equals("count.txt", "done")
        .trace();
    let (steps, summaries) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let replies = (0..3 * STEPS)
        .map(|_| responder(Arc::clone(&steps), Arc::clone(&summaries)))
        .collect();
    let server = MockServer::start(replies).await?;
    let model = config(&server.base_url)
        .context_tokens(WINDOW)
        .compaction(CompactionMode::Summarize);

    let outcome = Runtime::with_builtins()?
        .run(task.config(), OpenAiPolicy::new(model)?)
        .await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, STEPS + 2);
    assert_eq!(server.rejected(), []);
    let summarized = summaries.load(Ordering::SeqCst);
    assert!(summarized >= 2, "{summarized} summaries");
    let sent = server.received();
    for (i, r) in sent.iter().enumerate() {
        let bytes = serde_json::to_vec(&r.body)?.len() as u64;
        assert!(bytes / 4 <= WINDOW - RESERVED, "request {i}: {bytes} bytes");
    }
    // The last request: the goal, the latest summary as a note, newer entries only.
    let last = sent.last().ok_or("no request")?.body["messages"].to_string();
    assert!(
        last.contains(&format!("SUMMARY-{}", summarized - 1)),
        "{last}"
    );
    assert!(
        !last.contains("\"r0\""),
        "the first call is summarized: {last}"
    );
    assert_eq!(outcome.state.session_len, 1 + 2 * (STEPS + 2));
    the_trace_records_each_summary(&task, summarized)
}

/// Each summary is on its step's trace line with what it stands for, and its
/// tokens are in the step's spend.
fn the_trace_records_each_summary(task: &TestTask, summarized: u64) -> Result<(), TestError> {
    let trace = std::fs::read_to_string(task.trace_path())?;
    let mut seen = 0;
    let mut last_to = 0;
    for line in trace.lines() {
        let line: Value = serde_json::from_str(line)?;
        let Some(c) = line.get("compaction") else {
            continue;
        };
        assert_eq!(c["summary"], format!("SUMMARY-{seen}: parts read so far"));
        assert_eq!(c["from"], 1);
        let to = c["to"].as_u64().ok_or("to")?;
        assert!(to > last_to, "{c}");
        last_to = to;
        assert_eq!(c["usage"]["tokens_in"], SUMMARY_USAGE.0);
        let spent = |at: &str, what: &str| line[at]["spent"][what].as_u64().unwrap_or(0);
        let tokens_in = spent("budget_after", "tokens_in") - spent("budget_before", "tokens_in");
        assert_eq!(
            tokens_in,
            SUMMARY_USAGE.0 + 10,
            "the summary is charged to the step"
        );
        seen += 1;
    }
    assert_eq!(seen, summarized);
    Ok(())
}
