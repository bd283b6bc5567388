//! OpenAI-compatible Chat Completions: request projection and streamed
//! tool-call assembly (its [`Wire`]; the turn is the crate's `turn` module).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentry_policy::{DeltaSink, Policy, PolicyContext};
use agentry_protocol::decision::{PolicyOutput, TokenUsage};
use agentry_protocol::envelope::DEFAULT_RESULT_CAP;
use agentry_protocol::state::SessionEntry;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::compaction::SUMMARY_SYSTEM;
use crate::conversation::{Item, arguments_text, conversation};
use crate::openai_wire::{Choice, Chunk, Delta, ToolCallDelta, Whole};
use crate::prompt::system_prompt;
use crate::transport::{AttemptError, SseReader};
use crate::turn::{ModelAdapter, ModelTurn};
use crate::wire::{Ask, Reading, Reply, Wire, WireCall};
use crate::{ModelConfig, ModelError, Provider, ToolNameMap};

/// A [`Policy`] backed by an OpenAI-compatible `/chat/completions` endpoint.
// Clone is cheap (the HTTP client is shared): one clone per child agent.
#[derive(Clone)]
pub struct OpenAiPolicy(ModelAdapter<OpenAiWire>);

impl OpenAiPolicy {
    /// Checks the configuration and builds the client. Sends nothing.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        ModelAdapter::new(config, OpenAiWire::default()).map(OpenAiPolicy)
    }

    /// Checks that the server answers (`GET {base}/models`; any status will do).
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
impl Policy for OpenAiPolicy {
    fn name(&self) -> String {
        self.0.name()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.0.turn(ctx).await.output
    }
}

/// The Chat Completions wire.
#[derive(Clone, Default)]
pub(crate) struct OpenAiWire {
    /// Set once the server answered a streaming request with an empty 200 body
    /// (llama-cpp-python does, for tool calls with `tool_choice: "auto"`): from
    /// then on this adapter, and its clones, ask for whole responses instead.
    whole: Arc<AtomicBool>,
}

impl Wire for OpenAiWire {
    const PROVIDER: Provider = Provider::OpenAi;
    const TURN_PATH: &'static str = "/chat/completions";
    const PROBE_PATH: &'static str = "/models";
    const STOP_FIELD: &'static str = "finish_reason";

