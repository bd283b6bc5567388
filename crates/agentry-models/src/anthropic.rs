//! Anthropic Messages: request projection (`tool_use` / `tool_result` blocks)
//! and the streaming event types (its [`Wire`]; the turn is the crate's
//! `turn` module).

use std::collections::BTreeMap;

use agentry_policy::{DeltaSink, Policy, PolicyContext};
use agentry_protocol::decision::{PolicyOutput, TokenUsage};
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolSpec;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::compaction::SUMMARY_SYSTEM;
use crate::conversation::{Item, conversation};
use crate::prompt::system_prompt;
use crate::transport::{AttemptError, SseReader};
use crate::turn::{ModelAdapter, ModelTurn};
use crate::wire::{Ask, Reading, Reply, Wire, WireCall};
use crate::{ModelConfig, ModelError, Provider, ToolNameMap};

/// The API version header this adapter speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A [`Policy`] backed by Anthropic's `/v1/messages` endpoint.
// Clone is cheap (the HTTP client is shared): one clone per child agent.
#[derive(Clone)]
pub struct AnthropicPolicy(ModelAdapter<AnthropicWire>);

impl AnthropicPolicy {
    /// Checks the configuration and builds the client. Sends nothing.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        ModelAdapter::new(config, AnthropicWire).map(AnthropicPolicy)
    }

    /// Checks that the server answers (`GET {base}/v1/models`; any status will do).
    pub async fn probe(&self) -> Result<(), ModelError> {
        self.0.probe().await
    }

    /// One model turn, and whether it failed only because the server was
    /// unavailable (see [`ModelTurn`]).
    pub(crate) async fn turn(&mut self, ctx: PolicyContext<'_>) -> ModelTurn {
        self.0.turn(ctx).await
    }
}

#[async_trait]
impl Policy for AnthropicPolicy {
    fn name(&self) -> String {
        self.0.name()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.0.turn(ctx).await.output
    }
}

/// The Messages wire: every reply streams.
#[derive(Clone, Copy)]
pub(crate) struct AnthropicWire;

impl Wire for AnthropicWire {
    const PROVIDER: Provider = Provider::Anthropic;
    const TURN_PATH: &'static str = "/v1/messages";
    const PROBE_PATH: &'static str = "/v1/models";
    const STOP_FIELD: &'static str = "stop_reason";

    fn request(config: &ModelConfig, ask: Ask<'_>) -> Value {
        anthropic_request(config, ask)
    }

    fn summary_request(config: &ModelConfig, prompt: String) -> Value {
        json!({
            "model": config.model,
            "max_tokens": config.max_output_tokens,
            "system": SUMMARY_SYSTEM,
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
            "stream": true,
        })
    }

    fn headers(config: &ModelConfig, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.header("anthropic-version", ANTHROPIC_VERSION);
        match &config.api_key {
            Some(key) => request.header("x-api-key", key),
            None => request,
        }
    }

    async fn read(
        &self,
        response: reqwest::Response,
        reading: Reading<'_>,
    ) -> Result<Reply, AttemptError> {
        let events = SseReader::new(response, reading.stall, reading.sent);
        read_turn(events, reading.deltas).await
    }
}

/// Assembles a streamed reply from its events, up to `message_stop`.
async fn read_turn(
    mut events: SseReader,
    deltas: Option<&dyn DeltaSink>,
) -> Result<Reply, AttemptError> {
    let mut turn = Turn {
        deltas,
        ..Turn::default()
    };
    while let Some(event) = events.next("anthropic").await? {
        if event.data.trim().is_empty() {
            continue;
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            AttemptError::GiveUp(format!(
                "anthropic: unparseable event ({e}): {}",
                event.data
            ))
        })?;
        if turn.apply(&data)? {
            return Ok(turn.into_reply());
        }
    }
    Err(AttemptError::retry(
        "anthropic: the stream ended before message_stop",
    ))
}

/// The whole Messages request: system prompt, alternating user/assistant turns
/// with `tool_use` / `tool_result` blocks, tools, streaming. Results longer
/// than the configuration's `result_cap` bytes of JSON are shown cut.
pub fn build_anthropic_request(
    config: &ModelConfig,
    goal: &str,
    tools: &[ToolSpec],
    session: &[SessionEntry],
    names: &ToolNameMap,
) -> Value {
    let ask = Ask {
        goal,
        tools,
        session,
        names,
        result_cap: config.result_cap,
    };
    anthropic_request(config, ask)
}

fn anthropic_request(config: &ModelConfig, ask: Ask<'_>) -> Value {
    let Ask {
        goal,
        tools,
        session,
        names,
        result_cap,
    } = ask;
    let messages = anthropic_messages(session, names, result_cap);
    let system = system_prompt(goal, names);
    let mut request = json!({
        "model": config.model,
        "max_tokens": config.max_output_tokens,
        "system": system,
        "messages": messages,
        "stream": true,
    });
    let mut tools: Vec<Value> = tools
        .iter()
        .map(|t| {
            json!({"name": names.wire(&t.name), "description": t.description,
            "input_schema": t.input_schema})
        })
        .collect();
    if config.prompt_cache {
        // A cache breakpoint covers everything before it, in the order tools,
        // system, messages: one on the last tool caches the tool list, one on
        // the system block the tools and the prompt together (the goal is in
        // the prompt, so this prefix is stable for the whole run). Two of the
        // four breakpoints a request may carry.
        let cache = json!({"type": "ephemeral"});
        request["system"] = json!([{"type": "text", "text": system, "cache_control": cache}]);
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = cache;
        }
    }
    if !tools.is_empty() {
        request["tools"] = Value::Array(tools);
    }
    request
}

