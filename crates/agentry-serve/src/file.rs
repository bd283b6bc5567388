//! serve.toml: the service's address, its tokens, the operator's agents and
//! the models they run on. Every table refuses keys it does not know, and
//! every error names the key at fault (`agents.support.model`), as
//! `path: key: message`.
//!
//! ```toml
//! [serve]
//! addr = "127.0.0.1:8080"
//! hibernate_after = "30s"         # an event-driven run asleep this long leaves memory; "off"
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
//! ```
//!
//! Relative paths are relative to the directory of serve.toml.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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
}

/// `[serve]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeSection {
    /// The address to listen on (`--addr` wins).
    pub addr: Option<SocketAddr>,
    /// How long an event-driven run sleeps before it hibernates (`"30s"`,
    /// the default; `"off"` never): see [`ServeSection::hibernate_after`].
    pub hibernate_after: Option<String>,
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
            for other in &model.fallback {
                if other == name || !self.models.contains_key(other) {
                    return Err(BadKey::new(
                        key("fallback"),
                        format!("{other:?} is not another [models.*] table of this file"),
                    ));
                }
            }
        }
        Ok(())
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
}

/// The dotted key a parse error at byte `at` is about: the table header
/// above it (or on its line) and the field serde names, else the key on the
/// error's line; `(file)` when neither is found.
fn key_at(text: &str, at: usize, message: &str) -> String {
    let before = text.get(..at).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line_end = text
        .get(line_start..)
        .and_then(|rest| rest.find('\n'))
        .map_or(text.len(), |i| line_start + i);
    let line = text.get(line_start..line_end).unwrap_or("").trim();
    let header = |l: &str| {
        let l = l.trim();
        (l.starts_with('[') && l.ends_with(']'))
            .then(|| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
    };
    let named = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|lead| message.trim().strip_prefix(lead))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_string);
    if let Some(on_line) = header(line) {
        // The error is about this table: a table that should not be there
        // (its own name), or a field it lacks.
        return match named {
            Some(f) if on_line != f && !on_line.ends_with(&format!(".{f}")) => {
                format!("{on_line}.{f}")
            }
            Some(_) | None => on_line,
        };
    }
    let table = before.lines().rev().find_map(header);
    let field = named.or_else(|| {
        line.split_once('=')
            .map(|(k, _)| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty())
    });
    match (table, field) {
        (Some(t), Some(f)) => format!("{t}.{f}"),
        (Some(t), None) => t,
        (None, Some(f)) => f,
        (None, None) => "(file)".to_string(),
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[serve]
addr = "127.0.0.1:9000"
[auth]
tokens_file = "tokens"
[agents.support]
task = "tasks/support"
model = "local"
[agents.sum]
task = "/abs/sum"
[models.local]
provider = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "LOCAL_KEY"
context_tokens = 8192
fallback = ["other"]
[models.other]
provider = "anthropic"
model = "n"
"#;

    #[test]
    fn a_good_file_parses_with_paths_relative_to_it() {
        let file = ServeFile::parse(GOOD, Path::new("/etc/agentry")).unwrap();
        assert_eq!(file.serve.addr, Some("127.0.0.1:9000".parse().unwrap()));
        assert_eq!(
            file.auth.tokens_file,
            Some(PathBuf::from("/etc/agentry/tokens"))
        );
        assert_eq!(
            file.agents["support"].task,
            PathBuf::from("/etc/agentry/tasks/support")
        );
        assert_eq!(file.agents["sum"].task, PathBuf::from("/abs/sum"));
        assert_eq!(file.models["local"].fallback, ["other"]);
    }

    #[test]
    fn hibernate_after_is_30s_by_default_a_duration_or_off() {
        let parse = |text: &str| {
            ServeFile::parse(text, Path::new("/d"))
                .unwrap()
                .serve
                .hibernate_after()
        };
        assert_eq!(parse(""), Some(DEFAULT_HIBERNATE_AFTER));
        assert_eq!(
            parse("[serve]\nhibernate_after = \"5m\"\n"),
            Some(std::time::Duration::from_secs(300))
        );
        assert_eq!(parse("[serve]\nhibernate_after = \"off\"\n"), None);
    }

    #[test]
    fn every_error_names_its_key() {
        for (text, key) in [
            ("[serve]\nport = 1\n", "serve.port"),
            ("[serve]\naddr = \"nowhere\"\n", "serve.addr"),
            ("[listen]\n", "listen"),
            ("[agents.x]\nmodel = \"m\"\n", "agents.x.task"),
            ("[agents.x]\ntask = \"t\"\ntools = []\n", "agents.x.tools"),
            (
                "[agents.x]\ntask = \"t\"\nmodel = \"m\"\n",
                "agents.x.model",
            ),
            ("[agents.x]\ntask = 3\n", "agents.x.task"),
            (
                "[models.m]\nprovider = \"acme\"\nmodel = \"a\"\n",
                "models.m.provider",
            ),
            (
                "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\nfallback = [\"m\"]\n",
                "models.m.fallback",
            ),
            (
                "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\napi_key = \"sk-1\"\n",
                "models.m.api_key",
            ),
            (
                "[models.m]\nprovider = \"openai\"\nmodel = \"a\"\ncontext_tokens = 0\n",
                "models.m.context_tokens",
            ),
            (
                "[serve]\nhibernate_after = \"soon\"\n",
                "serve.hibernate_after",
            ),
            (
                "[serve]\nhibernate_after = \"0s\"\n",
                "serve.hibernate_after",
            ),
            ("[serve\n", "(file)"),
        ] {
            let bad = ServeFile::parse(text, Path::new("/d")).unwrap_err();
            assert_eq!(bad.key, key, "{text}: {}", bad.message);
        }
    }
}
