//! The strict checkers themselves (they must refuse what the real APIs refuse,
//! or the adapter tests prove nothing), and the adapters' projection of a
//! session with failed turns held to them over real HTTP.

use std::sync::Arc;

use agentry_models::{
    AnthropicPolicy, ModelConfig, OpenAiPolicy, ToolNameMap, build_anthropic_request,
    build_openai_messages,
};
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::{ErrorCode, ResultEnvelope, ToolError};
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolCall;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_text, config, decide, text_turn, tools};
use super::strict::{check_anthropic, check_openai};

fn openai(messages: Value) -> Result<(), String> {
    check_openai(&json!({"messages": messages})).map_err(|e| e.message)
}

fn anthropic(messages: Value) -> Result<(), String> {
    check_anthropic(&json!({"messages": messages})).map_err(|e| e.message)
}

fn call(id: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "fs_read", "arguments": "{}"}})
}

#[test]
fn the_openai_checker_refuses_tool_messages_without_their_call() {
    let user = json!({"role": "user", "content": "goal"});
    let calls = |ids: &[&str]| {
        json!({"role": "assistant", "content": null,
            "tool_calls": ids.iter().map(|i| call(i)).collect::<Vec<_>>()})
    };
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "{}"});
    assert_eq!(
        openai(json!([user, calls(&["a", "b"]), tool("b"), tool("a")])),
        Ok(())
    );
    // The shape failed turns used to be sent in: a result answering no call.
    let e = openai(json!([
        user,
        json!({"role": "user", "content": "x"}),
        tool("")
    ]));
    assert!(e.is_err_and(|m| m.contains("must be a response to a preceding message")));
    // Answered twice, answered after another message, never answered, empty.
    assert!(openai(json!([user, calls(&["a"]), tool("a"), tool("a")])).is_err());
    assert!(
        openai(json!([
            user,
            calls(&["a", "b"]),
            tool("a"),
            user,
            tool("b")
        ]))
        .is_err()
    );
    let e = openai(json!([user, calls(&["a"])]));
    assert!(e.is_err_and(|m| m.contains("did not have response messages: a")));
    assert!(openai(json!([user, calls(&[])])).is_err());
    assert!(openai(json!([user, {"role": "assistant", "content": null}])).is_err());
    assert!(openai(json!([])).is_err());
}

#[test]
fn the_anthropic_checker_refuses_orphan_results_repeated_roles_and_empty_content() {
    let user = |t: &str| json!({"role": "user", "content": [{"type": "text", "text": t}]});
    let uses = json!({"role": "assistant", "content": [
        {"type": "text", "text": "reading"},
        {"type": "tool_use", "id": "t1", "name": "fs_read", "input": {}}]});
    let result = |id: &str| {
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": "{}"},
            {"type": "text", "text": "and hurry"}]})
    };
    assert_eq!(anthropic(json!([user("goal"), uses, result("t1")])), Ok(()));
    let said = json!({"role": "assistant", "content": "thinking"});
    let e = anthropic(json!([user("goal"), said, result("")]));
    assert!(e.is_err_and(|m| m.contains("unexpected `tool_use_id`")));
    let e = anthropic(json!([user("goal"), uses, user("no result")]));
    assert!(e.is_err_and(|m| m.contains("without `tool_result` blocks immediately after")));
    let e = anthropic(json!([user("goal"), user("again")]));
    assert!(e.is_err_and(|m| m.contains("roles must alternate")));
    assert!(anthropic(json!([user("goal"), uses])).is_err());
    assert!(anthropic(json!([user(" ")])).is_err());
    assert!(anthropic(json!([{"role": "user", "content": []}])).is_err());
    assert!(anthropic(json!([{"role": "assistant", "content": "hi"}])).is_err());
    let late = json!({"role": "user", "content": [
        {"type": "text", "text": "first"},
        {"type": "tool_result", "tool_use_id": "t1", "content": "{}"}]});
    assert!(anthropic(json!([user("goal"), uses, late])).is_err());
}

/// An invalid request gets the real API's answer: 400 and its error shape.
#[tokio::test]
async fn the_mock_servers_answer_an_invalid_request_with_the_providers_400() -> Result<(), TestError>
{
    let server = MockServer::start(vec![]).await?;
    agentry_models::install_crypto_provider();
    let client = reqwest::Client::new();
    let orphan = json!({"messages": [{"role": "user", "content": "g"},
        {"role": "tool", "tool_call_id": "", "content": "{}"}]});
    let r = client
        .post(format!("{}/chat/completions", server.base_url))
        .json(&orphan)
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await?;
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["param"].as_str().is_some(), "{body}");
    let r = client
        .post(format!("{}/v1/messages", server.base_url))
        .json(&json!({"messages": [{"role": "user", "content": ""}]}))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await?;
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(server.rejected().len(), 2);
    Ok(())
}