    /// Model, projected messages (results longer than `result_cap` bytes
    /// shown cut), tools, streaming with usage.
    fn request(config: &ModelConfig, ask: Ask<'_>) -> Value {
        let system = system_prompt(ask.goal, ask.names);
        let mut request = json!({
            "model": config.model,
            "messages": openai_messages(&system, ask.session, ask.names, ask.result_cap),
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": config.max_output_tokens,
        });
        if !ask.tools.is_empty() {
            request["tools"] = ask
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": ask.names.wire(&t.name),
                        "description": t.description,
                        "parameters": t.input_schema,
                    }})
                })
                .collect();
        }
        request
    }

    fn summary_request(config: &ModelConfig, prompt: String) -> Value {
        json!({
            "model": config.model,
            "messages": [
                {"role": "system", "content": SUMMARY_SYSTEM},
                {"role": "user", "content": prompt},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": config.max_output_tokens,
        })
    }

    fn headers(config: &ModelConfig, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &config.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    fn ask_whole(request: &mut Value) -> bool {
        if let Some(map) = request.as_object_mut() {
            map.insert("stream".into(), Value::Bool(false));
            map.remove("stream_options");
        }
        true
    }

    fn streams(&self) -> bool {
        !self.whole.load(Ordering::Relaxed)
    }

    async fn read(
        &self,
        response: reqwest::Response,
        reading: Reading<'_>,
    ) -> Result<Reply, AttemptError> {
        if !reading.streamed {
            return whole_response(response).await;
        }
        let events = SseReader::new(response, reading.stall, reading.sent);
        match read_turn(events, reading.deltas).await? {
            Some(reply) => Ok(reply),
            None => {
                self.whole.store(true, Ordering::Relaxed);
                Err(AttemptError::retry(
                    "openai: the server answered a streaming request with an empty body; retrying without streaming",
                ))
            }
        }
    }
}

/// Assembles a streamed reply from its events; `None` when the stream held no
/// event at all.
async fn read_turn(
    mut events: SseReader,
    deltas: Option<&dyn DeltaSink>,
) -> Result<Option<Reply>, AttemptError> {
    let mut turn = Turn {
        deltas,
        ..Turn::default()
    };
    let mut any = false;
    while let Some(event) = events.next("openai").await? {
        any = true;
        if event.data.trim() == "[DONE]" {
            turn.done = true;
            break;
        }
        if event.data.trim().is_empty() {
            continue;
        }
        let chunk: Chunk = serde_json::from_str(&event.data).map_err(|e| {
            AttemptError::GiveUp(format!(
                "openai: unparseable stream chunk ({e}): {}",
                event.data
            ))
        })?;
        turn.apply(chunk)?;
    }
    if !any {
        return Ok(None);
    }
    if !turn.done && turn.finish_reason.is_none() {
        return Err(AttemptError::retry(
            "openai: the stream ended before [DONE] or a finish_reason",
        ));
    }
    Ok(Some(turn.into_reply()))
}

/// Projects the session into chat messages: the system prompt, then user text,
/// assistant text, and each assistant turn's tool calls (wire names, ids)
/// followed by one `role: "tool"` message per call with its `tool_call_id` and
/// the result envelope as JSON text.
///
/// Every projection is a request the API accepts (see the crate's `conversation` module):
/// each `tool` message answers a call of the assistant message right before
/// it, every call is answered before any other message, and failed turns and
/// host notes are user messages, never tool results.
/// Results longer than [`DEFAULT_RESULT_CAP`] bytes of JSON are shown cut.
pub fn build_openai_messages(
    system: &str,
    session: &[SessionEntry],
    names: &ToolNameMap,
) -> Vec<Value> {
    openai_messages(system, session, names, DEFAULT_RESULT_CAP)
}

fn openai_messages(
    system: &str,
    session: &[SessionEntry],
    names: &ToolNameMap,
    result_cap: usize,
) -> Vec<Value> {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for item in conversation(session, result_cap) {
        match item {
            Item::User(text) => messages.push(json!({"role": "user", "content": text})),
            Item::Assistant(text) => messages.push(json!({"role": "assistant", "content": text})),
            Item::Calls(group) => {
                let calls: Vec<Value> = group
                    .calls
                    .iter()
                    .zip(&group.ids)
                    .map(|(c, id)| {
                        json!({"id": id, "type": "function", "function": {
                            "name": names.wire(&c.name),
                            "arguments": arguments_text(&c.arguments),
                        }})
                    })
                    .collect();
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": calls}));
                for (i, id) in group.ids.iter().enumerate() {
                    let (content, _) = group.result_text(i);
                    messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
                }
            }
        }
    }
    messages
}

/// Reads a non-streaming response into the same shape a stream assembles to.
async fn whole_response(response: reqwest::Response) -> Result<Reply, AttemptError> {
    let body = response
        .bytes()
        .await
        .map_err(|e| AttemptError::retry(format!("openai: reading the response failed: {e}")))?;
    let whole: Whole = serde_json::from_slice(&body).map_err(|e| {
        AttemptError::GiveUp(format!(
            "openai: unparseable response ({e}): {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(500)
                .collect::<String>()
        ))
    })?;
    let mut turn = Turn {
        done: true,
        ..Turn::default()
    };
    // A whole message is a stream of one delta per choice.
    let chunk = Chunk {
        id: whole.id,
        model: whole.model,
        choices: whole
            .choices
            .into_iter()
            .map(|c| Choice {
                finish_reason: c.finish_reason,
                delta: Some(Delta {
                    content: c.message.content,
                    tool_calls: Some(
                        c.message
                            .tool_calls
                            .into_iter()
                            .enumerate()
                            .map(|(index, call)| ToolCallDelta {
                                index,
                                id: call.id,
                                function: call.function,
                            })
                            .collect(),
                    ),
                }),
            })
            .collect(),
        usage: whole.usage,
        error: whole.error,
    };
    turn.apply(chunk)?;
    Ok(turn.into_reply())
}

/// One streamed turn being assembled.
#[derive(Debug, Default)]
struct Turn<'d> {
    text: String,
    calls: BTreeMap<usize, WireCall>,
    usage: TokenUsage,
    finish_reason: Option<String>,
    /// The response's id and model, as the server named them.
    response_id: Option<String>,
    response_model: Option<String>,
    done: bool,
    /// Publishes streamed text as run events.
    deltas: Option<&'d dyn DeltaSink>,
}

