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
//! - [`window`]: the model's context window (configured, a table of model
//!   families, or a default).
//! - [`context`]: which session entries a request carries so that it fits the window.
//! - `results`: a large tool result shown as its head and a ref to read the rest.
//! - `compaction`: older turns summarized by the model (`CompactionMode::Summarize`).
//! - `conversation`: the session as a conversation every provider accepts (failed
//!   turns as host notes, each call answered right after it, no empty content).
//! - `names`: the reversible tool-name mapping.
//! - `transport`: HTTP status classification, retries, the stall-aware SSE reader.
//! - `prompt`: the default system prompt both providers send.
//! - `openai`, `anthropic`: request projection (pure, unit-tested) and stream assembly.
//! - `provider`: [`connect`] and [`child_policy_factory`], which pick the adapter.
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
mod compaction;
mod config;
pub mod context;
mod conversation;
mod error;
mod names;
mod openai;
mod prompt;
mod provider;
mod results;
mod transport;
pub mod window;

pub use agentry_policy::Policy;
pub use anthropic::{AnthropicPolicy, build_anthropic_request};
pub use compaction::{CompactionMode, SUMMARIZE_AT_PERCENT};
pub use config::{ModelConfig, Prices, Provider, RetryConfig, TextReply};
pub use error::ModelError;
pub use names::ToolNameMap;
pub use openai::{OpenAiPolicy, build_openai_messages};
pub use provider::{child_policy_factory, connect};
pub use window::{ContextWindow, WindowSource};
