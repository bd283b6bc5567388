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
//! retried with backoff under a budget, 401/403 and a certificate that does not
//! verify stop the run, anything else is a non-fatal
//! [`Decision::Failed`](agentry_protocol::Decision::Failed).
//!
//! A [`FallbackPolicy`] holds several adapters in order: a turn whose server is
//! unavailable after its retries goes to the next model, and the output names
//! the model that decided. Anthropic requests mark the system prompt and the
//! tool list for the prompt cache ([`ModelConfig::prompt_cache`]); the cache
//! reads and writes both providers report are part of the turn's usage, and
//! priced ([`Prices`]).
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
//! - `turn`: one model turn for every provider (`ModelAdapter<W>`: preflight,
//!   compaction, projection, the request in its span with its retries, usage
//!   and money).
//! - `wire`: what a provider does its own way (the `Wire` trait: request
//!   bodies, endpoint and headers, reading a reply) and the reply it reads.
//! - `openai`, `anthropic`: each provider's wire: request projection (pure,
//!   unit-tested) and stream assembly; the public adapters over `turn`.
//! - `openai_wire`: the OpenAI-compatible reply and chunk shapes.
//! - `gate`: [`ModelGate`], limits shared by every run on one named model.
//! - `chain`: [`FallbackPolicy`], models tried in order when a server is unavailable.
//! - `provider`: [`connect`], [`connect_chain`] and the child factories, which pick the adapter.
//! - `tls`: the HTTP client (roots, extra CAs) and TLS failure detection.
//!
//! # TLS and proxies
//! `https://` base URLs are spoken over rustls (no OpenSSL), with ring as the
//! crypto provider: [`install_crypto_provider`] installs it as the process
//! default unless the program installed one first. Trusted roots are the
//! operating system's (rustls-platform-verifier; on Linux its CA bundle, or the
//! one `SSL_CERT_FILE` / `SSL_CERT_DIR` name instead, as OpenSSL, curl and
//! Python read them), plus the CAs of `SSL_CERT_FILE` and of
//! [`ModelConfig::ca_cert`]. A CA file that cannot be read or holds no PEM
//! certificate is a [`ModelError::CaCert`] when the adapter is built. A
//! certificate that does not verify is a [`ModelError::Tls`] at [`connect`]
//! (naming the host and rustls' reason), and a fatal failed turn if it happens
//! mid-run: never retried. Proxies: `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and
//! `NO_PROXY` (and their lower-case forms) are honoured, as curl reads them.
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
mod chain;
mod compaction;
mod config;
pub mod context;
mod conversation;
mod error;
mod gate;
mod ids;
mod names;
mod openai;
mod openai_wire;
mod prompt;
mod provider;
mod results;
mod span;
#[cfg(test)]
mod stream_props;
mod tls;
mod transport;
mod turn;
pub mod window;
mod wire;

pub use agentry_policy::Policy;
pub use agentry_tls::install_crypto_provider;
pub use anthropic::{AnthropicPolicy, build_anthropic_request};
pub use chain::{ChainModel, FallbackPolicy};
pub use compaction::SUMMARIZE_AT_PERCENT;
pub use config::{CompactionMode, ModelConfig, Prices, Provider, RetryConfig, TextReply};
pub use error::ModelError;
pub use gate::{GateLimits, GateUsage, ModelGate, SharedInFlight, SharedPass};
pub use names::ToolNameMap;
pub use openai::{OpenAiPolicy, build_openai_messages};
pub use provider::{
    ConnectedChain, chain_policy_factory, child_policy_factory, connect, connect_chain,
};
pub use window::{ContextWindow, WindowSource};
