//! Anthropic Messages: request projection (`tool_use` / `tool_result` blocks)
//! and the streaming event types.

use std::collections::BTreeMap;

use agentry_policy::{DeltaSink, Policy, PolicyContext};
use agentry_protocol::decision::{Decision, PolicyOutput, TokenUsage};
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::{ToolArguments, ToolCall, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::compaction::{SUMMARY_SYSTEM, Summary, SummaryTurn, compact, project, with_compaction};
use crate::context::{SessionBudget, TokenEstimate};
use crate::conversation::{Item, conversation};
use crate::prompt::system_prompt;
use crate::span;
use crate::transport::{self, AttemptError, ModelTurn, SseReader, TurnFailure};
use crate::{ModelConfig, ModelError, Provider, ToolNameMap};

/// The API version header this adapter speaks.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A [`Policy`] backed by Anthropic's `/v1/messages` endpoint.
// Clone is cheap (the HTTP client is shared): one clone per child agent.
#[derive(Clone)]
pub struct AnthropicPolicy {
    config: ModelConfig,
    client: reqwest::Client,
    /// Bytes → tokens, corrected by the prompt tokens the server reports.
    estimate: TokenEstimate,
    /// The summary sent instead of older turns (`CompactionMode::Summarize`).
    summary: Option<Summary>,
}

impl AnthropicPolicy {
    /// Checks the configuration and builds the client. Sends nothing.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        let client = config.client()?;
        Ok(AnthropicPolicy {
            config,
            client,
            estimate: TokenEstimate::default(),
            summary: None,
        })
    }

    /// Checks that the server answers (`GET {base}/v1/models`; any status will do).
    pub async fn probe(&self) -> Result<(), ModelError> {
        transport::probe(&self.client, &format!("{}/v1/models", self.config.base_url)).await
    }

    /// Asks the model for a summary of older turns, without tools.
    async fn summarize(
        &self,
        prompt: String,
        timeout: std::time::Duration,
    ) -> Result<SummaryTurn, Decision> {
        let request = json!({
            "model": self.config.model,
            "max_tokens": self.config.max_output_tokens,
            "system": SUMMARY_SYSTEM,
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
            "stream": true,
        });
        let body = serde_json::to_vec(&request).map_err(|e| Decision::Failed {
            message: format!("anthropic: cannot encode the summary request: {e}"),
            fatal: false,
        })?;
        let turn = transport::with_retries(&self.config.retry, || {
            self.attempt(&body, timeout, None, None)
        })
        .await
        .map_err(TurnFailure::into_decision)?;
        let text = turn
            .blocks
            .values()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                Block::ToolUse { .. } | Block::Other => None,
            })
            .collect();
        Ok(SummaryTurn {
            text,
            usage: turn.usage.tokens(),
        })
    }

    async fn attempt<'d>(
        &self,
        body: &[u8],
        timeout: std::time::Duration,
        deltas: Option<&'d dyn DeltaSink>,
        traceparent: Option<&str>,
    ) -> Result<Turn<'d>, AttemptError> {
        let mut request = self
            .client
            .post(format!("{}/v1/messages", self.config.base_url))
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("anthropic-version", ANTHROPIC_VERSION)
            .body(body.to_vec());
        if let Some(key) = &self.config.api_key {
            request = request.header("x-api-key", key);
        }
        let sent = transport::request_clock();
        let response =
            transport::send(request, "anthropic", "ANTHROPIC_API_KEY", traceparent).await?;
        read_turn(
            SseReader::new(response, self.config.stall_timeout, sent),
            deltas,
        )
        .await
    }
}

/// Assembles a streamed turn from its events, up to `message_stop`.
async fn read_turn(
    mut events: SseReader,
    deltas: Option<&dyn DeltaSink>,
) -> Result<Turn<'_>, AttemptError> {
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
            return Ok(turn);
        }
    }
    Err(AttemptError::retry(
        "anthropic: the stream ended before message_stop",
    ))
}

#[async_trait]
impl Policy for AnthropicPolicy {
    fn name(&self) -> String {
        format!("anthropic:{}", self.config.model)
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.turn(ctx).await.output
    }
}

