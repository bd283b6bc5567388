//! What a task declares about one MCP server (`[[tools.mcp]]` in task.toml,
//! or the same built in code by an embedding service).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use agentry_protocol::tool::{Effect, Idempotency};
use serde::{Deserialize, Serialize};

/// Per-call timeout when the declaration gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Time for the whole start (spawn or connect, `initialize`, every page of
/// `tools/list`, checking what it lists) when the declaration gives none.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// Most tools a server may list when the declaration gives no `max_tools`.
/// Model APIs take a few hundred tools a request at most; past this a
/// listing is a runaway (or hostile) server, not a toolbox.
pub const DEFAULT_MAX_TOOLS: usize = 1_000;

/// One MCP server a run's tools come from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpServerConfig {
    /// The server's name: its tools appear as `<name>.<tool>`.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
    /// Which of the server's tools to offer; `None`: all it lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Per call.
    #[serde(with = "millis", default = "default_timeout")]
    pub timeout: Duration,
    /// For the whole start: `initialize`, every page of `tools/list`, and
    /// checking what it lists (a restart's, and a re-listing's, too).
    #[serde(with = "millis", default = "default_startup_timeout")]
    pub startup_timeout: Duration,
    /// Most tools the server may list (over all pages, before `tools`
    /// filters them); a start past it fails naming the server and the cap.
    #[serde(default = "default_max_tools")]
    pub max_tools: usize,
    /// Contract fields the task sets for a tool (by the server's tool name),
    /// over what its annotations say.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, ContractOverride>,
    /// A stdio server's override of the run's `[sandbox]` (task.toml:
    /// `sandbox = { network = true }`); `None`: the run's. An HTTP server
    /// with one is refused: agentry starts no process for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<agentry_sandbox::SandboxOverride>,
}

impl McpServerConfig {
    /// A declaration with the default timeouts, all tools and no overrides.
    pub fn new(name: impl Into<String>, transport: McpTransport) -> Self {
        McpServerConfig {
            name: name.into(),
            transport,
            tools: None,
            timeout: DEFAULT_TIMEOUT,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            max_tools: DEFAULT_MAX_TOOLS,
            overrides: BTreeMap::new(),
            sandbox: None,
        }
    }

    /// The agentry name of the server's tool `tool`: `<server>.<tool>`.
    pub fn tool_name(&self, tool: &str) -> String {
        format!("{}.{tool}", self.name)
    }
}

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpTransport {
    /// A child process speaking MCP on its standard input and output.
    Stdio {
        /// Program and arguments (no shell).
        command: Vec<String>,
        /// Variables set for it, on top of the process tools' allowlist.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP at `url`.
    Http {
        /// The server's MCP endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Headers sent with every request; `${VAR}` in a value is read from
        /// the environment when the server is started.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
        /// A PEM file of CAs to trust for an `https` server, besides the
        /// system's and `SSL_CERT_FILE`'s (as a model's `ca_cert`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ca_cert: Option<PathBuf>,
    },
}

/// Contract fields a task sets for one MCP tool, over its annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractOverride {
    /// What the tool does to the world.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// Whether running it twice is safe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency: Option<Idempotency>,
    /// `true`: every call waits for a human's approval; `false`: no call
    /// does (not even when the tool is `irreversible_external`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approve: Option<bool>,
    /// Names of argument and result fields whose values are secrets: the
    /// contract's [`redact`](agentry_protocol::tool::ToolContract::redact).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
}

fn default_timeout() -> Duration {
    DEFAULT_TIMEOUT
}

fn default_startup_timeout() -> Duration {
    DEFAULT_STARTUP_TIMEOUT
}

fn default_max_tools() -> usize {
    DEFAULT_MAX_TOOLS
}

/// Durations as whole milliseconds (a stored run's configuration).
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}
