//! Both adapters fit a session ten times their window into one request the
//! strict checker accepts: the goal first, the newest turns, calls with their
//! results, within the window less the reserved output by bytes / 4; asked to,
//! both summarize the older turns instead.

use std::sync::Arc;

use agentry_models::{AnthropicPolicy, CompactionMode, ModelConfig, OpenAiPolicy, Policy};
use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolCall;
use serde_json::json;

use super::server::{MockServer, Reply, TestError};
use super::sse::{anthropic_text, config, decide, text_turn};

const WINDOW: u64 = 8_000;

/// The goal, then `turns` calls each with a 2 KB result, with a user message
/// and a failed turn now and then.
fn long_session(turns: usize) -> Vec<SessionEntry> {
    let mut s = vec![SessionEntry::User {
        text: "sum the numbers".into(),
    }];
    for i in 0..turns {
        let id = format!("c{i}");
        s.push(SessionEntry::Assistant {
            step: i as u64,
            decision: Arc::new(Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    id.clone(),
                    "fs.read",
                    json!({"path": format!("f{i}")}),
                )],
            }),
        });
        let data = json!({"content": format!("{i} ").repeat(700)});
        s.push(SessionEntry::Tool {
            result: Arc::new(ResultEnvelope::success(&id, "fs.read", data, vec![])),
        });
        if i % 7 == 3 {
            s.push(SessionEntry::User {
                text: "keep going".into(),
            });
        }
    }
    s
}

async fn fits(policy: &mut dyn Policy, server: &MockServer, which: usize) -> Result<(), TestError> {
    let session = long_session(200);
    let raw: usize = session
        .iter()
        .map(|e| serde_json::to_vec(e).map_or(0, |b| b.len()))
        .sum();
    assert!(
        raw as u64 / 4 >= 10 * WINDOW,
        "raw session {} tokens",
        raw / 4
    );
    let out = decide(policy, &session).await;
    assert!(matches!(out.decision, Decision::Final { .. }), "{out:?}");
    let sent = &server.received()[which];
    let bytes = serde_json::to_vec(&sent.body)?.len() as u64;
    assert!(bytes / 4 <= WINDOW - 1024, "{bytes} bytes");
    let text = sent.body["messages"].to_string();
    assert!(text.contains("sum the numbers"), "the goal is kept");
    assert!(text.contains("earlier session entries were elided"));
    assert!(text.contains("c199"), "the newest turn is kept");
    Ok(())
}

#[tokio::test]
async fn both_adapters_fit_a_session_ten_times_their_window() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(text_turn("ok")),
        Reply::sse(anthropic_text("ok")),
    ])
    .await?;
    let model = |base: &str| -> ModelConfig { config(base).context_tokens(WINDOW) };
    fits(&mut OpenAiPolicy::new(model(&server.base_url))?, &server, 0).await?;
    fits(
        &mut AnthropicPolicy::new(model(&server.base_url))?,
        &server,
        1,
    )
    .await?;
    assert_eq!(server.rejected(), []);
    Ok(())
}

/// Under `CompactionMode::Summarize` a long session makes each adapter ask for
/// a summary first (a request without tools, valid for the provider), then send
/// it in place of the older turns; the output records it and counts its tokens.
async fn summarizes(
    policy: &mut dyn Policy,
    server: &MockServer,
    first: usize,
) -> Result<(), TestError> {
    let session = long_session(200);
    let out = decide(policy, &session).await;
    assert!(matches!(out.decision, Decision::Final { .. }), "{out:?}");
    let compaction = out.compaction.ok_or("no compaction")?;
    assert_eq!(compaction.summary, "SUMMARY");
    assert_eq!(compaction.from, 1);
    assert!(compaction.to > 1 && compaction.to < session.len() as u64);
    assert!(out.usage.tokens_in >= compaction.usage.tokens_in);
    let sent = server.received();
    assert!(
        sent[first].body.get("tools").is_none(),
        "the summary request"
    );
    let next = &sent[first + 1];
    assert!(next.body.get("tools").is_some());
    let text = next.body["messages"].to_string();
    assert!(text.contains("SUMMARY"), "{text}");
    let bytes = serde_json::to_vec(&next.body)?.len() as u64;
    assert!(bytes / 4 <= WINDOW - 1024, "{bytes} bytes");
    Ok(())
}

#[tokio::test]
async fn both_adapters_summarize_older_turns_when_asked() -> Result<(), TestError> {
    let server = MockServer::start(vec![
        Reply::sse(text_turn("SUMMARY")),
        Reply::sse(text_turn("ok")),
        Reply::sse(anthropic_text("SUMMARY")),
        Reply::sse(anthropic_text("ok")),
    ])
    .await?;
    let model = |base: &str| -> ModelConfig {
        config(base)
            .context_tokens(WINDOW)
            .compaction(CompactionMode::Summarize)
    };
    summarizes(&mut OpenAiPolicy::new(model(&server.base_url))?, &server, 0).await?;
    summarizes(
        &mut AnthropicPolicy::new(model(&server.base_url))?,
        &server,
        2,
    )
    .await?;
    assert_eq!(server.rejected(), []);
    Ok(())
}
