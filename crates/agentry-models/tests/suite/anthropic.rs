//! The Anthropic Messages adapter against a scripted SSE server.

use agentry_models::AnthropicPolicy;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolArguments;
use agentry_protocol::{Decision, ToolCall};
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError, split_named_events};
use super::sse::{config, decide, stalling};

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
        body["system"]
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
        other => return Err(format!("expected Failed, got {other:?}").into()),
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
