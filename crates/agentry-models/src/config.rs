//! Adapter configuration: endpoint, key, limits, retry budget.

use std::path::PathBuf;
use std::time::Duration;

use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::{Decision, PolicyOutput, TokenUsage};

use crate::ModelError;
use crate::window::ContextWindow;

/// What to do with older turns that no longer fit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CompactionMode {
    /// Leave them out, with a note saying how many (the default).
    #[default]
    Elide,
    /// Ask the model to summarize them once the session passes
    /// [`SUMMARIZE_AT_PERCENT`](crate::SUMMARIZE_AT_PERCENT) of what a request may carry.
    Summarize,
}

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

    /// The provider's hosted endpoint (over TLS; see the crate docs).
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

/// Prices per million tokens, in micro-units of the run's currency, so a model
/// turn's money is charged to the budget.
///
/// Prompt tokens served from the provider's cache are billed at their own
/// prices. When those are not set, they follow the input price by the
/// provider's published rules: Anthropic bills cache writes at 1.25× and cache
/// reads at 0.1× the input price; OpenAI has no cache writes and bills cached
/// reads at a discount of 50% or more depending on the model, so 0.5× is
/// assumed (it never charges the budget less than the bill).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Prices {
    /// Per million input (prompt) tokens not served from the cache.
    pub input_micros_per_mtok: u64,
    /// Per million output (completion) tokens.
    pub output_micros_per_mtok: u64,
    /// Per million prompt tokens read from the cache; `None`: by the provider's
    /// rule from the input price (see above).
    pub cache_read_micros_per_mtok: Option<u64>,
    /// Per million prompt tokens written to the cache; `None`: by the
    /// provider's rule from the input price (see above).
    pub cache_write_micros_per_mtok: Option<u64>,
}

/// A price as a multiple of the input price, in percent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CacheRates {
    read_percent: u64,
    write_percent: u64,
}

impl Provider {
    /// How the provider prices cached prompt tokens against uncached ones.
    fn cache_rates(self) -> CacheRates {
        match self {
            Provider::Anthropic => CacheRates {
                read_percent: 10,
                write_percent: 125,
            },
            // OpenAI reports no cache writes; its writes are plain input.
            Provider::OpenAi => CacheRates {
                read_percent: 50,
                write_percent: 100,
            },
        }
    }
}

impl Prices {
    /// The cost of a turn of `provider`, rounded up to a whole micro-unit per
    /// kind of token (uncached input, cache reads, cache writes, output).
    pub fn cost_micros(&self, provider: Provider, usage: &TokenUsage) -> u64 {
        // Prices in hundredths of a micro-unit per million tokens, so that
        // 1.25× and 0.1× of any input price stay exact.
        let rates = provider.cache_rates();
        let own = |price: Option<u64>, percent: u64| {
            price.map_or(
                u128::from(self.input_micros_per_mtok) * u128::from(percent),
                |p| u128::from(p) * 100,
            )
        };
        let part = |tokens: u64, centi_price: u128| {
            let centi = u128::from(tokens) * centi_price;
            u64::try_from(centi.div_ceil(100_000_000)).unwrap_or(u64::MAX)
        };
        let cached = usage
            .cache_read_tokens
            .saturating_add(usage.cache_write_tokens);
        let uncached = usage.tokens_in.saturating_sub(cached);
        part(uncached, u128::from(self.input_micros_per_mtok) * 100)
            .saturating_add(part(
                usage.cache_read_tokens,
                own(self.cache_read_micros_per_mtok, rates.read_percent),
            ))
            .saturating_add(part(
                usage.cache_write_tokens,
                own(self.cache_write_micros_per_mtok, rates.write_percent),
            ))
            .saturating_add(part(
                usage.tokens_out,
                u128::from(self.output_micros_per_mtok) * 100,
            ))
    }
}

