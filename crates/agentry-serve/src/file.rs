//! serve.toml: the service's address, its tokens, the operator's agents and
//! the models they run on. Every table refuses keys it does not know, and
//! every error names the key at fault (`agents.support.model`), as
//! `path: key: message`.
//!
//! ```toml
//! [serve]
//! addr = "127.0.0.1:8080"
//! webhook_hosts = ["hooks.example.com"]   # where a run's "webhook" may point
//! webhook_secret_env = "AGENTRY_WEBHOOK_SECRET"  # whsec_… signing secret
//! retention = "7d"                # stopped runs removed after this
//! drain_timeout = "30s"           # on SIGTERM, for running steps to finish
//! hibernate_after = "30s"         # an event-driven run asleep this long leaves memory; "off"
//! workdir_root = "/srv/agentry/runs"  # runs' working directories (shared storage in a cluster)
//!
//! [auth]
//! tokens_file = "tokens"          # TENANT SHA256-HEX per line
//!
//! [agents.support]
//! task = "tasks/support"          # a task directory, as `agentry run` takes it
//! model = "local"                 # optional: else the task's own [policy]
//!
//! [models.local]
//! provider = "openai"             # or "anthropic"
//! model = "qwen2.5-7b-instruct"
//! base_url = "http://127.0.0.1:8081/v1"
//! api_key_env = "LOCAL_KEY"       # the key comes from this variable only
//! ca_cert = "ca.pem"
//! context_tokens = 32768
//! fallback = ["hosted"]           # other [models.*], tried in order
//! max_concurrent = 4              # limits shared by every run on the model
//! requests_per_minute = 60
//! tokens_per_minute = 100000
//! input_price = 0.15              # per million tokens, in max_cost's unit
//! output_price = 0.6
//!
//! [tenants.acme]                  # a tenant of the tokens file
//! max_running = 2
//! max_cost_per_day = 5.0          # in max_cost's unit, per UTC day
//!
//! [telemetry]
//! otlp = "http://127.0.0.1:4318/v1/traces"  # span export (OTLP/HTTP)
//! metrics = true                  # GET /metrics
//! ```
//!
//! `[serve]` also takes `max_running` and `max_queued`, and the HTTP
//! guard's limits (`max_message_bytes`, `header_timeout`, `max_connections`,
//! ...: [`LimitSettings`]); see `docs/src/serve.md`.
//!
//! Relative paths are relative to the directory of serve.toml.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use key_at::key_at;

use serde::Deserialize;

use super::config::LimitSettings;
use super::error::ServeError;

/// serve.toml, parsed and checked; paths made relative to its directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServeFile {
    /// `[serve]`.
    pub serve: ServeSection,
    /// `[auth]`.
    pub auth: AuthSection,
    /// `[agents.NAME]`, by name.
    pub agents: BTreeMap<String, AgentEntry>,
    /// `[models.NAME]`, by name.
    pub models: BTreeMap<String, ModelEntry>,
    /// `[tenants.NAME]`, by tenant name (as in the tokens file).
    pub tenants: BTreeMap<String, TenantEntry>,
    /// `[telemetry]`.
    pub telemetry: TelemetrySection,
}

