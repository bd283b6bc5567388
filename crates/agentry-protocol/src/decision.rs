//! What a policy proposes for one step.

use serde::{Deserialize, Serialize};

use crate::tool::ToolCall;

/// Token usage reported by a model turn.
///
/// `tokens_in` is the whole prompt, however the provider served it: the cache
/// counts say how many of those tokens were read from, or written to, the
/// provider's prompt cache. So the token budget charges every prompt token
/// once, cached or not, and only the price differs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens, cached ones included.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Of `tokens_in`, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `tokens_in`, those written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

impl TokenUsage {
    /// Whether the turn reported no tokens at all.
    pub fn is_empty(&self) -> bool {
        *self == TokenUsage::default()
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The policy's proposal for one step. Only this part of a step belongs to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Decision {
    /// One or more tool calls; results come back keyed by call id, in this order.
    ToolCalls {
        /// The calls, in request order.
        calls: Vec<ToolCall>,
    },
    /// A final text answer. The host runs the acceptance checks before calling it `done`.
    Final {
        /// The answer text.
        answer: String,
    },
    /// The policy failed to produce a decision (model timeout, unparseable output).
    /// Non-fatal failures become an observation the next step can correct.
    Failed {
        /// What went wrong.
        message: String,
        /// When true the run stops with `unrecoverable_error`.
        fatal: bool,
    },
}

/// A decision plus what producing it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyOutput {
    /// The decision.
    pub decision: Decision,
    /// Tokens the model used for this turn.
    #[serde(default)]
    pub usage: TokenUsage,
    /// Money the model turn cost, in micro-units.
    #[serde(default)]
    pub cost_micros: u64,
    /// Model name, for the trace.
    #[serde(default)]
    pub model: String,
    /// Hash of the prompt the model saw, for the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_hash: Option<String>,
    /// Older session entries the policy summarized this turn, for the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
}

/// Older session entries a model adapter summarized, to send the summary in
/// their place from then on (`[policy] compaction = "summarize"`). The session
/// keeps them whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    /// The summary the model wrote.
    pub summary: String,
    /// The first session entry it stands for (the goal before it is sent as is).
    pub from: u64,
    /// One past the last session entry it stands for.
    pub to: u64,
    /// What the summary request used; included in the step's usage.
    pub usage: TokenUsage,
}

impl PolicyOutput {
    /// A decision with no token usage.
    pub fn new(decision: Decision, model: impl Into<String>) -> Self {
        PolicyOutput {
            decision,
            usage: TokenUsage::default(),
            cost_micros: 0,
            model: model.into(),
            prompt_hash: None,
            compaction: None,
        }
    }
}
