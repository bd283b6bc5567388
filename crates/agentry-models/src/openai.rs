//! OpenAI-compatible Chat Completions: request projection and streamed
//! tool-call assembly.
// Size: the adapter, its projection and its stream assembly read together;
// the wire types are in openai_wire.rs and the span in span.rs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use agentry_policy::{DeltaSink, Policy, PolicyContext};
use agentry_protocol::decision::{Decision, PolicyOutput, TokenUsage};
use agentry_protocol::envelope::DEFAULT_RESULT_CAP;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::{ToolArguments, ToolCall, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::compaction::{SUMMARY_SYSTEM, Summary, SummaryTurn, compact, project, with_compaction};
use crate::context::{SessionBudget, TokenEstimate};
use crate::conversation::{Item, arguments_text, conversation};
use crate::openai_wire::{Choice, Chunk, Delta, ToolCallDelta, Whole};
use crate::prompt::system_prompt;
use crate::span;
use crate::transport::{self, AttemptError, ModelTurn, SseReader, TurnFailure};
use crate::{ModelConfig, ModelError, Provider, ToolNameMap};

/// A [`Policy`] backed by an OpenAI-compatible `/chat/completions` endpoint.
// Clone is cheap (the HTTP client is shared): one clone per child agent.
#[derive(Clone)]
pub struct OpenAiPolicy {
    config: ModelConfig,
    client: reqwest::Client,
    /// Set once the server answered a streaming request with an empty 200 body
    /// (llama-cpp-python does, for tool calls with `tool_choice: "auto"`): from
    /// then on this adapter, and its clones, ask for whole responses instead.
    plain: Arc<AtomicBool>,
    /// Bytes → tokens, corrected by the prompt tokens the server reports.
    estimate: TokenEstimate,
    /// The summary sent instead of older turns (`CompactionMode::Summarize`).
    summary: Option<Summary>,
}

/// One request body in both shapes; which one is sent depends on `plain`.
struct Bodies {
    stream: Vec<u8>,
    plain: Vec<u8>,
}

impl Bodies {
    /// A streaming request, and the same asking for a whole response.
    fn of(mut request: Value) -> Result<Bodies, serde_json::Error> {
        let stream = serde_json::to_vec(&request)?;
        if let Some(map) = request.as_object_mut() {
            map.insert("stream".into(), Value::Bool(false));
            map.remove("stream_options");
        }
        Ok(Bodies {
            stream,
            plain: serde_json::to_vec(&request)?,
        })
    }
}

impl OpenAiPolicy {
    /// Checks the configuration and builds the client. Sends nothing.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        let client = config.client()?;
        Ok(OpenAiPolicy {
            config,
            client,
            plain: Arc::new(AtomicBool::new(false)),
            estimate: TokenEstimate::default(),
            summary: None,
        })
    }

    /// Checks that the server answers (`GET {base}/models`; any status will do).
    pub async fn probe(&self) -> Result<(), ModelError> {
        transport::probe(&self.client, &format!("{}/models", self.config.base_url)).await
    }

    async fn attempt<'d>(
        &self,
        bodies: &Bodies,
        timeout: std::time::Duration,
        deltas: Option<&'d dyn DeltaSink>,
        traceparent: Option<&str>,
    ) -> Result<Turn<'d>, AttemptError> {
        let plain = self.plain.load(Ordering::Relaxed);
        let body = if plain { &bodies.plain } else { &bodies.stream };
        let mut request = self
            .client
            .post(format!("{}/chat/completions", self.config.base_url))
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(key) = &self.config.api_key {
            request = request.bearer_auth(key);
        }
        let sent = transport::request_clock();
        let response = transport::send(request, "openai", "OPENAI_API_KEY", traceparent).await?;
        let mut turn = if plain {
            whole_response(response).await?
        } else {
            self.read_stream(response, deltas, sent).await?
        };
        turn.hash = transport::prompt_hash(body);
        Ok(turn)
    }

    /// Asks the model for a summary of older turns, without tools.
    async fn summarize(
        &self,
        prompt: String,
        timeout: std::time::Duration,
    ) -> Result<SummaryTurn, Decision> {
        let request = json!({
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": SUMMARY_SYSTEM},
                {"role": "user", "content": prompt},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": self.config.max_output_tokens,
        });
        let bodies = Bodies::of(request).map_err(|e| Decision::Failed {
            message: format!("openai: cannot encode the summary request: {e}"),
            fatal: false,
        })?;
        let turn = transport::with_retries(&self.config.retry, || {
            self.attempt(&bodies, timeout, None, None)
        })
        .await
        .map_err(TurnFailure::into_decision)?;
        Ok(SummaryTurn {
            text: turn.text,
            usage: turn.usage,
        })
    }

    async fn read_stream<'d>(
        &self,
        response: reqwest::Response,
        deltas: Option<&'d dyn DeltaSink>,
        sent: Option<std::time::Instant>,
    ) -> Result<Turn<'d>, AttemptError> {
        let events = SseReader::new(response, self.config.stall_timeout, sent);
        match read_turn(events, deltas).await? {
            Some(turn) => Ok(turn),
            None => {
                self.plain.store(true, Ordering::Relaxed);
                Err(AttemptError::retry(
                    "openai: the server answered a streaming request with an empty body; retrying without streaming",
                ))
            }
        }
    }
}