impl Turn<'_> {
    fn apply(&mut self, chunk: Chunk) -> Result<(), AttemptError> {
        if let Some(error) = chunk.error {
            return Err(AttemptError::retry(format!(
                "openai: error in stream: {error}"
            )));
        }
        if self.response_id.is_none() {
            self.response_id = chunk.id;
        }
        if self.response_model.is_none() {
            self.response_model = chunk.model;
        }
        if let Some(u) = chunk.usage {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            self.usage = TokenUsage {
                tokens_in: u.prompt_tokens,
                tokens_out: u.completion_tokens,
                // Already part of prompt_tokens, as TokenUsage counts it.
                cache_read_tokens: cached.min(u.prompt_tokens),
                cache_write_tokens: 0,
            };
        }
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content {
                if let Some(sink) = &self.deltas {
                    sink.emit(&text);
                }
                self.text.push_str(&text);
            }
            // Ids and names arrive once per index; argument fragments arrive split
            // anywhere and interleaved with other indices.
            for d in delta.tool_calls.unwrap_or_default() {
                let call = self.calls.entry(d.index).or_default();
                if let Some(id) = d.id.filter(|s| !s.is_empty()) {
                    call.id = id;
                }
                if let Some(f) = d.function {
                    if let Some(name) = f.name.filter(|s| !s.is_empty())
                        && call.name != name
                    {
                        call.name.push_str(&name);
                    }
                    if let Some(args) = f.arguments {
                        call.arguments.push_str(&args);
                    }
                }
            }
        }
        Ok(())
    }

    /// The reply: calls in index order.
    fn into_reply(self) -> Reply {
        Reply {
            text: self.text,
            calls: self.calls.into_values().collect(),
            usage: self.usage,
            finish_reason: self.finish_reason,
            response_id: self.response_id,
            response_model: self.response_model,
        }
    }
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::decision::Decision;
    use agentry_protocol::envelope::ResultEnvelope;
    use agentry_protocol::tool::{ToolArguments, ToolCall, ToolSpec};

    /// The policy's name (every step record's `model`, the spans') is
    /// `provider:model`, and `NAME (provider:model)` for a model the
    /// operator named (`agentry serve`'s `[models.NAME]`).
    #[test]
    fn a_named_model_is_named_by_its_label_and_its_wire_name() {
        let config = ModelConfig::new("qwen", "http://127.0.0.1:9/v1");
        assert_eq!(
            OpenAiPolicy::new(config.clone()).unwrap().name(),
            "openai:qwen"
        );
        let labelled = ModelConfig {
            label: Some("local".into()),
            ..config
        };
        assert_eq!(
            OpenAiPolicy::new(labelled).unwrap().name(),
            "local (openai:qwen)"
        );
    }

    fn envelope(id: &str) -> ResultEnvelope {
        serde_json::from_value(json!({
            "tool_call_id": id, "tool": "fs.read", "ok": true, "data": {"content": "1"},
            "cost": {"latency_ms": 0}, "observed_at": 0
        }))
        .unwrap()
    }

    #[test]
    fn tool_results_follow_their_call_and_held_messages_come_after() {
        let names = ToolNameMap::new(&[ToolSpec {
            name: "fs.read".into(),
            description: String::new(),
            input_schema: json!({}),
        }])
        .unwrap();
        let session = vec![
            SessionEntry::User {
                text: "goal".into(),
            },
            SessionEntry::Assistant {
                step: 1,
                decision: Decision::ToolCalls {
                    calls: vec![
                        ToolCall {
                            id: "a".into(),
                            name: "fs.read".into(),
                            arguments: ToolArguments::Raw("{\"path\":".into()),
                        },
                        ToolCall::new("b", "fs.read", json!({"path": "x"})),
                    ],
                }
                .into(),
            },
            SessionEntry::Tool {
                result: envelope("a").into(),
            },
            SessionEntry::User {
                text: "hurry".into(),
            },
            SessionEntry::Tool {
                result: envelope("b").into(),
            },
        ];
        let m = build_openai_messages("sys", &session, &names);
        let roles: Vec<&str> = m.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "tool", "tool", "user"]
        );
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "fs_read");
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], "{\"path\":");
        assert_eq!(m[3]["tool_call_id"], "a");
        assert_eq!(m[4]["tool_call_id"], "b");
        assert_eq!(m[5]["content"], "hurry");
    }
}