/// `[serve]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// The address to listen on (`--addr` wins).
    pub addr: Option<SocketAddr>,
    /// Hosts a run's `webhook` URL may name (`host` or `host:port`); none:
    /// a request with a webhook is refused.
    #[serde(default)]
    pub webhook_hosts: Vec<String>,
    /// The environment variable holding the webhooks' signing secret
    /// (`whsec_…`); needed when `webhook_hosts` is set.
    pub webhook_secret_env: Option<String>,
    /// Stopped runs older than this are removed (humantime: `"7d"`, `"12h"`).
    #[serde(default, deserialize_with = "duration")]
    pub retention: Option<Duration>,
    /// On SIGTERM, how long running steps may take to finish before what is
    /// left is stopped as a crash would stop it (`"30s"`; default
    /// [`DEFAULT_DRAIN_TIMEOUT`]).
    #[serde(default, deserialize_with = "duration")]
    pub drain_timeout: Option<Duration>,
    /// Runs holding a slot (started and not stopped) at once; past it new
    /// runs wait in a FIFO queue. Default: no limit.
    pub max_running: Option<u32>,
    /// Runs waiting for a slot; past it `POST /runs` is 429. Default 100.
    pub max_queued: Option<u32>,
    /// How long an event-driven run sleeps before it hibernates (`"30s"`,
    /// the default; `"off"` never): see [`ServeSection::hibernate_after`].
    pub hibernate_after: Option<String>,
    /// The HTTP guard's limits, by the names of [`LimitSettings`] (see
    /// [`ServeSection::limit_settings`]); unset, [`crate::Limits::default`].
    pub max_message_bytes: Option<u64>,
    /// See `max_message_bytes`.
    pub max_create_bytes: Option<u64>,
    /// See `max_message_bytes`.
    pub max_run_input_bytes: Option<u64>,
    /// See `max_message_bytes`.
    pub inbox_capacity: Option<u64>,
    /// See `max_message_bytes` (`"10s"`).
    #[serde(default, deserialize_with = "duration")]
    pub header_timeout: Option<Duration>,
    /// See `max_message_bytes` (`"30s"`).
    #[serde(default, deserialize_with = "duration")]
    pub body_timeout: Option<Duration>,
    /// See `max_message_bytes`.
    pub max_connections: Option<u32>,
    /// See `max_message_bytes`; below `max_connections`.
    pub max_streams: Option<u32>,
    /// See `max_message_bytes`.
    pub max_streams_per_run: Option<u32>,
    /// See `max_message_bytes`.
    pub replay_bytes: Option<u64>,
    /// See `max_message_bytes`.
    pub stopped_replay_bytes: Option<u64>,
    /// See `max_message_bytes`.
    pub keep_stopped: Option<usize>,
    /// Where runs' working directories are made (relative to serve.toml's
    /// directory); default: the private temp directory. In a cluster, a
    /// directory every node reaches (shared storage, or one machine): a node
    /// takes a run over only if it can reach the run's directory.
    pub workdir_root: Option<PathBuf>,
    /// The `a2a = true` agent whose card `/.well-known/agent-card.json` serves.
    pub a2a_default: Option<String>,
}

/// How long a drain waits for running steps when serve.toml does not say.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// `[telemetry]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// Export spans over OTLP/HTTP to this collector (as `agentry run
    /// --otlp URL`).
    pub otlp: Option<String>,
    /// Serve `GET /metrics` (Prometheus, counted from the runs' spans).
    #[serde(default)]
    pub metrics: bool,
}

/// A humantime duration (`"7d"`), positive.
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = String::deserialize(d)?;
    match humantime::parse_duration(&text) {
        Ok(value) if !value.is_zero() => Ok(Some(value)),
        Ok(_) => Err(serde::de::Error::custom("must be longer than zero")),
        Err(e) => Err(serde::de::Error::custom(format!(
            "{text:?}: expected a duration such as \"7d\" or \"12h\" ({e})"
        ))),
    }
}

/// How long an event-driven run sleeps before it hibernates when serve.toml
/// does not say.
pub const DEFAULT_HIBERNATE_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

impl ServeSection {
    /// `[serve] hibernate_after`: `None` for `"off"`, the default when unset
    /// (checked when the file is parsed).
    pub fn hibernate_after(&self) -> Option<std::time::Duration> {
        match self.hibernate_after.as_deref() {
            None => Some(DEFAULT_HIBERNATE_AFTER),
            Some(text) => parse_hibernate_after(text).ok().flatten(),
        }
    }
}

