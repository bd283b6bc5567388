//! The OpenAI-compatible adapter against a scripted SSE server.

use std::time::Duration;

use agentry_models::{OpenAiPolicy, Policy};
use agentry_policy::PolicyContext;
use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::child::ChildRequest;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolArguments;
use agentry_protocol::{Decision, ToolCall};
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError, split_events};
use super::sse::{
    call_args, call_start, config, decide, finish, one_call, stalling, text_turn, tools, usage,
};

#[tokio::test]
async fn three_interleaved_calls_split_mid_argument_assemble_by_index() -> Result<(), TestError> {
    let events = vec![
        call_start(0, "call_a", "fs_read"),
        call_args(0, "{\"pa"),
        call_start(1, "call_b", "fs_write"),
        call_start(2, "call_c", "no_such_tool"),
        call_args(1, "{\"path\":\"sum.txt\","),
        call_args(0, "th\":\"numbers"),
        call_args(2, "{not json"),
        call_args(1, "\"content\":\"23\"}"),
        call_args(0, ".txt\"}"),
        finish("tool_calls"),
        usage(120, 33),
        "[DONE]".into(),
    ];
    let server = MockServer::start(vec![Reply::sse(split_events(&events, 7))]).await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;

    let out = decide(&mut policy, &[SessionEntry::User { text: "go".into() }]).await;

    let raw = |id: &str, name: &str, a: &str| ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: ToolArguments::Raw(a.into()),
    };
    assert_eq!(
        out.decision,
        Decision::ToolCalls {
            calls: vec![
                raw("call_a", "fs.read", "{\"path\":\"numbers.txt\"}"),
                raw(
                    "call_b",
                    "fs.write",
                    "{\"path\":\"sum.txt\",\"content\":\"23\"}"
                ),
                // Unknown names and broken JSON pass through for the executor
                // to answer ENOTOOL / EINVAL.
                raw("call_c", "no_such_tool", "{not json"),
            ]
        }
    );
    assert_eq!((out.usage.tokens_in, out.usage.tokens_out), (120, 33));
    assert_eq!(out.model, "openai:test-model");
    assert_eq!(out.prompt_hash.as_deref().map(str::len), Some(64));

    let sent = server.received();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/chat/completions");
    assert_eq!(sent[0].headers["authorization"], "Bearer sk-test");
    let body = &sent[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["model"], "test-model");
    let names: Vec<&str> = body["tools"]
        .as_array()
        .ok_or("no tools")?
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(names, ["fs_read", "fs_write", "task_finish"]);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(
        body["messages"][1],
        json!({"role": "user", "content": "go"})
    );
    Ok(())
}

fn envelope(id: &str, tool: &str, ok: bool) -> Result<ResultEnvelope, TestError> {
    Ok(serde_json::from_value(json!({
        "tool_call_id": id, "tool": tool, "ok": ok,
        "data": {"content": "1 2 20"}, "cost": {"latency_ms": 1}, "observed_at": 5
    }))?)
}

#[tokio::test]
async fn tool_results_go_back_keyed_by_call_id_in_request_order() -> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::sse(text_turn("done"))]).await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let session = vec![
        SessionEntry::User { text: "go".into() },
        SessionEntry::Assistant {
            step: 1,
            decision: Decision::ToolCalls {
                calls: vec![
                    ToolCall {
                        id: "call_a".into(),
                        name: "fs.read".into(),
                        arguments: ToolArguments::Raw("{\"path\":\"numbers.txt\"}".into()),
                    },
                    ToolCall::new("call_b", "fs.write", json!({"path": "x"})),
                ],
            }
            .into(),
        },
        SessionEntry::Tool {
            result: envelope("call_a", "fs.read", true)?.into(),
        },
        SessionEntry::Tool {
            result: envelope("call_b", "fs.write", false)?.into(),
        },
    ];

    let out = decide(&mut policy, &session).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "done".into()
        }
    );

    let body = &server.received()[0].body;
    let messages = body["messages"].as_array().ok_or("no messages")?;
    assert_eq!(messages.len(), 5);
    let assistant = &messages[2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_a");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "fs_read");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        "{\"path\":\"numbers.txt\"}"
    );
    assert_eq!(assistant["tool_calls"][1]["function"]["name"], "fs_write");
    let results: Vec<(&str, &str)> = messages[3..]
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or(""),
                m["tool_call_id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(results, [("tool", "call_a"), ("tool", "call_b")]);
    let content: Value = serde_json::from_str(messages[3]["content"].as_str().ok_or("content")?)?;
    assert_eq!(content["data"]["content"], "1 2 20");
    assert_eq!(content["tool"], "fs.read");
    Ok(())
}

#[tokio::test]
async fn text_without_tool_calls_is_the_final_answer_even_split_mid_utf8() -> Result<(), TestError>
{
    let server = MockServer::start(vec![Reply::sse(text_turn("la somme est 23 — é✓"))]).await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "la somme est 23 — é✓".into()
        }
    );
    assert_eq!((out.usage.tokens_in, out.usage.tokens_out), (3, 2));
    Ok(())
}

