//! One model turn, for every wire ([`ModelAdapter`]): the budget's preflight,
//! compaction, the projection that fits the window, the request in its `chat`
//! span with its retries, then the decision with host call ids, usage, money
//! and the prompt's hash. What a provider does its own way is its [`Wire`].

use std::time::Duration;

use agentry_policy::{DeltaSink, PolicyContext};
use agentry_protocol::decision::{Compaction, Decision, PolicyOutput};
use serde_json::Value;

use crate::compaction::{Summary, SummaryTurn, compact, project, with_compaction};
use crate::config::ModelConfig;
use crate::context::{SessionBudget, TokenEstimate};
use crate::error::ModelError;
use crate::names::ToolNameMap;
use crate::span;
use crate::transport::{self, AttemptError, TurnFailure};
use crate::wire::{Ask, Reading, Reply, Wire};

/// A model turn as the fallback chain sees it.
pub(crate) struct ModelTurn {
    /// What the turn produced, named after its model.
    pub(crate) output: PolicyOutput,
    /// The turn failed only because the server was unavailable after the
    /// retries: the next model of a chain may take it.
    pub(crate) unavailable: bool,
}

impl ModelTurn {
    /// A turn that ends here (decided, or failed in a way no fallback helps).
    pub(crate) fn decided(output: PolicyOutput) -> Self {
        ModelTurn {
            output,
            unavailable: false,
        }
    }
}

/// A model reached over wire `W`: what the public adapters
/// (`OpenAiPolicy`, `AnthropicPolicy`) are.
// Clone is cheap (the HTTP client is shared): one clone per child agent.
#[derive(Clone)]
pub(crate) struct ModelAdapter<W> {
    config: ModelConfig,
    client: reqwest::Client,
    wire: W,
    /// Bytes → tokens, corrected by the prompt tokens the server reports.
    estimate: TokenEstimate,
    /// The summary sent instead of older turns (`CompactionMode::Summarize`).
    summary: Option<Summary>,
}

/// A request body in the forms an attempt may send.
struct Bodies {
    stream: Vec<u8>,
    /// The same asking for a whole reply, for a wire that has that form.
    whole: Option<Vec<u8>>,
}

impl Bodies {
    /// Encodes `request`; a wire with a whole form gets it too (the request
    /// is left in that form, its messages as they were).
    fn of<W: Wire>(request: &mut Value) -> Result<Bodies, serde_json::Error> {
        let stream = serde_json::to_vec(request)?;
        let whole = if W::ask_whole(request) {
            Some(serde_json::to_vec(request)?)
        } else {
            None
        };
        Ok(Bodies { stream, whole })
    }

    /// The body to send.
    fn sent(&self, streamed: bool) -> &[u8] {
        match &self.whole {
            Some(whole) if !streamed => whole,
            Some(_) | None => &self.stream,
        }
    }
}

/// A turn's request, ready to send.
struct Prepared {
    /// The request's time: the configured timeout or the wall clock left.
    timeout: Duration,
    names: ToolNameMap,
    /// The request as built: its messages go on the span with content on.
    request: Value,
    bodies: Bodies,
    /// The summary made for this turn, if one was.
    compaction: Option<Compaction>,
}

/// One attempt's reply and the hash of the body that got it.
struct Answer {
    reply: Reply,
    prompt_hash: String,
}

impl span::Answered for Answer {
    fn response(&self) -> span::Response<'_> {
        self.reply.response()
    }
}

impl<W: Wire> ModelAdapter<W> {
    /// Checks the configuration and builds the client. Sends nothing.
    pub(crate) fn new(config: ModelConfig, wire: W) -> Result<Self, ModelError> {
        let client = config.client()?;
        Ok(ModelAdapter {
            config,
            client,
            wire,
            estimate: TokenEstimate::default(),
            summary: None,
        })
    }

    /// `provider:model`, or `NAME (provider:model)` for a named model.
    pub(crate) fn name(&self) -> String {
        let wire = format!("{}:{}", W::PROVIDER.name(), self.config.model);
        match &self.config.label {
            Some(label) => format!("{label} ({wire})"),
            None => wire,
        }
    }

    /// Checks that the server answers (any status will do).
    pub(crate) async fn probe(&self) -> Result<(), ModelError> {
        let url = format!("{}{}", self.config.base_url, W::PROBE_PATH);
        transport::probe(&self.client, &url).await
    }

    /// One model turn, and whether it failed only because the server was
    /// unavailable (see [`ModelTurn`]).
    pub(crate) async fn turn(&mut self, ctx: PolicyContext<'_>) -> ModelTurn {
        let model = self.name();
        match self.prepare(ctx).await {
            Ok(prepared) => self.ask(ctx, prepared, model).await,
            Err(decision) => ModelTurn::decided(PolicyOutput::new(decision, model)),
        }
    }