impl ServeSection {
    /// The HTTP guard's limits as given here (checked when the file is parsed).
    pub fn limit_settings(&self) -> LimitSettings {
        LimitSettings {
            max_message_bytes: self.max_message_bytes,
            max_create_bytes: self.max_create_bytes,
            max_run_input_bytes: self.max_run_input_bytes,
            inbox_capacity: self.inbox_capacity,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            max_connections: self.max_connections,
            max_streams: self.max_streams,
            max_streams_per_run: self.max_streams_per_run,
            replay_bytes: self.replay_bytes,
            stopped_replay_bytes: self.stopped_replay_bytes,
            keep_stopped: self.keep_stopped,
        }
    }
}

fn parse_hibernate_after(text: &str) -> Result<Option<std::time::Duration>, String> {
    if text.trim() == "off" {
        return Ok(None);
    }
    match humantime::parse_duration(text.trim()) {
        Ok(d) if d.is_zero() => Err("must be positive (or \"off\")".into()),
        Ok(d) => Ok(Some(d)),
        Err(e) => Err(format!(
            "{text:?}: {e} (a duration such as \"30s\", or \"off\")"
        )),
    }
}

/// `[auth]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// One `TENANT SHA256-HEX` per line.
    pub tokens_file: Option<PathBuf>,
}

/// `[agents.NAME]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    /// The task directory.
    pub task: PathBuf,
    /// A `[models.NAME]`; without it the task's own `[policy]` applies.
    pub model: Option<String>,
    /// Published as an A2A 1.0 agent (its card and JSON-RPC endpoint under
    /// `/a2a/NAME`).
    #[serde(default)]
    pub a2a: bool,
}

/// `[models.NAME]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// `openai` (any OpenAI-compatible server) or `anthropic`.
    pub provider: String,
    /// The model name sent to the server.
    pub model: String,
    /// The server; default the provider's hosted API.
    pub base_url: Option<String>,
    /// The environment variable holding the key; none sends no key.
    pub api_key_env: Option<String>,
    /// A CA file trusted besides the system's.
    pub ca_cert: Option<PathBuf>,
    /// The context window in tokens.
    pub context_tokens: Option<u64>,
    /// Other models tried in order when this one is unavailable.
    #[serde(default)]
    pub fallback: Vec<String>,
    /// Requests in flight at once, over every run on this model.
    pub max_concurrent: Option<u32>,
    /// Requests started per minute, over every run on this model.
    pub requests_per_minute: Option<u32>,
    /// Tokens (in and out) per minute, over every run on this model.
    pub tokens_per_minute: Option<u64>,
    /// Price of a million input tokens, in the unit of `budget.max_cost`.
    pub input_price: Option<f64>,
    /// Price of a million output tokens, in the unit of `budget.max_cost`.
    pub output_price: Option<f64>,
}

/// `[tenants.NAME]`: one tenant's limits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantEntry {
    /// The tenant's runs holding a slot at once; past it its new runs queue
    /// (other tenants' runs go on).
    pub max_running: Option<u32>,
    /// Money its runs may spend per UTC day, in the unit of `budget.max_cost`.
    pub max_cost_per_day: Option<f64>,
}

/// Money in millionths, as budgets count it (`budget.max_cost = 0.5` is
/// 500000); `None` for a value that is not a finite number from 0 up to
/// what a `u64` of millionths holds.
pub fn micros_of(value: f64) -> Option<u64> {
    let micros = (value * 1_000_000.0).round();
    (value.is_finite() && value >= 0.0 && micros < u64::MAX as f64).then_some(micros as u64)
}

/// The providers a model may name.
pub const PROVIDERS: &[&str] = &["openai", "anthropic"];

