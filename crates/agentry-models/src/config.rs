//! Adapter configuration: endpoint, key, limits, retry budget.

use std::time::Duration;

use crate::ModelError;

/// Which wire protocol a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI-compatible Chat Completions.
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// Parses `openai:MODEL` / `anthropic:MODEL`; `None` for other schemes (e.g. `script:`).
    pub fn parse_spec(spec: &str) -> Option<Result<(Provider, String), ModelError>> {
        let (scheme, model) = spec.split_once(':')?;
        let provider = match scheme {
            "openai" => Provider::OpenAi,
            "anthropic" => Provider::Anthropic,
            _ => return None,
        };
        if model.trim().is_empty() {
            return Some(Err(ModelError::BadSpec {
                spec: spec.to_string(),
                reason: format!("no model name after `{scheme}:`"),
            }));
        }
        Some(Ok((provider, model.to_string())))
    }

    /// The short name used in traces and errors.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The environment variable holding the API key.
    pub fn key_var(self) -> &'static str {
        match self {
            Provider::OpenAi => "OPENAI_API_KEY",
            Provider::Anthropic => "ANTHROPIC_API_KEY",
        }
    }

    /// The provider's hosted endpoint (needs TLS; see the crate docs).
    pub fn default_base_url(self) -> &'static str {
        match self {
            Provider::OpenAi => "https://api.openai.com/v1",
            Provider::Anthropic => "https://api.anthropic.com",
        }
    }
}

/// How transient failures (429, 5xx, connection errors, stalls) are retried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryConfig {
    /// Retries after the first attempt, per decision.
    pub max_retries: u32,
    /// First backoff; doubles per retry, with full jitter.
    pub base_delay: Duration,
    /// Longest single wait, including a server's `Retry-After`; a server asking
    /// for longer gets a non-fatal failure instead of a hung run.
    pub max_delay: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// Everything an adapter needs to reach its model.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// Model name sent to the server.
    pub model: String,
    /// Base URL: `…/v1` for OpenAI-compatible servers, the host root for Anthropic.
    pub base_url: String,
    /// API key, sent as a bearer token (OpenAI) or `x-api-key` (Anthropic).
    pub api_key: Option<String>,
    /// Output tokens reserved per request (`max_tokens`).
    pub max_output_tokens: u32,
    /// Connection timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout, streaming included.
    pub request_timeout: Duration,
    /// A stream with no bytes for this long is abandoned (and retried).
    pub stall_timeout: Duration,
    /// Retry budget.
    pub retry: RetryConfig,
}

impl ModelConfig {
    /// A configuration with defaults: 1024 output tokens, 10 s connect, 300 s
    /// request, 60 s stall timeouts, default retries, no key.
    pub fn new(model: impl Into<String>, base_url: impl Into<String>) -> Self {
        ModelConfig {
            model: model.into(),
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: None,
            max_output_tokens: 1024,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            stall_timeout: Duration::from_secs(60),
            retry: RetryConfig::default(),
        }
    }

    /// Reads the key from the provider's environment variable; a missing or empty
    /// one is an error naming the variable. `base_url` defaults to the hosted API.
    pub fn from_env(
        provider: Provider,
        model: impl Into<String>,
        base_url: Option<&str>,
    ) -> Result<Self, ModelError> {
        let key = std::env::var(provider.key_var())
            .ok()
            .filter(|k| !k.trim().is_empty())
            .ok_or(ModelError::MissingKey {
                provider: provider.name(),
                var: provider.key_var(),
            })?;
        let base = base_url.unwrap_or(provider.default_base_url());
        Ok(ModelConfig::new(model, base).api_key(key))
    }

    /// Sets the API key.
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into());
        self
    }

    /// Sets the stall timeout.
    pub fn stall_timeout(mut self, timeout: Duration) -> Self {
        self.stall_timeout = timeout;
        self
    }

    /// Sets the retry budget.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// Checks the URL and builds the HTTP client.
    pub(crate) fn client(&self) -> Result<reqwest::Client, ModelError> {
        let url = &self.base_url;
        if url.starts_with("https://") {
            return Err(ModelError::TlsUnavailable { url: url.clone() });
        }
        if !url.starts_with("http://") {
            return Err(ModelError::BadUrl {
                url: url.clone(),
                reason: "it must start with http://".into(),
            });
        }
        Ok(reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .build()?)
    }
}