/// A session with every kind of failed turn between tool turns, as the runtime
/// records them, plus one stored before this fix (a result envelope with an
/// empty call id) and a call whose result was never recorded.
fn troubled_session() -> Vec<SessionEntry> {
    let assistant = |step, decision: Decision| SessionEntry::Assistant {
        step,
        decision: Arc::new(decision),
    };
    let calls = |ids: &[&str]| Decision::ToolCalls {
        calls: ids
            .iter()
            .map(|id| ToolCall::new(*id, "fs.read", json!({"path": "numbers.txt"})))
            .collect(),
    };
    let result = |id: &str| SessionEntry::Tool {
        result: Arc::new(ResultEnvelope::success(id, "fs.read", json!("1 2"), vec![])),
    };
    let failed = |message: &str| Decision::Failed {
        message: message.into(),
        fatal: false,
    };
    let legacy = SessionEntry::Tool {
        result: Arc::new(ResultEnvelope::failure(
            "",
            "policy",
            ToolError::new(ErrorCode::Einval, "openai: HTTP 400"),
        )),
    };
    vec![
        SessionEntry::User {
            text: "sum the numbers".into(),
        },
        assistant(1, failed("openai: HTTP 400 Bad Request")),
        legacy,
        assistant(2, calls(&["a", "b"])),
        result("a"),
        SessionEntry::User {
            text: "hurry".into(),
        },
        result("b"),
        assistant(3, failed("stream stalled: no bytes for 400ms")),
        assistant(4, calls(&[])),
        assistant(5, calls(&["c"])),
        assistant(
            6,
            Decision::Final {
                answer: "  ".into(),
            },
        ),
        assistant(7, failed("you replied with text and no tool call")),
        SessionEntry::Note {
            text: "[agentry] 3 earlier session entries were elided".into(),
        },
    ]
}

#[tokio::test]
async fn a_session_with_failed_turns_between_tool_turns_is_a_valid_request_for_both()
-> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(text_turn("done")),
        Reply::sse(anthropic_text("done")),
    ])
    .await?;
    let session = troubled_session();
    let out = decide(&mut OpenAiPolicy::new(config(&server.base_url))?, &session).await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "done".into()
        }
    );
    let out = decide(
        &mut AnthropicPolicy::new(config(&server.base_url))?,
        &session,
    )
    .await;
    assert_eq!(
        out.decision,
        Decision::Final {
            answer: "done".into()
        }
    );
    assert_eq!(server.rejected(), []);
    let sent = server.received();
    // OpenAI: the failures are user notes; results follow their call.
    let roles: Vec<&str> = sent[0].body["messages"]
        .as_array()
        .ok_or("messages")?
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "user",
            "user",
            "assistant",
            "tool",
            "tool",
            "user",
            "user",
            "user",
            "assistant",
            "tool",
            "user",
            "user"
        ]
    );
    let text = sent[0].body["messages"].to_string();
    assert!(
        text.contains("your previous turn failed: openai: HTTP 400"),
        "{text}"
    );
    assert!(
        text.contains("no result was recorded for this call"),
        "{text}"
    );
    // Anthropic: alternating roles, the failures merged into user turns.
    let roles: Vec<&str> = sent[1].body["messages"]
        .as_array()
        .ok_or("messages")?
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    Ok(())
}

/// Any entry the runtime can record, and more: calls and results over a small
/// pool of ids (so results answer, repeat, arrive late or answer nothing), every
/// kind of failed turn, blank text, injected messages and events, host notes.
fn entry() -> impl Strategy<Value = SessionEntry> {
    let id = prop::sample::select(vec!["a", "b", "c", ""]);
    let text = prop::sample::select(vec!["goal", "hurry", "", "  ", "é"]);
    prop_oneof![
        text.prop_map(|t| SessionEntry::User { text: t.into() }),
        prop::collection::vec(id.clone(), 0..4).prop_map(|ids| SessionEntry::Assistant {
            step: 1,
            decision: Arc::new(Decision::ToolCalls {
                calls: ids
                    .iter()
                    .map(|i| ToolCall::new(*i, "fs.read", json!({"path": "x"})))
                    .collect(),
            }),
        }),
        prop::sample::select(vec!["the answer", "", " "]).prop_map(|a| SessionEntry::Assistant {
            step: 1,
            decision: Arc::new(Decision::Final { answer: a.into() }),
        }),
        Just(SessionEntry::Assistant {
            step: 1,
            decision: Arc::new(Decision::Failed {
                message: "openai: HTTP 400".into(),
                fatal: false,
            }),
        }),
        (id, any::<bool>()).prop_map(|(i, ok)| SessionEntry::Tool {
            result: Arc::new(if ok {
                ResultEnvelope::success(i, "fs.read", json!("1"), vec![])
            } else {
                ResultEnvelope::failure(i, "fs.read", ToolError::new(ErrorCode::Eperm, "no"))
            }),
        }),
        Just(SessionEntry::Event {
            name: "tick".into(),
            payload: json!({"n": 1}),
        }),
        Just(SessionEntry::Note {
            text: "[agentry] 2 earlier session entries were elided".into(),
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the session holds, both projections are requests the providers
    /// accept.
    #[test]
    fn any_session_projects_to_requests_both_checkers_accept(
        session in prop::collection::vec(entry(), 0..24)
    ) {
        let tools = tools();
        let names = ToolNameMap::new(&tools).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let messages = build_openai_messages("system", &session, &names);
        let openai = check_openai(&json!({"messages": messages}));
        prop_assert!(openai.is_ok(), "{:?}\n{}", openai, json!(messages));
        let config = ModelConfig::new("m", "http://127.0.0.1:1");
        let request = build_anthropic_request(&config, "goal", &tools, &session, &names);
        let anthropic = check_anthropic(&request);
        prop_assert!(anthropic.is_ok(), "{:?}\n{}", anthropic, request["messages"]);
    }
}
