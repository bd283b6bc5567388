//! The Anthropic Messages adapter against a scripted SSE server.

use agentry_models::AnthropicPolicy;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolArguments;
use agentry_protocol::{Decision, ToolCall};
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError, split_named_events};
use super::sse::{config, decide, stalling, tools};
use super::strict::check_anthropic;

fn tool_use_turn() -> Vec<String> {
    let events: Vec<(&str, Value)> = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m1", "role": "assistant",
            "content": [], "usage": {"input_tokens": 50, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Reading — é"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "fs_read", "input": {}}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"num"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "bers.txt\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "fs_write", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"sum.txt\", \"content\": \"23\"}"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 42}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    split_named_events(&events, 5)
}

fn text_turn(text: &str) -> Vec<String> {
    let events: Vec<(&str, Value)> = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 9, "output_tokens": 0}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": text}}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 4}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    split_named_events(&events, 3)
}

#[tokio::test]
async fn tool_use_blocks_stream_into_tool_calls_with_usage() -> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::sse(tool_use_turn())]).await?;
    let mut policy = AnthropicPolicy::new(config(&server.base_url))?;

    let out = decide(&mut policy, &[SessionEntry::User { text: "go".into() }]).await;

    assert_eq!(
        out.decision,
        Decision::ToolCalls {
            calls: vec![
                ToolCall {
                    id: "toolu_1".into(),
                    name: "fs.read".into(),
                    arguments: ToolArguments::Raw("{\"path\": \"numbers.txt\"}".into()),
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "fs.write".into(),
                    arguments: ToolArguments::Raw(
                        "{\"path\": \"sum.txt\", \"content\": \"23\"}".into()
                    ),
                },
            ]
        }
    );
    assert_eq!((out.usage.tokens_in, out.usage.tokens_out), (50, 42));
    assert_eq!(out.model, "anthropic:test-model");

    let sent = server.received();
    assert_eq!(sent[0].path, "/v1/messages");
    assert_eq!(sent[0].headers["x-api-key"], "sk-test");
    assert_eq!(sent[0].headers["anthropic-version"], "2023-06-01");
    let body = &sent[0].body;
    assert_eq!(body["stream"], true);
    assert!(
        body["system"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("sum the numbers")
    );
    assert_eq!(body["tools"][0]["name"], "fs_read");
    assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    Ok(())
}