/// Assembles a streamed turn from its events; `None` when the stream held no
/// event at all.
async fn read_turn(
    mut events: SseReader,
    deltas: Option<&dyn DeltaSink>,
) -> Result<Option<Turn<'_>>, AttemptError> {
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
    Ok(Some(turn))
}

#[async_trait]
impl Policy for OpenAiPolicy {
    fn name(&self) -> String {
        format!("openai:{}", self.config.model)
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.turn(ctx).await.output
    }
}

impl OpenAiPolicy {
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
        let fixed = build_openai_request(&self.config, ctx.goal, ctx.tools, &[], &names, 0);
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
        let request = build_openai_request(
            &self.config,
            ctx.goal,
            ctx.tools,
            &projection.entries,
            &names,
            projection.result_cap,
        );
        // Only with span content on: the messages as sent, for the span.
        let input = ctx.content.map(|_| request["messages"].clone());
        let bodies = match Bodies::of(request) {
            Ok(bodies) => bodies,
            Err(e) => {
                return failed(format!("openai: cannot encode the request: {e}"));
            }
        };
        let chat = span::ChatRequest {
            provider: "openai",
            config: &self.config,
            stream: !self.plain.load(Ordering::Relaxed),
            run_traceparent: ctx.traceparent,
            content: ctx
                .content
                .zip(input.as_ref())
                .map(|(redact, input)| span::Content { redact, input }),
        };
        let (this, bodies, deltas) = (&*self, &bodies, ctx.deltas);
        let chatted = span::chat(chat, |tp| async move {
            this.attempt(bodies, timeout, deltas, tp.as_deref()).await
        })
        .await;
        let (out, unavailable) = match chatted.result {
            Ok(turn) => {
                let usage = turn.usage;
                self.estimate.learn(bodies.stream.len(), usage.tokens_in);
                let hash = turn.hash.clone();
                let mut decision = turn.into_decision(&names);
                crate::ids::assign_host_ids(&mut decision, ctx.step, ctx.session);
                span::record_output(&chatted.span, ctx.content, &decision);
                let mut out = PolicyOutput::new(decision, model);
                out.usage = usage;
                out.prompt_hash = Some(hash);
                (out, false)
            }
            Err(failure) => {
                let unavailable = matches!(failure, TurnFailure::Exhausted(_));
                let mut out = PolicyOutput::new(failure.into_decision(), model);
                out.prompt_hash = Some(transport::prompt_hash(&bodies.stream));
                (out, unavailable)
            }
        };
        ModelTurn {
            output: self
                .config
                .finish(with_compaction(out, compaction), Provider::OpenAi),
            unavailable,
        }
    }
}

/// The whole request body: model, projected messages (results longer than
/// `result_cap` bytes shown cut), tools, streaming with usage.
pub(crate) fn build_openai_request(
    config: &ModelConfig,
    goal: &str,
    tools: &[ToolSpec],
    session: &[SessionEntry],
    names: &ToolNameMap,
    result_cap: usize,
) -> Value {
    let system = system_prompt(goal, names);
    let mut request = json!({
        "model": config.model,
        "messages": openai_messages(&system, session, names, result_cap),
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": config.max_output_tokens,
    });
    if !tools.is_empty() {
        request["tools"] = tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": names.wire(&t.name),
                    "description": t.description,
                    "parameters": t.input_schema,
                }})
            })
            .collect();
    }
    request
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
async fn whole_response(response: reqwest::Response) -> Result<Turn<'static>, AttemptError> {
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
    Ok(turn)
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// One streamed turn being assembled.
#[derive(Debug, Default)]
struct Turn<'d> {
    text: String,
    calls: BTreeMap<usize, PartialCall>,
    usage: TokenUsage,
    finish_reason: Option<String>,
    /// The response's id and model, as the server named them.
    response_id: Option<String>,
    response_model: Option<String>,
    done: bool,
    /// sha256 of the body actually sent.
    hash: String,
    /// Publishes streamed text as run events.
    deltas: Option<&'d dyn DeltaSink>,
}

impl span::Answered for Turn<'_> {
    fn response(&self) -> span::Response<'_> {
        span::Response {
            id: self.response_id.as_deref(),
            model: self.response_model.as_deref(),
            finish_reason: self.finish_reason.as_deref(),
            usage: self.usage,
        }
    }
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

    fn into_decision(self, names: &ToolNameMap) -> Decision {
        if !self.calls.is_empty() {
            let calls = self
                .calls
                .into_values()
                .map(|c| ToolCall {
                    // A missing id is given one by `ids::assign_host_ids`.
                    id: c.id,
                    name: names.canonical(&c.name),
                    arguments: ToolArguments::Raw(c.arguments),
                })
                .collect();
            return Decision::ToolCalls { calls };
        }
        if self.text.trim().is_empty() {
            return Decision::Failed {
                message: format!(
                    "openai: the model answered with neither text nor a tool call (finish_reason {:?})",
                    self.finish_reason
                ),
                fatal: false,
            };
        }
        Decision::Final { answer: self.text }
    }
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::envelope::ResultEnvelope;

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