#[tokio::test]
async fn a_429_with_retry_after_then_success_is_retried() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::status(429, "{\"error\":{\"message\":\"slow down\"}}").header("retry-after", "1"),
        Reply::sse(one_call("c1", "fs_read", "{}")),
    ])
    .await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let started = std::time::Instant::now();
    let out = decide(&mut policy, &[]).await;
    assert!(
        matches!(out.decision, Decision::ToolCalls { .. }),
        "{out:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After was not honoured"
    );
    assert_eq!(server.received().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_500_then_success_is_retried() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::status(500, "{\"error\":\"boom\"}"),
        Reply::status(503, "{\"error\":\"busy\"}"),
        Reply::sse(one_call("c1", "fs_read", "{}")),
    ])
    .await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    assert!(
        matches!(out.decision, Decision::ToolCalls { .. }),
        "{out:?}"
    );
    assert_eq!(server.received().len(), 3);
    Ok(())
}

#[tokio::test]
async fn server_errors_past_the_retry_budget_are_a_non_fatal_failure() -> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::status(500, "{}"); 3]).await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    match out.decision {
        Decision::Failed { message, fatal } => {
            assert!(!fatal);
            assert!(message.contains("gave up after 3 attempts"), "{message}");
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_401_stops_the_run_naming_the_key() -> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::status(401, "{\"error\":\"bad key\"}")]).await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    match out.decision {
        Decision::Failed { message, fatal } => {
            assert!(fatal);
            assert!(
                message.contains("401") && message.contains("OPENAI_API_KEY"),
                "{message}"
            );
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    assert_eq!(
        server.received().len(),
        1,
        "credentials errors are not retried"
    );
    Ok(())
}

#[tokio::test]
async fn a_stalled_stream_is_abandoned_and_retried() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(one_call("c1", "fs_read", "{}")).stall_after(2),
        Reply::sse(one_call("c2", "fs_read", "{}")),
    ])
    .await?;
    let mut policy = OpenAiPolicy::new(stalling(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    match &out.decision {
        Decision::ToolCalls { calls } => assert_eq!(calls[0].id, "c2"),
        other @ (Decision::Final { .. } | Decision::Failed { .. }) => {
            return Err(format!("expected the retried call, got {other:?}").into());
        }
    }
    assert_eq!(server.received().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_stream_that_keeps_stalling_fails_naming_the_stall() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(one_call("c1", "fs_read", "{}"))
            .stall_after(1);
        3
    ])
    .await?;
    let mut policy = OpenAiPolicy::new(stalling(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    match out.decision {
        Decision::Failed { message, fatal } => {
            assert!(!fatal);
            assert!(message.contains("stalled"), "{message}");
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_request_whose_reserved_output_does_not_fit_the_token_budget_is_not_sent()
-> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::sse(text_turn("never"))]).await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let tools = tools();
    let mut budget = BudgetSnapshot::default();
    budget.remaining.tokens_left = Some(100);
    let out = policy
        .decide(PolicyContext {
            deltas: None,
            traceparent: None,
            content: None,
            run_id: "run-1",
            step: 4,
            goal: "g",
            tools: &tools,
            session: &[],
            budget: &budget,
        })
        .await;
    match out.decision {
        Decision::Failed { message, fatal } => {
            assert!(fatal);
            assert!(
                message.contains("100 tokens left") && message.contains("1024"),
                "{message}"
            );
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    assert!(server.received().is_empty(), "nothing may be sent");
    Ok(())
}

#[tokio::test]
async fn usage_is_priced_and_a_text_reply_can_be_sent_back_to_call_finish() -> Result<(), TestError>
{
    let server = MockServer::start(vec![Reply::sse(text_turn("23"))]).await?;
    let config = config(&server.base_url)
        .prices(agentry_models::Prices {
            input_micros_per_mtok: 2_000_000,
            output_micros_per_mtok: 8_000_000,
            ..agentry_models::Prices::default()
        })
        .text_reply(agentry_models::TextReply::RequireFinish);
    let mut policy = OpenAiPolicy::new(config)?;
    let out = decide(&mut policy, &[]).await;
    // text_turn reports 3 prompt and 2 completion tokens: 3·2 + 2·8 micro-units.
    assert_eq!(out.cost_micros, 22);
    match out.decision {
        Decision::Failed { message, fatal } => {
            assert!(!fatal);
            assert!(message.contains("call task.finish"), "{message}");
        }
        other @ (Decision::ToolCalls { .. } | Decision::Final { .. }) => {
            return Err(format!("expected Failed, got {other:?}").into());
        }
    }
    Ok(())
}

#[tokio::test]
async fn the_child_policy_factory_gives_each_child_the_same_model() -> Result<(), TestError> {
    let server = MockServer::start(vec![Reply::sse(text_turn("child says hi"))]).await?;
    let factory = agentry_models::child_policy_factory(
        agentry_models::Provider::OpenAi,
        config(&server.base_url),
    )?;
    let request = ChildRequest {
        goal: "say hi".into(),
        limits: Default::default(),
        grants: None,
        script: None,
        name: None,
        model: None,
    };
    let mut child = factory(&request).ok_or("no child policy")?;
    assert_eq!(child.name(), "openai:test-model");
    let out = decide(child.as_mut(), &[]).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "child says hi".into()
        }
    );
    Ok(())
}

/// llama-cpp-python answers a streaming tool request with an empty 200 body: the
/// adapter falls back to whole responses, and stays there.
#[tokio::test]
async fn an_empty_streaming_answer_falls_back_to_whole_responses() -> Result<(), TestError> {
    let whole = json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
        "message": {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "fs_read", "arguments": "{\"path\":\"a\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "task_finish", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 21, "completion_tokens": 8}});
    let server = MockServer::start(vec![
        Reply::sse(vec![]),
        Reply::status(200, &whole.to_string()),
        Reply::status(200, &whole.to_string()),
    ])
    .await?;
    let mut policy = OpenAiPolicy::new(config(&server.base_url))?;
    let out = decide(&mut policy, &[]).await;
    match &out.decision {
        Decision::ToolCalls { calls } => {
            let got: Vec<(&str, &str)> = calls
                .iter()
                .map(|c| (c.id.as_str(), c.name.as_str()))
                .collect();
            assert_eq!(got, [("call_1", "fs.read"), ("call_2", "task.finish")]);
            assert_eq!(
                calls[0].arguments,
                ToolArguments::Raw("{\"path\":\"a\"}".into())
            );
        }
        other @ (Decision::Final { .. } | Decision::Failed { .. }) => {
            return Err(format!("expected calls, got {other:?}").into());
        }
    }
    assert_eq!((out.usage.tokens_in, out.usage.tokens_out), (21, 8));
    let _ = decide(&mut policy, &[]).await;
    let sent = server.received();
    let streams: Vec<&Value> = sent.iter().map(|r| &r.body["stream"]).collect();
    assert_eq!(streams, [&json!(true), &json!(false), &json!(false)]);
    assert!(sent[1].body.get("stream_options").is_none());
    Ok(())
}

/// OpenAI caches prompts on its own and says how much of the prompt it served
/// from the cache (`prompt_tokens_details.cached_tokens`, part of
/// `prompt_tokens`); the cached part is priced at the cache-read rate.
#[tokio::test]
async fn cached_prompt_tokens_are_reported_and_priced() -> Result<(), TestError> {
    let usage = json!({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 800}}})
    .to_string();
    let server = MockServer::start(vec![Reply::sse(split_events(
        &[
            super::sse::chunk(json!({"content": "23"})),
            finish("stop"),
            usage,
            "[DONE]".into(),
        ],
        17,
    ))])
    .await?;
    let config = config(&server.base_url).prices(agentry_models::Prices {
        input_micros_per_mtok: 2_000_000,
        output_micros_per_mtok: 8_000_000,
        ..agentry_models::Prices::default()
    });
    let mut policy = OpenAiPolicy::new(config)?;
    let out = decide(&mut policy, &[]).await;
    assert_eq!(
        out.usage,
        agentry_protocol::TokenUsage {
            tokens_in: 1000,
            tokens_out: 10,
            cache_read_tokens: 800,
            cache_write_tokens: 0,
        }
    );
    // 200 uncached at 2, 800 cached at 1 (0.5×), 10 out at 8 micro-units.
    assert_eq!(out.cost_micros, 400 + 800 + 80);
    // OpenAI requests carry no cache marks.
    assert!(
        !server.received()[0]
            .body
            .to_string()
            .contains("cache_control")
    );
    Ok(())
}