#[tokio::test]
async fn tool_results_go_back_as_one_user_turn_of_tool_result_blocks() -> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::sse(text_turn("sum=23"))]).await?;
    let mut policy = AnthropicPolicy::new(config(&server.base_url))?;
    let envelope = |id: &str, ok: bool| -> Result<ResultEnvelope, TestError> {
        Ok(serde_json::from_value(
            json!({"tool_call_id": id, "tool": "fs.read", "ok": ok,
            "cost": {"latency_ms": 1}, "observed_at": 1}),
        )?)
    };
    let session = vec![
        SessionEntry::User { text: "go".into() },
        SessionEntry::Assistant {
            step: 1,
            decision: Decision::ToolCalls {
                calls: vec![
                    ToolCall::new("toolu_1", "fs.read", json!({"path": "a"})),
                    ToolCall {
                        id: "toolu_2".into(),
                        name: "fs.read".into(),
                        arguments: ToolArguments::Raw("{broken".into()),
                    },
                ],
            }
            .into(),
        },
        SessionEntry::Tool {
            result: envelope("toolu_1", true)?.into(),
        },
        SessionEntry::Tool {
            result: envelope("toolu_2", false)?.into(),
        },
    ];

    let out = decide(&mut policy, &session).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "sum=23".into()
        }
    );

    let body = &server.received()[0].body;
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(messages[1]["content"][0]["type"], "tool_use");
    assert_eq!(messages[1]["content"][0]["name"], "fs_read");
    assert_eq!(messages[1]["content"][1]["input"], json!({}));
    let results: Vec<(&str, bool)> = messages[2]["content"]
        .as_array()
        .ok_or("content")?
        .iter()
        .map(|b| {
            (
                b["tool_use_id"].as_str().unwrap_or(""),
                b["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    assert_eq!(results, [("toolu_1", false), ("toolu_2", true)]);
    Ok(())
}

#[tokio::test]
async fn overloaded_then_success_is_retried_and_403_is_fatal() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::status(
            529,
            "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}",
        ),
        Reply::sse(text_turn("ok")),
        Reply::status(
            403,
            "{\"type\":\"error\",\"error\":{\"type\":\"permission_error\"}}",
        ),
    ])
    .await?;
    let mut policy = AnthropicPolicy::new(config(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "ok".into()
        }
    );
    let out = decide(&mut policy, &[]).await;
    match out.decision {
        Decision::Failed { message, fatal } => {
            assert!(fatal);
            assert!(message.contains("ANTHROPIC_API_KEY"), "{message}");
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_stalled_stream_and_an_overloaded_error_event_are_retried() -> Result<(), TestError> {
    let overloaded = split_named_events(
        &[
            (
                "message_start",
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}}),
            ),
            (
                "error",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        ],
        64,
    );
    let server = MockServer::start(vec![
        Reply::sse(tool_use_turn()).stall_after(3),
        Reply::sse(overloaded),
        Reply::sse(text_turn("finally")),
    ])
    .await?;
    let mut policy = AnthropicPolicy::new(stalling(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "finally".into()
        }
    );
    assert_eq!(server.received().len(), 3);
    Ok(())
}

/// The request marks its stable prefix for the prompt cache: the system
/// prompt (one text block) and the last tool (which caches the whole list),
/// and nothing else; with `prompt_cache` off the request is as before (the
/// system prompt a plain string, no mark). Both pass the strict checker.
#[test]
fn the_system_prompt_and_the_tool_list_carry_cache_marks_unless_turned_off() -> Result<(), TestError>
{
    let tools = tools();
    let names = agentry_models::ToolNameMap::new(&tools)?;
    let session = [SessionEntry::User { text: "go".into() }];
    let build = |cache: bool| {
        let config = config("http://127.0.0.1:1").prompt_cache(cache);
        agentry_models::build_anthropic_request(&config, "sum", &tools, &session, &names)
    };

    let cached = build(true);
    check_anthropic(&cached).map_err(|e| format!("{e:?}"))?;
    let ephemeral = json!({"type": "ephemeral"});
    let system = cached["system"].as_array().ok_or("system is not blocks")?;
    assert_eq!(system.len(), 1);
    assert_eq!(system[0]["type"], "text");
    assert!(
        system[0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("Goal: sum")
    );
    assert_eq!(system[0]["cache_control"], ephemeral);
    let marks: Vec<bool> = cached["tools"]
        .as_array()
        .ok_or("tools")?
        .iter()
        .map(|t| t.get("cache_control") == Some(&ephemeral))
        .collect();
    assert_eq!(marks, [false, false, true]);
    assert!(!cached["messages"].to_string().contains("cache_control"));

    let plain = build(false);
    check_anthropic(&plain).map_err(|e| format!("{e:?}"))?;
    assert_eq!(plain["system"], system[0]["text"]);
    assert!(!plain.to_string().contains("cache_control"));
    // The rest of the request is the same.
    let strip = |mut v: Value| {
        v["system"] = Value::Null;
        for t in v["tools"].as_array_mut().into_iter().flatten() {
            t.as_object_mut().map(|o| o.remove("cache_control"));
        }
        v
    };
    assert_eq!(strip(cached), strip(plain));
    Ok(())
}

/// The strict checker refuses what the real API refuses about cache marks, so
/// the request-shape test above means something.
#[test]
fn the_strict_checker_refuses_bad_cache_marks() {
    let request = |system: Value, tools: Value| {
        json!({"system": system, "tools": tools,
            "messages": [{"role": "user", "content": "go"}]})
    };
    let tool = |mark: Value| json!({"name": "t", "input_schema": {}, "cache_control": mark});
    let text = |mark: Value| json!({"type": "text", "text": "s", "cache_control": mark});
    let ok = json!({"type": "ephemeral"});
    assert!(
        check_anthropic(&request(
            json!([text(ok.clone())]),
            json!([tool(ok.clone())])
        ))
        .is_ok()
    );
    for bad in [
        request(json!([text(json!({"type": "persistent"}))]), json!([])),
        request(json!([]), json!([])),
        request(json!([{"type": "text", "text": " "}]), json!([])),
        request(json!("s"), json!([{"name": "t"}])),
        request(
            json!([text(ok.clone()), text(ok.clone())]),
            json!([tool(ok.clone()), tool(ok.clone()), tool(ok.clone())]),
        ),
    ] {
        assert!(check_anthropic(&bad).is_err(), "{bad}");
    }
}

/// A turn that read and wrote the prompt cache: the usage counts the whole
/// prompt in `tokens_in` (Anthropic's `input_tokens` is only the uncached
/// part) and says how much of it the cache served; the cost prices each part.
#[tokio::test]
async fn cache_reads_and_writes_are_reported_and_priced() -> Result<(), TestError> {
    let events: Vec<(&str, Value)> = vec![
        (
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 20,
            "cache_creation_input_tokens": 400, "cache_read_input_tokens": 3000, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 10}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let server = MockServer::start(vec![Reply::sse(split_named_events(&events, 9))]).await?;
    let config = config(&server.base_url).prices(agentry_models::Prices {
        input_micros_per_mtok: 3_000_000,
        output_micros_per_mtok: 15_000_000,
        ..agentry_models::Prices::default()
    });
    let mut policy = AnthropicPolicy::new(config)?;
    let out = decide(&mut policy, &[SessionEntry::User { text: "go".into() }]).await;
    assert_eq!(
        out.usage,
        agentry_protocol::TokenUsage {
            tokens_in: 3420,
            tokens_out: 10,
            cache_read_tokens: 3000,
            cache_write_tokens: 400,
        }
    );
    // In micro-units per token: 20 uncached at 3, 3000 read at 0.3 (0.1×),
    // 400 written at 3.75 (1.25×), 10 out at 15.
    assert_eq!(out.cost_micros, 60 + 900 + 1500 + 150);
    Ok(())
}