/// A serve.toml key that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadKey {
    /// The key (`agents.x.model`), or `(file)` when none can be named.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl BadKey {
    fn new(key: impl Into<String>, message: impl Into<String>) -> BadKey {
        BadKey {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for BadKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

impl ServeFile {
    /// Reads and checks serve.toml.
    pub fn load(path: &Path) -> Result<ServeFile, ServeError> {
        let text = std::fs::read_to_string(path).map_err(|source| ServeError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        ServeFile::parse(&text, dir).map_err(|bad| ServeError::Config {
            path: path.to_path_buf(),
            key: bad.key,
            message: bad.message,
        })
    }

    /// serve.toml's text; relative paths are joined to `dir`. An error names
    /// the key at fault and what is wrong.
    pub fn parse(text: &str, dir: &Path) -> Result<ServeFile, BadKey> {
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let key = e.span().map_or_else(
                || "(file)".to_string(),
                |span| key_at(text, span.start, e.message()),
            );
            BadKey::new(key, e.message().trim())
        })?;
        let mut file = ServeFile {
            serve: raw.serve,
            auth: raw.auth,
            agents: raw.agents,
            models: raw.models,
            tenants: raw.tenants,
            telemetry: raw.telemetry,
        };
        file.check()?;
        file.resolve(dir);
        Ok(file)
    }

    /// What serde cannot say: names that must name something, values that
    /// must be in range.
    fn check(&self) -> Result<(), BadKey> {
        if let Some(text) = &self.serve.hibernate_after {
            parse_hibernate_after(text).map_err(|m| BadKey::new("serve.hibernate_after", m))?;
        }
        let names = self.agents.keys().map(|n| format!("agents.{n}"));
        let names = names.chain(self.models.keys().map(|n| format!("models.{n}")));
        for key in names {
            if !key.split_once('.').is_some_and(|(_, n)| valid_name(n)) {
                return Err(BadKey::new(key, "a name is letters, digits, '-' and '_'"));
            }
        }
        if !self.serve.webhook_hosts.is_empty() && self.serve.webhook_secret_env.is_none() {
            return Err(BadKey::new(
                "serve.webhook_secret_env",
                "must name the environment variable holding the webhooks' signing secret when webhook_hosts is set",
            ));
        }
        if let Err(e) = agentry_webhooks::WebhookHosts::new(&self.serve.webhook_hosts) {
            return Err(BadKey::new("serve.webhook_hosts", e.to_string()));
        }
        if let Some(name) = &self.serve.a2a_default
            && !self.agents.get(name).is_some_and(|a| a.a2a)
        {
            return Err(BadKey::new(
                "serve.a2a_default",
                format!("{name:?} is not an [agents.*] table of this file with a2a = true"),
            ));
        }
        for (name, agent) in &self.agents {
            if let Some(model) = &agent.model
                && !self.models.contains_key(model)
            {
                return Err(BadKey::new(
                    format!("agents.{name}.model"),
                    format!("{model:?} is not a [models.*] table of this file"),
                ));
            }
        }
        for (name, model) in &self.models {
            let key = |field: &str| format!("models.{name}.{field}");
            if !PROVIDERS.contains(&model.provider.as_str()) {
                return Err(BadKey::new(
                    key("provider"),
                    format!(
                        "{:?}: expected one of {}",
                        model.provider,
                        PROVIDERS.join(", ")
                    ),
                ));
            }
            if model.model.trim().is_empty() {
                return Err(BadKey::new(key("model"), "must not be empty"));
            }
            if model.context_tokens == Some(0) {
                return Err(BadKey::new(key("context_tokens"), "must be positive"));
            }
            if model
                .api_key_env
                .as_deref()
                .is_some_and(|v| v.trim().is_empty())
            {
                return Err(BadKey::new(
                    key("api_key_env"),
                    "must name an environment variable",
                ));
            }
            check_model_limits(model, &key)?;
            for other in &model.fallback {
                if other == name || !self.models.contains_key(other) {
                    return Err(BadKey::new(
                        key("fallback"),
                        format!("{other:?} is not another [models.*] table of this file"),
                    ));
                }
            }
        }
        self.check_limits()
    }

    /// `[serve]`'s and `[tenants.*]`'s limits: positive counts, money a
    /// budget can hold.
    fn check_limits(&self) -> Result<(), BadKey> {
        positive("serve.max_running", self.serve.max_running)?;
        positive("serve.max_queued", self.serve.max_queued)?;
        self.check_guard_limits()?;
        for (name, tenant) in &self.tenants {
            if !valid_tenant_name(name) {
                return Err(BadKey::new(
                    format!("tenants.{name}"),
                    "a tenant name is letters, digits, '-', '_' and '.' (as in the tokens file)",
                ));
            }
            positive(&format!("tenants.{name}.max_running"), tenant.max_running)?;
            if let Some(cost) = tenant.max_cost_per_day
                && micros_of(cost).is_none_or(|m| m == 0)
            {
                return Err(BadKey::new(
                    format!("tenants.{name}.max_cost_per_day"),
                    format!("expected a positive amount of money, found {cost}"),
                ));
            }
        }
        Ok(())
    }

    /// Guard limits: positive (`keep_stopped` may be 0), streams below connections.
    fn check_guard_limits(&self) -> Result<(), BadKey> {
        let s = &self.serve;
        for (key, value) in [
            ("serve.max_message_bytes", s.max_message_bytes),
            ("serve.max_create_bytes", s.max_create_bytes),
            ("serve.max_run_input_bytes", s.max_run_input_bytes),
            ("serve.inbox_capacity", s.inbox_capacity),
            ("serve.replay_bytes", s.replay_bytes),
            ("serve.stopped_replay_bytes", s.stopped_replay_bytes),
            ("serve.max_connections", s.max_connections.map(u64::from)),
            ("serve.max_streams", s.max_streams.map(u64::from)),
            (
                "serve.max_streams_per_run",
                s.max_streams_per_run.map(u64::from),
            ),
        ] {
            positive(key, value)?;
        }
        s.limit_settings()
            .limits()
            .map(drop)
            .map_err(|e| BadKey::new("serve.max_streams", e.to_string()))
    }

    fn resolve(&mut self, dir: &Path) {
        let join = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        if let Some(p) = &mut self.auth.tokens_file {
            join(p);
        }
        for agent in self.agents.values_mut() {
            join(&mut agent.task);
        }
        for model in self.models.values_mut() {
            if let Some(p) = &mut model.ca_cert {
                join(p);
            }
        }
        if let Some(p) = &mut self.serve.workdir_root {
            join(p);
        }
    }
}

/// serve.toml as serde reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    serve: ServeSection,
    #[serde(default)]
    auth: AuthSection,
    #[serde(default)]
    agents: BTreeMap<String, AgentEntry>,
    #[serde(default)]
    models: BTreeMap<String, ModelEntry>,
    #[serde(default)]
    tenants: BTreeMap<String, TenantEntry>,
    #[serde(default)]
    telemetry: TelemetrySection,
}

/// A model's shared limits are positive; its prices are money.
fn check_model_limits(model: &ModelEntry, key: &dyn Fn(&str) -> String) -> Result<(), BadKey> {
    positive(&key("max_concurrent"), model.max_concurrent)?;
    positive(&key("requests_per_minute"), model.requests_per_minute)?;
    positive(&key("tokens_per_minute"), model.tokens_per_minute)?;
    for (field, price) in [
        ("input_price", model.input_price),
        ("output_price", model.output_price),
    ] {
        if let Some(price) = price
            && micros_of(price).is_none()
        {
            return Err(BadKey::new(
                key(field),
                format!("expected a price of zero or more, found {price}"),
            ));
        }
    }
    Ok(())
}

/// A count that must be at least 1 when given.
fn positive<N: Copy + Into<u64>>(key: &str, value: Option<N>) -> Result<(), BadKey> {
    match value.map(Into::into) {
        Some(0) => Err(BadKey::new(key, "expected a positive integer, found 0")),
        Some(_) | None => Ok(()),
    }
}

/// A tenant's name, as the tokens file takes it.
fn valid_tenant_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

mod key_at;
#[cfg(test)]
mod tests;
