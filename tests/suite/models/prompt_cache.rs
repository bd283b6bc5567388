//! Prompt caching through the real runtime: an Anthropic server (strict
//! checker in front) reports cache writes and reads; the run's budget, each
//! step's trace record and the money charged show them.

use agentry::{Runtime, StopReason};
use agentry_models::{AnthropicPolicy, Prices};
use agentry_test_support::TestTask;
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError, split_named_events};
use super::sse::config;

/// One `tool_use` turn whose usage reports `input` uncached prompt tokens and
/// these cache reads and writes, and 10 output tokens.
fn cached_call(id: &str, name: &str, args: &str, input: u64, read: u64, write: u64) -> Reply {
    let events: Vec<(&str, Value)> = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": input,
            "cache_read_input_tokens": read, "cache_creation_input_tokens": write, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": args}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 10}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    Reply::sse(split_named_events(&events, 13))
}

#[tokio::test]
async fn cached_tokens_reach_the_budget_the_trace_and_the_bill() -> Result<(), TestError> {
    // The first turn writes the prefix to the cache, the next two read it.
    let server = MockServer::start(vec![
        cached_call("read", "fs_read", r#"{"path":"numbers.txt"}"#, 30, 0, 2000),
        cached_call(
            "write",
            "fs_write",
            r#"{"path":"sum.txt","content":"23"}"#,
            40,
            2000,
            0,
        ),
        cached_call("fin", "task_finish", r#"{"answer":"sum=23"}"#, 50, 2000, 0),
    ])
    .await?;
    // $3 in / $15 out per million: 3 and 15 micro-units per token; cache reads
    // 0.3, writes 3.75 by Anthropic's rule.
    let model = config(&server.base_url).prices(Prices {
        input_micros_per_mtok: 3_000_000,
        output_micros_per_mtok: 15_000_000,
        ..Prices::default()
    });
    let task = TestTask::sum()?.trace();
    let outcome = Runtime::with_builtins()?
        .run(task.config(), AnthropicPolicy::new(model)?)
        .await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(server.rejected(), [], "every request met Anthropic's rules");

    // Every request marked the system prompt and the tool list.
    for sent in server.received() {
        assert_eq!(sent.body["system"][0]["cache_control"]["type"], "ephemeral");
        let tools = sent.body["tools"].as_array().ok_or("no tools")?;
        assert_eq!(
            tools.last().ok_or("no tool")?["cache_control"]["type"],
            "ephemeral"
        );
    }

    // Budget: tokens_in is the whole prompt, cached parts included.
    let spent = outcome.budget.spent;
    assert_eq!(spent.tokens_in, 30 + 2000 + 40 + 2000 + 50 + 2000);
    assert_eq!(spent.tokens_out, 30);
    assert_eq!(
        (spent.cache_read_tokens, spent.cache_write_tokens),
        (4000, 2000)
    );
    // Money: each turn rounds up per kind of token.
    let turn = |input: u64, read: u64, write: u64| {
        input * 3 + (read * 3).div_ceil(10) + (write * 375).div_ceil(100) + 10 * 15
    };
    let bill = turn(30, 0, 2000) + turn(40, 2000, 0) + turn(50, 2000, 0);
    assert_eq!(
        bill,
        (90 + 7500 + 150) + (120 + 600 + 150) + (150 + 600 + 150)
    );
    assert_eq!(spent.cost_micros, bill);

    the_trace_shows_each_turns_cached_tokens(&task, bill)
}

/// Each step record carries its turn's usage, and the budget after the step
/// the totals and the money.
fn the_trace_shows_each_turns_cached_tokens(task: &TestTask, bill: u64) -> Result<(), TestError> {
    let steps: Vec<Value> = task
        .read_trace()?
        .into_iter()
        .filter(|r| r.get("decision").is_some())
        .collect();
    let usage: Vec<(u64, u64, u64)> = steps
        .iter()
        .map(|s| {
            let u = &s["usage"];
            (
                u["tokens_in"].as_u64().unwrap_or(0),
                u["cache_read_tokens"].as_u64().unwrap_or(0),
                u["cache_write_tokens"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(usage, [(2030, 0, 2000), (2040, 2000, 0), (2050, 2000, 0)]);
    let last = steps.last().ok_or("no steps")?;
    assert_eq!(last["budget_after"]["spent"]["cache_read_tokens"], 4000);
    assert_eq!(last["budget_after"]["spent"]["cache_write_tokens"], 2000);
    assert_eq!(last["budget_after"]["spent"]["cost_micros"], bill);
    Ok(())
}
