//! The chat-completions stream pieces, the adapter configuration and a one-step
//! `decide` the adapter tests share. The root suite's models tests
//! (`tests/suite/models/`) include this file by path, with `server.rs`.

use std::time::Duration;

use agentry_models::{ModelConfig, Policy, RetryConfig};
use agentry_policy::PolicyContext;
use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::PolicyOutput;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolSpec;
use serde_json::{Value, json};

use super::server::{split_events, split_named_events};

pub fn tools() -> Vec<ToolSpec> {
    ["fs.read", "fs.write", "task.finish"]
        .iter()
        .map(|n| ToolSpec {
            name: n.to_string(),
            description: format!("the {n} tool"),
            input_schema: json!({"type": "object"}),
        })
        .collect()
}

/// The adapter's configuration for the scripted server. Its stall timeout is
/// far above the server's 2 ms between pieces, so a loaded machine never looks
/// like a stalled stream; the stall tests use [`stalling`].
pub fn config(base: &str) -> ModelConfig {
    ModelConfig::new("test-model", base)
        .api_key("sk-test")
        .stall_timeout(Duration::from_secs(5))
        .retry(RetryConfig {
            max_retries: 2,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_secs(5),
        })
}

/// [`config`] with a short stall timeout, for the tests whose server stalls
/// on purpose (its stall lasts 20 s).
pub fn stalling(base: &str) -> ModelConfig {
    config(base).stall_timeout(Duration::from_millis(400))
}

pub async fn decide(policy: &mut dyn Policy, session: &[SessionEntry]) -> PolicyOutput {
    let tools = tools();
    let budget = BudgetSnapshot::default();
    policy
        .decide(PolicyContext {
            deltas: None,
            traceparent: None,
            content: None,
            run_id: "run-1",
            step: 1,
            goal: "sum the numbers",
            tools: &tools,
            session,
            budget: &budget,
        })
        .await
}

pub fn chunk(delta: Value) -> String {
    json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]}).to_string()
}

pub fn call_start(index: u64, id: &str, name: &str) -> String {
    chunk(
        json!({"tool_calls": [{"index": index, "id": id, "type": "function",
        "function": {"name": name, "arguments": ""}}]}),
    )
}

pub fn call_args(index: u64, fragment: &str) -> String {
    chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}))
}

pub fn finish(reason: &str) -> String {
    json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}).to_string()
}

pub fn usage(i: u64, o: u64) -> String {
    json!({"choices": [], "usage": {"prompt_tokens": i, "completion_tokens": o, "total_tokens": i + o}}).to_string()
}

/// A complete streamed turn with one call.
pub fn one_call(id: &str, name: &str, args: &str) -> Vec<String> {
    split_events(
        &[
            call_start(0, id, name),
            call_args(0, args),
            finish("tool_calls"),
            usage(10, 5),
            "[DONE]".into(),
        ],
        11,
    )
}

/// A streamed turn with two parallel calls.
pub fn two_calls(a: (&str, &str, &str), b: (&str, &str, &str)) -> Vec<String> {
    split_events(
        &[
            call_start(0, a.0, a.1),
            call_start(1, b.0, b.1),
            call_args(0, a.2),
            call_args(1, b.2),
            finish("tool_calls"),
            usage(10, 5),
            "[DONE]".into(),
        ],
        9,
    )
}

pub fn text_turn(text: &str) -> Vec<String> {
    split_events(
        &[
            chunk(json!({"role": "assistant", "content": ""})),
            chunk(json!({"content": text})),
            finish("stop"),
            usage(3, 2),
            "[DONE]".into(),
        ],
        1,
    )
}

/// An Anthropic streamed turn: these content blocks, then the stop.
fn anthropic_turn(blocks: Vec<(Value, Option<String>)>, stop_reason: &str) -> Vec<String> {
    let mut events: Vec<(&str, Value)> = vec![(
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 0}}}),
    )];
    for (index, (block, delta)) in blocks.into_iter().enumerate() {
        let delta = match (&block["type"], delta) {
            (t, Some(d)) if t == "tool_use" => {
                json!({"type": "input_json_delta", "partial_json": d})
            }
            (_, d) => json!({"type": "text_delta", "text": d.unwrap_or_default()}),
        };
        events.push((
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        events.push((
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
        events.push((
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push((
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": {"output_tokens": 4}}),
    ));
    events.push(("message_stop", json!({"type": "message_stop"})));
    split_named_events(&events, 7)
}

/// An Anthropic turn with one `tool_use` block whose input is `args`.
pub fn anthropic_call(id: &str, name: &str, args: &str) -> Vec<String> {
    anthropic_turn(
        vec![(
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            Some(args.to_string()),
        )],
        "tool_use",
    )
}

/// An Anthropic turn of text only.
pub fn anthropic_text(text: &str) -> Vec<String> {
    anthropic_turn(
        vec![(json!({"type": "text", "text": ""}), Some(text.to_string()))],
        "end_turn",
    )
}

/// A streamed chat-completions turn with these calls `(id, name, args)`; an
/// empty id is sent as `""`, as some servers do.
pub fn calls_turn(calls: &[(&str, &str, &str)]) -> Vec<String> {
    let mut payloads: Vec<String> = Vec::new();
    for (k, (id, name, _)) in calls.iter().enumerate() {
        payloads.push(call_start(k as u64, id, name));
    }
    for (k, (_, _, args)) in calls.iter().enumerate() {
        payloads.push(call_args(k as u64, args));
    }
    payloads.extend([finish("tool_calls"), usage(10, 5), "[DONE]".into()]);
    split_events(&payloads, 13)
}

/// An Anthropic turn with one `tool_use` block per call `(id, name, args)`.
pub fn anthropic_calls(calls: &[(&str, &str, &str)]) -> Vec<String> {
    anthropic_turn(
        calls
            .iter()
            .map(|(id, name, args)| {
                (
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                    Some(args.to_string()),
                )
            })
            .collect(),
        "tool_use",
    )
}
