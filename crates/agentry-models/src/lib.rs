//! Model adapters for agentry: a real model behind the [`Policy`] seam.
//!
//! Two providers prove the seam is provider-neutral:
//! - [`OpenAiPolicy`]: OpenAI-compatible Chat Completions (`POST {base}/chat/completions`),
//!   which OpenAI itself and local servers (llama.cpp, vLLM, Ollama, LM Studio) speak.
//! - [`AnthropicPolicy`]: Anthropic Messages (`POST {base}/v1/messages`).
//!
//! Both stream (SSE, framed by `eventsource-stream`), map agentry's dotted tool
//! names to wire names reversibly ([`ToolNameMap`]), pass the model's argument
//! text through untouched (the executor answers `EINVAL` on broken JSON), charge
//! token usage, and turn every transport failure into data: 429/5xx/stalls are
//! retried with backoff under a budget, 401/403 stop the run, anything else is a
//! non-fatal [`Decision::Failed`](agentry_protocol::Decision::Failed).
//!
//! # Layout
//! - `config`: [`ModelConfig`], [`RetryConfig`], [`Provider`] and env-key lookup.
//! - [`context`]: which session entries a request carries under a context budget.
//! - `names`: the reversible tool-name mapping.
//! - `transport`: HTTP status classification, retries, the stall-aware SSE reader.
//! - `openai`, `anthropic`: request projection (pure, unit-tested) and stream assembly.
//!
//! # TLS
//! This crate compiles reqwest without a TLS backend to keep the build lean:
//! base URLs must be `http://` (a local server, or a TLS-terminating proxy in front
//! of a hosted API). An `https://` URL is refused at construction with a clear error.
//!
//! # Example
//! ```no_run
//! use agentry_models::{ModelConfig, OpenAiPolicy, Provider};
//! # fn main() -> Result<(), agentry_models::ModelError> {
//! let config = ModelConfig::from_env(Provider::OpenAi, "qwen2.5", Some("http://127.0.0.1:8080/v1"))?;
//! let policy = OpenAiPolicy::new(config)?;
//! # let _ = policy; Ok(()) }
//! ```

mod anthropic;
mod config;
pub mod context;
mod error;
mod names;
mod openai;
mod transport;

pub use agentry_policy::Policy;
pub use anthropic::{AnthropicPolicy, build_anthropic_request};
pub use config::{ModelConfig, Prices, Provider, RetryConfig, TextReply};
pub use error::ModelError;
pub use names::ToolNameMap;
pub use openai::{OpenAiPolicy, build_openai_messages};

/// Builds the policy for `provider` and checks, before any run starts, that its
/// server answers at all (an unreachable server is an error here, not mid-run).
pub async fn connect(
    provider: Provider,
    config: ModelConfig,
) -> Result<Box<dyn Policy>, ModelError> {
    match provider {
        Provider::OpenAi => {
            let p = OpenAiPolicy::new(config)?;
            p.probe().await?;
            Ok(Box::new(p))
        }
        Provider::Anthropic => {
            let p = AnthropicPolicy::new(config)?;
            p.probe().await?;
            Ok(Box::new(p))
        }
    }
}

/// A factory for the runtime's child agents (`agent.spawn` without an inline
/// script): each child gets its own adapter for the same model, sharing one HTTP
/// client. Checks the configuration now; sends nothing.
pub fn child_policy_factory(
    provider: Provider,
    config: ModelConfig,
) -> Result<agentry_policy::ChildPolicyFactory, ModelError> {
    Ok(match provider {
        Provider::OpenAi => {
            let prototype = OpenAiPolicy::new(config)?;
            std::sync::Arc::new(move |_| Some(Box::new(prototype.clone()) as Box<dyn Policy>))
        }
        Provider::Anthropic => {
            let prototype = AnthropicPolicy::new(config)?;
            std::sync::Arc::new(move |_| Some(Box::new(prototype.clone()) as Box<dyn Policy>))
        }
    })
}

/// The default system prompt: the goal, and how to finish.
pub(crate) fn system_prompt(goal: &str, names: &ToolNameMap) -> String {
    let finish = names.wire("task.finish");
    format!(
        "You are an agent that reaches a goal by calling tools.\n\
         Goal: {goal}\n\
         Call tools to make progress; each tool result comes back as JSON. When the \
         goal is met, call `{finish}` with your answer and evidence, or reply with the \
         answer as plain text."
    )
}