impl AnthropicPolicy {
    /// One model turn, and whether it failed only because the server was
    /// unavailable (see [`ModelTurn`]).
    pub(crate) async fn turn(&mut self, ctx: PolicyContext<'_>) -> ModelTurn {
        // Size: one turn in order (preflight, compaction, projection, the
        // request in its span, the decision); each stage is a call already.
        let model = self.name();
        let timeout = match self.config.preflight(ctx.budget) {
            Ok(t) => t,
            Err(decision) => return ModelTurn::decided(PolicyOutput::new(decision, model)),
        };
        let failed = |message: String| {
            ModelTurn::decided(PolicyOutput::new(
                Decision::Failed {
                    message,
                    fatal: true,
                },
                model.clone(),
            ))
        };
        let names = match ToolNameMap::new(ctx.tools) {
            Ok(n) => n,
            Err(e) => return failed(e.to_string()),
        };
        // What every request carries whatever the session: sized once per turn.
        let fixed = anthropic_request(&self.config, ctx.goal, ctx.tools, &[], &names, 0);
        let budget = SessionBudget::of_request(&self.config, &self.estimate, &fixed);
        // A copy, not taken: a turn dropped mid-way (a user's interrupt)
        // keeps the summary it had.
        let mut summary = self.summary.clone();
        let compaction = compact(
            self.config.compaction,
            ctx.session,
            &mut summary,
            budget,
            |p| self.summarize(p, timeout),
        )
        .await;
        self.summary = summary;
        let projection = project(ctx.session, self.summary.as_ref(), budget);
        let request = anthropic_request(
            &self.config,
            ctx.goal,
            ctx.tools,
            &projection.entries,
            &names,
            projection.result_cap,
        );
        let body = match serde_json::to_vec(&request) {
            Ok(b) => b,
            Err(e) => return failed(format!("anthropic: cannot encode: {e}")),
        };
        let hash = transport::prompt_hash(&body);
        let chat = span::ChatRequest {
            provider: "anthropic",
            config: &self.config,
            stream: true,
            run_traceparent: ctx.traceparent,
            content: ctx.content.map(|redact| span::Content {
                redact,
                input: &request["messages"],
            }),
        };
        let (this, body, deltas) = (&*self, &body, ctx.deltas);
        let chatted = span::chat(chat, |tp| async move {
            this.attempt(body, timeout, deltas, tp.as_deref()).await
        })
        .await;
        let (mut out, unavailable) = match chatted.result {
            Ok(turn) => {
                let usage = turn.usage.tokens();
                self.estimate.learn(body.len(), usage.tokens_in);
                let mut decision = turn.into_decision(&names);
                crate::ids::assign_host_ids(&mut decision, ctx.step, ctx.session);
                span::record_output(&chatted.span, ctx.content, &decision);
                let mut out = PolicyOutput::new(decision, model.clone());
                out.usage = usage;
                (out, false)
            }
            Err(failure) => {
                let unavailable = matches!(failure, TurnFailure::Exhausted(_));
                (
                    PolicyOutput::new(failure.into_decision(), model.clone()),
                    unavailable,
                )
            }
        };
        out.prompt_hash = Some(hash);
        ModelTurn {
            output: self
                .config
                .finish(with_compaction(out, compaction), Provider::Anthropic),
            unavailable,
        }
    }
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
    anthropic_request(config, goal, tools, session, names, config.result_cap)
}

fn anthropic_request(
    config: &ModelConfig,
    goal: &str,
    tools: &[ToolSpec],
    session: &[SessionEntry],
    names: &ToolNameMap,
    result_cap: usize,
) -> Value {
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

impl span::Answered for Turn<'_> {
    fn response(&self) -> span::Response<'_> {
        span::Response {
            id: self.response_id.as_deref(),
            model: self.response_model.as_deref(),
            finish_reason: self.stop_reason.as_deref(),
            usage: self.usage.tokens(),
        }
    }
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

    fn into_decision(self, names: &ToolNameMap) -> Decision {
        let mut text = String::new();
        let mut calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(t) => text.push_str(&t),
                // A missing id is given one by `ids::assign_host_ids`.
                Block::ToolUse { id, name, input } => calls.push(ToolCall {
                    id,
                    name: names.canonical(&name),
                    arguments: ToolArguments::Raw(input),
                }),
                Block::Other => {}
            }
        }
        if !calls.is_empty() {
            Decision::ToolCalls { calls }
        } else if text.trim().is_empty() {
            Decision::Failed {
                message: format!(
                    "anthropic: the model answered with neither text nor a tool call (stop_reason {:?})",
                    self.stop_reason
                ),
                fatal: false,
            }
        } else {
            Decision::Final { answer: text }
        }
    }
}

#[cfg(test)]
mod props;