/// What a reply with text and no tool call means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TextReply {
    /// The text is the final answer (acceptance checks then decide `done`).
    #[default]
    Answer,
    /// The model is told, as a non-fatal failure it sees next turn, to call
    /// `task.finish` with its answer and evidence.
    RequireFinish,
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
    /// Token prices; `None` charges no money.
    pub prices: Option<Prices>,
    /// What a text-only reply means.
    pub text_reply: TextReply,
    /// The model's context window, in tokens, its output included: every request
    /// is projected to fit it less `max_output_tokens` (see [`crate::context`]).
    /// `None`: the built-in table's window for the model, else
    /// [`DEFAULT_CONTEXT_TOKENS`](crate::window::DEFAULT_CONTEXT_TOKENS) (see
    /// [`ModelConfig::window`]).
    pub context_tokens: Option<u64>,
    /// Mark the stable prefix of each request (system prompt, tool list) for
    /// the provider's prompt cache where the request must say so (Anthropic's
    /// `cache_control`); OpenAI caches on its own. Default: on.
    pub prompt_cache: bool,
    /// A PEM file of CA certificates trusted besides the system's roots and
    /// `SSL_CERT_FILE`'s (`[policy] ca_cert`); read and checked when the
    /// client is built.
    pub ca_cert: Option<PathBuf>,
    /// Results longer than this, in bytes of JSON, are shown to the model cut,
    /// with a ref to read the rest (see the crate's `results` module).
    pub result_cap: usize,
    /// What happens to older turns that no longer fit: elided (the default) or
    /// summarized by the model (see the crate's `compaction` module).
    pub compaction: CompactionMode,
    /// Limits shared with every other run on the same named model (requests
    /// in flight, per-minute budgets, a provider's `Retry-After` holding all
    /// of them back); `None`: this run's requests alone.
    pub gate: Option<std::sync::Arc<crate::ModelGate>>,
    /// The name the operator gave this model (`agentry serve`'s
    /// `[models.NAME]`): the policy's name, in traces, spans and the step
    /// records, is then `NAME (provider:model)`; `None`: `provider:model`.
    pub label: Option<String>,
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
            prices: None,
            text_reply: TextReply::default(),
            context_tokens: None,
            prompt_cache: true,
            ca_cert: None,
            result_cap: agentry_protocol::envelope::DEFAULT_RESULT_CAP,
            compaction: CompactionMode::default(),
            gate: None,
            label: None,
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

    /// Sets token prices.
    pub fn prices(mut self, prices: Prices) -> Self {
        self.prices = Some(prices);
        self
    }

    /// Sets the context window, in tokens.
    pub fn context_tokens(mut self, tokens: u64) -> Self {
        self.context_tokens = Some(tokens);
        self
    }

    /// Turns prompt-cache marks on or off.
    pub fn prompt_cache(mut self, on: bool) -> Self {
        self.prompt_cache = on;
        self
    }

    /// Trusts the CA certificates of this PEM file too (see [`ModelConfig::ca_cert`]).
    pub fn ca_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_cert = Some(path.into());
        self
    }

    /// Sets what happens to older turns that no longer fit.
    pub fn compaction(mut self, mode: CompactionMode) -> Self {
        self.compaction = mode;
        self
    }

    /// Sets the per-result cap, in bytes.
    pub fn result_cap(mut self, bytes: usize) -> Self {
        self.result_cap = bytes;
        self
    }

    /// The context window requests are fitted to, and where it came from;
    /// `set_by` names what set `context_tokens` (a field or a flag). A window
    /// that does not exceed the reserved output is an error naming `set_by`.
    pub fn window(&self, set_by: &str) -> Result<ContextWindow, ModelError> {
        let window = ContextWindow::resolve(&self.model, self.context_tokens.map(|t| (t, set_by)));
        let reserved = u64::from(self.max_output_tokens);
        if window.tokens <= reserved {
            return Err(ModelError::WindowTooSmall {
                field: set_by.to_string(),
                tokens: window.tokens,
                reserved,
            });
        }
        Ok(window)
    }

    /// The window's tokens, for fitting a request.
    pub(crate) fn window_tokens(&self) -> u64 {
        self.context_tokens
            .unwrap_or_else(|| ContextWindow::resolve(&self.model, None).tokens)
    }

    /// Sets what a text-only reply means.
    pub fn text_reply(mut self, text_reply: TextReply) -> Self {
        self.text_reply = text_reply;
        self
    }

    /// Checks the budget before a request: `Err` (a fatal failure, nothing sent)
    /// when the output tokens a request reserves do not fit in the tokens left;
    /// otherwise the timeout for this turn, cut to the time left before the
    /// deadline so the request cannot outlive the run.
    pub(crate) fn preflight(&self, budget: &BudgetSnapshot) -> Result<Duration, Decision> {
        let reserve = u64::from(self.max_output_tokens);
        if let Some(left) = budget.remaining.tokens_left
            && left < reserve
        {
            return Err(Decision::Failed {
                message: format!(
                    "token budget: {left} tokens left, fewer than the {reserve} output tokens a model request reserves; request not sent"
                ),
                fatal: true,
            });
        }
        Ok(match budget.remaining.wall_ms_left {
            Some(ms) => self.request_timeout.min(Duration::from_millis(ms.max(1))),
            None => self.request_timeout,
        })
    }

    /// Fills in money and applies [`TextReply`] to a finished turn of `provider`.
    pub(crate) fn finish(&self, mut out: PolicyOutput, provider: Provider) -> PolicyOutput {
        if let Some(p) = self.prices {
            out.cost_micros = p.cost_micros(provider, &out.usage);
        }
        if self.text_reply == TextReply::RequireFinish
            && let Decision::Final { answer } = &out.decision
        {
            out.decision = Decision::Failed {
                message: format!(
                    "you replied with text and no tool call ({:?}); call task.finish with your answer and evidence",
                    answer.chars().take(200).collect::<String>()
                ),
                fatal: false,
            };
        }
        out
    }

    /// Checks the URL and the CA files, and builds the HTTP client.
    pub(crate) fn client(&self) -> Result<reqwest::Client, ModelError> {
        let bad = |reason: String| ModelError::BadUrl {
            url: self.base_url.clone(),
            reason,
        };
        let url = reqwest::Url::parse(&self.base_url).map_err(|e| bad(e.to_string()))?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("it must start with https:// or http://".into())),
        };
        crate::tls::client(crate::tls::ClientSpec {
            base_url: &self.base_url,
            https,
            ca_cert: self.ca_cert.as_deref(),
            connect_timeout: self.connect_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(tokens_in: u64, tokens_out: u64, read: u64, write: u64) -> TokenUsage {
        TokenUsage {
            tokens_in,
            tokens_out,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }

    #[test]
    fn prices_round_up_per_dimension() {
        let p = Prices {
            input_micros_per_mtok: 150_000,
            output_micros_per_mtok: 600_000,
            ..Prices::default()
        };
        let cost = |i, o| p.cost_micros(Provider::OpenAi, &usage(i, o, 0, 0));
        assert_eq!(cost(0, 0), 0);
        // 10 input tokens cost 1.5 micro-units: charged as 2.
        assert_eq!(cost(10, 0), 2);
        assert_eq!(cost(1_000_000, 1_000_000), 750_000);
    }

    #[test]
    fn cached_tokens_cost_the_provider_rates_of_the_input_price_unless_priced() {
        // $3 / $15 per million, as Anthropic prices a mid-size model.
        let p = Prices {
            input_micros_per_mtok: 3_000_000,
            output_micros_per_mtok: 15_000_000,
            ..Prices::default()
        };
        // 1M prompt tokens: 200k uncached, 500k read (0.1×), 300k written (1.25×).
        let u = usage(1_000_000, 0, 500_000, 300_000);
        let anthropic = 600_000 + 150_000 + 1_125_000;
        assert_eq!(p.cost_micros(Provider::Anthropic, &u), anthropic);
        // OpenAI: reads at 0.5×, its (never reported) writes at 1×.
        assert_eq!(
            p.cost_micros(Provider::OpenAi, &u),
            600_000 + 750_000 + 900_000
        );
        // Configured cache prices win over the rule.
        let priced = Prices {
            cache_read_micros_per_mtok: Some(1_000_000),
            cache_write_micros_per_mtok: Some(2_000_000),
            ..p
        };
        assert_eq!(
            priced.cost_micros(Provider::Anthropic, &u),
            600_000 + 500_000 + 600_000
        );
        // Output is charged beside them; each kind rounds up on its own: 1 read
        // token at 0.3 micro-units per token is charged 1.
        assert_eq!(
            p.cost_micros(Provider::Anthropic, &usage(1, 1_000, 1, 0)),
            1 + 15_000
        );
        // No cache tokens: exactly the plain prices.
        assert_eq!(
            p.cost_micros(Provider::Anthropic, &usage(2_000, 1_000, 0, 0)),
            6_000 + 15_000
        );
    }

    #[test]
    fn specs_name_provider_and_model() {
        assert!(matches!(
            Provider::parse_spec("openai:gpt-4o"),
            Some(Ok((Provider::OpenAi, m))) if m == "gpt-4o"
        ));
        assert!(matches!(Provider::parse_spec("anthropic:"), Some(Err(_))));
        assert!(Provider::parse_spec("script:x.json").is_none());
    }

    #[test]
    fn odd_urls_are_refused_up_front_and_https_is_built() {
        assert!(matches!(
            ModelConfig::new("m", "ftp://x").client(),
            Err(ModelError::BadUrl { .. })
        ));
        assert!(matches!(
            ModelConfig::new("m", "not a url").client(),
            Err(ModelError::BadUrl { .. })
        ));
        assert!(
            ModelConfig::new("m", "http://127.0.0.1:1/v1/")
                .client()
                .is_ok()
        );
        assert!(
            ModelConfig::new("m", "https://api.openai.com/v1")
                .client()
                .is_ok()
        );
    }
}
