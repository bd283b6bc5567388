//! What a provider's wire protocol does its own way ([`Wire`]): the request
//! bodies, the endpoint and headers, and reading a reply (its events into
//! text deltas, calls and usage, and which stream errors are transient). A
//! reply comes to one provider-neutral [`Reply`]; everything else about a
//! turn (compaction, the projection, retries, the span, usage, money) is the
//! crate's `turn` module, once for every wire.

use std::time::{Duration, Instant};

use agentry_policy::DeltaSink;
use agentry_protocol::decision::{Decision, TokenUsage};
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::{ToolArguments, ToolCall, ToolSpec};
use serde_json::Value;

use crate::config::{ModelConfig, Provider};
use crate::names::ToolNameMap;
use crate::span;
use crate::transport::AttemptError;

/// What a turn's request is built from.
#[derive(Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) goal: &'a str,
    pub(crate) tools: &'a [ToolSpec],
    /// The entries the request carries (projected to fit the window).
    pub(crate) session: &'a [SessionEntry],
    pub(crate) names: &'a ToolNameMap,
    /// Results longer than this, in bytes of JSON, are shown cut.
    pub(crate) result_cap: usize,
}

/// How one attempt's reply is read.
pub(crate) struct Reading<'d> {
    /// The reply streams (SSE); else it comes whole, in one body.
    pub(crate) streamed: bool,
    /// A stream with no bytes for this long is abandoned (and retried).
    pub(crate) stall: Duration,
    /// When the request was sent, while a span records the time to the first
    /// chunk (see `transport::request_clock`).
    pub(crate) sent: Option<Instant>,
    /// Publishes streamed text as run events.
    pub(crate) deltas: Option<&'d dyn DeltaSink>,
}

/// One provider's wire protocol: only what differs between providers.
pub(crate) trait Wire: Clone + Send + Sync + 'static {
    /// The provider: names the adapter, its messages and spans, its key
    /// variable and its cache prices.
    const PROVIDER: Provider;
    /// The turn endpoint, after the base URL.
    const TURN_PATH: &'static str;
    /// What a probe GETs, after the base URL (any status will do).
    const PROBE_PATH: &'static str;
    /// The reply's field saying why the model stopped, as messages name it.
    const STOP_FIELD: &'static str;

    /// The whole turn request: model, system prompt, the session, tools,
    /// streaming.
    fn request(config: &ModelConfig, ask: Ask<'_>) -> Value;

    /// A request for a summary of older turns (`prompt`), without tools.
    fn summary_request(config: &ModelConfig, prompt: String) -> Value;

    /// Credentials and the protocol's own headers.
    fn headers(config: &ModelConfig, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder;

    /// Turns a streaming request into one for a whole reply, in place (its
    /// messages untouched); false when the wire has no such form.
    fn ask_whole(_request: &mut Value) -> bool {
        false
    }

    /// Whether the next attempt streams.
    fn streams(&self) -> bool {
        true
    }

    /// Reads one attempt's reply.
    fn read(
        &self,
        response: reqwest::Response,
        reading: Reading<'_>,
    ) -> impl Future<Output = Result<Reply, AttemptError>> + Send;
}

/// A call as the model sent it: its wire name and its argument text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct WireCall {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) arguments: String,
}

/// A reply as a wire assembled it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Reply {
    /// Every text piece, in order.
    pub(crate) text: String,
    /// The calls, in the order the reply placed them.
    pub(crate) calls: Vec<WireCall>,
    /// As agentry counts it: `tokens_in` is the whole prompt, cached tokens
    /// included.
    pub(crate) usage: TokenUsage,
    /// Why the model stopped, as the server said.
    pub(crate) finish_reason: Option<String>,
    /// The response's id and model, as the server named them (for its span).
    pub(crate) response_id: Option<String>,
    pub(crate) response_model: Option<String>,
}

impl Reply {
    /// The decision: the calls (canonical names, the arguments' text as
    /// sent), else the text, else a non-fatal failure the model sees.
    pub(crate) fn into_decision<W: Wire>(self, names: &ToolNameMap) -> Decision {
        if !self.calls.is_empty() {
            let calls = self
                .calls
                .into_iter()
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
                    "{}: the model answered with neither text nor a tool call ({} {:?})",
                    W::PROVIDER.name(),
                    W::STOP_FIELD,
                    self.finish_reason
                ),
                fatal: false,
            };
        }
        Decision::Final { answer: self.text }
    }
}

impl span::Answered for Reply {
    fn response(&self) -> span::Response<'_> {
        span::Response {
            id: self.response_id.as_deref(),
            model: self.response_model.as_deref(),
            finish_reason: self.finish_reason.as_deref(),
            usage: self.usage,
        }
    }
}