/// The `messages` array: roles alternate (consecutive blocks of one role merge
/// into one message), the first message is the user's, each assistant turn's
/// `tool_use` blocks are answered by `tool_result` blocks at the start of the
/// very next message, and no content is empty (see the crate's `conversation` module).
fn anthropic_messages(
    session: &[SessionEntry],
    names: &ToolNameMap,
    result_cap: usize,
) -> Vec<Value> {
    let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match messages.last_mut() {
        Some((r, blocks)) if *r == role => blocks.push(block),
        _ => messages.push((role, vec![block])),
    };
    let text = |t: &str| json!({"type": "text", "text": t});
    for item in conversation(session, result_cap) {
        match item {
            Item::User(t) => push("user", text(&t)),
            Item::Assistant(t) => push("assistant", text(t)),
            Item::Calls(group) => {
                for (c, id) in group.calls.iter().zip(&group.ids) {
                    // `input` must be an object; broken raw arguments were
                    // already answered with EINVAL, which the model will see.
                    let input = c
                        .arguments
                        .to_value()
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    push(
                        "assistant",
                        json!({"type": "tool_use", "id": id,
                        "name": names.wire(&c.name), "input": input}),
                    );
                }
                for (i, id) in group.ids.iter().enumerate() {
                    let (content, is_error) = group.result_text(i);
                    push(
                        "user",
                        json!({"type": "tool_result", "tool_use_id": id,
                        "content": content, "is_error": is_error}),
                    );
                }
            }
        }
    }
    // The API wants the user to speak first; the goal normally does, unless a
    // context budget elided it.
    if messages.first().is_none_or(|(role, _)| *role != "user") {
        messages.insert(
            0,
            ("user", vec![text("[agentry] the conversation so far:")]),
        );
    }
    messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

#[derive(Debug, Default)]
enum Block {
    #[default]
    Other,
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
}

/// Anthropic's usage fields as reported: `input_tokens` counts only the prompt
/// tokens after the last cache breakpoint, beside the cache reads and writes.
#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl Usage {
    /// Takes every count the event carries (`message_start` has them all;
    /// `message_delta` repeats some, cumulatively).
    fn update(&mut self, u: &Value) {
        let fields = [
            ("input_tokens", &mut self.input),
            ("output_tokens", &mut self.output),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("cache_creation_input_tokens", &mut self.cache_write),
        ];
        for (name, slot) in fields {
            if let Some(n) = u[name].as_u64() {
                *slot = n;
            }
        }
    }

    /// As agentry counts it: `tokens_in` is the whole prompt, so the token
    /// budget is charged for cached tokens too.
    fn tokens(self) -> TokenUsage {
        TokenUsage {
            tokens_in: self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_write),
            tokens_out: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
        }
    }
}

#[derive(Debug, Default)]
struct Turn<'d> {
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<String>,
    /// The response's id and model (`message_start`), for its span.
    response_id: Option<String>,
    response_model: Option<String>,
    /// Publishes streamed text as run events.
    deltas: Option<&'d dyn DeltaSink>,
}

impl Turn<'_> {
    /// Applies one event; true at `message_stop`.
    fn apply(&mut self, data: &Value) -> Result<bool, AttemptError> {
        let index = data["index"].as_u64().unwrap_or(0);
        match data["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let message = &data["message"];
                self.usage.update(&message["usage"]);
                self.response_id = message["id"].as_str().map(str::to_string);
                self.response_model = message["model"].as_str().map(str::to_string);
            }
            "content_block_start" => {
                let b = &data["content_block"];
                let block = match b["type"].as_str() {
                    Some("text") => Block::Text(b["text"].as_str().unwrap_or("").to_string()),
                    Some("tool_use") => Block::ToolUse {
                        id: b["id"].as_str().unwrap_or("").to_string(),
                        name: b["name"].as_str().unwrap_or("").to_string(),
                        input: String::new(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let d = &data["delta"];
                match (self.blocks.get_mut(&index), d["type"].as_str()) {
                    (Some(Block::Text(t)), Some("text_delta")) => {
                        let text = d["text"].as_str().unwrap_or("");
                        if let Some(sink) = &self.deltas {
                            sink.emit(text);
                        }
                        t.push_str(text);
                    }
                    (Some(Block::ToolUse { input, .. }), Some("input_json_delta")) => {
                        input.push_str(d["partial_json"].as_str().unwrap_or(""));
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(r) = data["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(r.to_string());
                }
                // Counts here are cumulative for the message.
                self.usage.update(&data["usage"]);
            }
            "message_stop" => return Ok(true),
            "error" => {
                let e = &data["error"];
                let message = format!("anthropic: error in stream: {e}");
                // `overloaded_error` and `api_error` are transient by Anthropic's docs.
                return Err(match e["type"].as_str() {
                    Some("overloaded_error" | "api_error" | "rate_limit_error") => {
                        AttemptError::retry(message)
                    }
                    _ => AttemptError::GiveUp(message),
                });
            }
            _ => {}
        }
        Ok(false)
    }

    /// The reply: the text blocks' text and the calls, in block order.
    fn into_reply(self) -> Reply {
        let mut text = String::new();
        let mut calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(t) => text.push_str(&t),
                Block::ToolUse { id, name, input } => calls.push(WireCall {
                    id,
                    name,
                    arguments: input,
                }),
                Block::Other => {}
            }
        }
        Reply {
            text,
            calls,
            usage: self.usage.tokens(),
            finish_reason: self.stop_reason,
            response_id: self.response_id,
            response_model: self.response_model,
        }
    }
}

#[cfg(test)]
mod props;