    /// The budget's preflight, the tool names, compaction and the projection:
    /// the request to send, or the decision that ends the turn without one.
    async fn prepare(&mut self, ctx: PolicyContext<'_>) -> Result<Prepared, Decision> {
        let timeout = self.config.preflight(ctx.budget)?;
        let failed = |message: String| Decision::Failed {
            message,
            fatal: true,
        };
        let names = ToolNameMap::new(ctx.tools).map_err(|e| failed(e.to_string()))?;
        let ask = Ask {
            goal: ctx.goal,
            tools: ctx.tools,
            session: &[],
            names: &names,
            result_cap: 0,
        };
        // What every request carries whatever the session: sized once per turn.
        let fixed = W::request(&self.config, ask);
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
        let mut request = W::request(
            &self.config,
            Ask {
                session: &projection.entries,
                result_cap: projection.result_cap,
                ..ask
            },
        );
        let bodies = Bodies::of::<W>(&mut request).map_err(|e| {
            failed(format!(
                "{}: cannot encode the request: {e}",
                W::PROVIDER.name()
            ))
        })?;
        Ok(Prepared {
            timeout,
            names,
            request,
            bodies,
            compaction,
        })
    }

    /// Sends the prepared request in its `chat` span, with its retries, and
    /// makes the turn's output of what came back.
    async fn ask(
        &mut self,
        ctx: PolicyContext<'_>,
        prepared: Prepared,
        model: String,
    ) -> ModelTurn {
        let chat = span::ChatRequest {
            provider: W::PROVIDER.name(),
            config: &self.config,
            stream: self.wire.streams(),
            run_traceparent: ctx.traceparent,
            content: ctx.content.map(|redact| span::Content {
                redact,
                input: &prepared.request["messages"],
            }),
        };
        let (this, bodies, timeout, deltas) =
            (&*self, &prepared.bodies, prepared.timeout, ctx.deltas);
        let chatted = span::chat(chat, |tp| async move {
            this.attempt(bodies, timeout, deltas, tp.as_deref()).await
        })
        .await;
        let (out, unavailable) = match chatted.result {
            Ok(answer) => {
                let usage = answer.reply.usage;
                self.estimate.learn(bodies.stream.len(), usage.tokens_in);
                let mut decision = answer.reply.into_decision::<W>(&prepared.names);
                crate::ids::assign_host_ids(&mut decision, ctx.step, ctx.session);
                span::record_output(&chatted.span, ctx.content, &decision);
                let mut out = PolicyOutput::new(decision, model);
                out.usage = usage;
                out.prompt_hash = Some(answer.prompt_hash);
                (out, false)
            }
            Err(failure) => {
                let unavailable = matches!(failure, TurnFailure::Exhausted(_));
                let mut out = PolicyOutput::new(failure.into_decision(), model);
                out.prompt_hash = Some(transport::prompt_hash(&bodies.stream));
                (out, unavailable)
            }
        };
        let out = with_compaction(out, prepared.compaction);
        ModelTurn {
            output: self.config.finish(out, W::PROVIDER),
            unavailable,
        }
    }

    /// One attempt: sends the body the wire speaks now and reads the reply.
    async fn attempt(
        &self,
        bodies: &Bodies,
        timeout: Duration,
        deltas: Option<&dyn DeltaSink>,
        traceparent: Option<&str>,
    ) -> Result<Answer, AttemptError> {
        let streamed = self.wire.streams();
        let body = bodies.sent(streamed);
        let request = self
            .client
            .post(format!("{}{}", self.config.base_url, W::TURN_PATH))
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        let request = W::headers(&self.config, request);
        // Held until the reply has been read: a streamed reply is in flight
        // until its last byte.
        let _pass = match &self.config.gate {
            Some(gate) => Some(gate.enter().await),
            None => None,
        };
        let sent = transport::request_clock();
        let provider = W::PROVIDER;
        let response = transport::send(request, provider.name(), provider.key_var(), traceparent)
            .await
            .inspect_err(|error| self.hold_back(error))?;
        let reading = Reading {
            streamed,
            stall: self.config.stall_timeout,
            sent,
            deltas,
        };
        let reply = self.wire.read(response, reading).await?;
        if let Some(gate) = &self.config.gate {
            gate.charge(reply.usage.tokens_in + reply.usage.tokens_out);
        }
        Ok(Answer {
            reply,
            prompt_hash: transport::prompt_hash(body),
        })
    }

    /// A server that said when to come back holds back every run on this
    /// named model, not only this one.
    fn hold_back(&self, error: &AttemptError) {
        if let (
            Some(gate),
            AttemptError::Retryable {
                retry_after: Some(after),
                ..
            },
        ) = (&self.config.gate, error)
        {
            gate.hold_back(*after);
        }
    }

    /// Asks the model for a summary of older turns, without tools.
    async fn summarize(&self, prompt: String, timeout: Duration) -> Result<SummaryTurn, Decision> {
        let mut request = W::summary_request(&self.config, prompt);
        let bodies = Bodies::of::<W>(&mut request).map_err(|e| Decision::Failed {
            message: format!(
                "{}: cannot encode the summary request: {e}",
                W::PROVIDER.name()
            ),
            fatal: false,
        })?;
        let answer = transport::with_retries(&self.config.retry, || {
            self.attempt(&bodies, timeout, None, None)
        })
        .await
        .map_err(TurnFailure::into_decision)?;
        Ok(SummaryTurn {
            text: answer.reply.text,
            usage: answer.reply.usage,
        })
    }
}
