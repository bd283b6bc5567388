//! [`TaskSpec`]: a loaded, validated task directory, and what it builds for the
//! runtime (its tool registry, a runtime, a run configuration).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentry_protocol::accept::AcceptCheck;
use agentry_protocol::budget::BudgetLimits;
use agentry_runtime::{
    ApprovalConfig, Driver, Grants, LiveRegistry, ObserveConfig, RunConfig, Runtime, ToolRegistry,
    TreeLimits,
};
use toml::Value;

use crate::TASK_FILE;
use crate::command::CommandToolDecl;
use crate::error::TaskError;
use crate::raw::RawTask;
use crate::values::syntax_error;
use agentry_mcp::{McpServerConfig, McpServers, StartOptions};
use agentry_runtime::sandbox::{SandboxHost, prepare_sandboxes};
use agentry_tools::proc::RunSandboxes;

/// A loaded, validated task directory.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The task directory, as given.
    pub dir: PathBuf,
    /// The task id: the directory's name.
    pub task_id: String,
    /// The goal (non-empty).
    pub goal: String,
    /// Files of the working directory the task declares as its output
    /// (`artifacts`): relative paths with no `..`, in file order. `agentry
    /// serve` sends them with an A2A task that completes.
    pub artifacts: Vec<String>,
    /// Budget limits; `max_steps` defaults to
    /// [`DEFAULT_MAX_STEPS`](agentry_runtime::config::DEFAULT_MAX_STEPS).
    pub limits: BudgetLimits,
    /// Tool grants; default [`DEFAULT_GRANTS`](crate::DEFAULT_GRANTS).
    pub grants: Grants,
    /// Command tools the task declares (`[[tools.command]]`), in file order.
    /// Registered by [`TaskSpec::registry`], granted only through `grants`.
    pub command_tools: Vec<CommandToolDecl>,
    /// MCP servers whose tools the task offers (`[[tools.mcp]]`), in file
    /// order. Started by [`TaskSpec::start_mcp`]; their tools are registered by
    /// [`TaskSpec::registry_with`], granted only through `grants`.
    pub mcp_servers: Vec<McpServerConfig>,
    /// Remote A2A agents the task offers (`[[tools.a2a]]`), in file order:
    /// each the tool `<name>.ask`, registered by [`TaskSpec::registry`]
    /// (its card read at its first call), granted only through `grants`.
    pub a2a_agents: Vec<crate::a2a::A2aAgentConfig>,
    /// Acceptance checks, in file order.
    pub accept: Vec<AcceptCheck>,
    /// No-progress window; 0 disables the check.
    pub progress_window: usize,
    /// Permission denials in a row that stop the run; 0 disables the check.
    pub max_denied: usize,
    /// The policy script, resolved against `dir`; `None` when the task names none
    /// and `dir/script.json` does not exist.
    pub script: Option<PathBuf>,
    /// `dir/workspace`, if it exists.
    pub workspace: Option<PathBuf>,
    /// Which calls wait for a human decision (`[tools] approve`, `approval_timeout`).
    pub approval: ApprovalConfig,
    /// When the run steps (`[driver] mode`).
    pub driver: Driver,
    /// Periodic ticks (`[driver] every`).
    pub tick_every: Option<Duration>,
    /// A model policy instead of a script (`[policy] model = "openai:MODEL"` or
    /// `"anthropic:MODEL"`); the CLI's `--policy` overrides it.
    pub model: Option<String>,
    /// The model server (`[policy] base_url`).
    pub base_url: Option<String>,
    /// The model's context window in tokens (`[policy] context_tokens`); the
    /// CLI's `--context-tokens` overrides it. `None`: the model table's, else a
    /// default.
    pub context_tokens: Option<u64>,
    /// Results longer than this many bytes of JSON are shown to the model cut
    /// and saved whole for `result.read` (`[policy] result_cap`).
    pub result_cap: Option<usize>,
    /// What a model policy does with older turns that no longer fit
    /// (`[policy] compaction`).
    pub compaction: Compaction,
    /// A PEM file of CA certificates the model client trusts besides the
    /// system's (`[policy] ca_cert`, resolved against `dir`; it existed at load).
    pub ca_cert: Option<PathBuf>,
    /// The agent tree's shape limits and budget rule (`[tree]`).
    pub tree: TreeLimits,
    /// Models that take a turn when the model's server is unavailable after
    /// its retries (`[policy] fallback`), in order; the CLI's `--fallback`
    /// replaces them.
    pub fallback: Vec<FallbackSpec>,
    /// Mark requests for the provider's prompt cache (`[policy]
    /// prompt_cache`, default true).
    pub prompt_cache: bool,
    /// Models children may ask for by name (`[policy.models.NAME]`,
    /// `agent.spawn {"model": NAME}`).
    pub child_models: std::collections::BTreeMap<String, ChildModelSpec>,
    /// Trace sampling, content in spans, and redaction patterns (`[trace]`,
    /// `[redact]`).
    pub observe: ObserveConfig,
    /// The kernel sandbox every process of the run starts under
    /// (`[sandbox]`; default workspace-write, no network).
    pub sandbox: agentry_sandbox::SandboxSpec,
}

/// One `[policy.models.NAME]`: a model behind a provider's API, or a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildModelSpec {
    /// `model = "openai:MODEL"` (and optionally `base_url`).
    Model {
        /// `openai:MODEL` or `anthropic:MODEL`.
        model: String,
        /// Its server; `None`: the provider's hosted API.
        base_url: Option<String>,
    },
    /// `script = "FILE"`, resolved against the task directory.
    Script(PathBuf),
}

/// One model of `[policy] fallback`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FallbackSpec {
    /// `openai:MODEL` or `anthropic:MODEL`.
    pub model: String,
    /// Its server; `None`: the provider's hosted API.
    pub base_url: Option<String>,
}

/// `[policy] compaction`: what a model policy does with older turns that no
/// longer fit its context window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Compaction {
    /// Leave them out, with a note (`"elide"`, the default).
    #[default]
    Elide,
    /// Ask the model to summarize them (`"summarize"`).
    Summarize,
}

impl TaskSpec {
    /// Loads `dir/task.toml`. A missing directory or file is an error naming it.
    pub fn load(dir: &Path) -> Result<TaskSpec, TaskError> {
        if !dir.is_dir() {
            return Err(TaskError::invalid(
                dir,
                "task directory does not exist or is not a directory",
            ));
        }
        let file = dir.join(TASK_FILE);
        // Read as every named file is: a FIFO or /dev/zero there is refused at
        // once, a file past the cap before it is read.
        let text = agentry_files::read_to_string(&file, agentry_files::FileKind::TASK_FILE)
            .map_err(|e| {
                TaskError::invalid(&file, format!("cannot read task file: {}", e.problem))
            })?;
        TaskSpec::parse(&text, dir)
    }

    /// Parses task.toml text for the task directory `dir` (errors name
    /// `dir/task.toml`). Looks at the file system only to find the default script,
    /// the workspace, the directory's name when `dir` is `.` or similar, and
    /// whether `[policy] ca_cert` exists.
    pub fn parse(text: &str, dir: &Path) -> Result<TaskSpec, TaskError> {
        let file = dir.join(TASK_FILE);
        let table: toml::Table =
            toml::from_str(text).map_err(|e| TaskError::invalid(&file, syntax_error(text, &e)))?;
        // Top-level keys: the file itself is the table, so no prefix.
        let raw: RawTask = Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| TaskError::invalid(&file, e.message().trim()))?;
        TaskSpec::validate(raw, dir).map_err(|e| TaskError::invalid(&file, e.0))
    }

    /// The built-in tools plus the task's `[[tools.command]]` tools, for
    /// [`Runtime::new`] (or use [`TaskSpec::runtime`]).
    ///
    /// Declared tools are registered, not granted: the task's `[tools] grant`
    /// must name them (`grant = ["fs.*", "ledger.append"]`), else a call gets
    /// `EPERM`. An error names task.toml and the declaration
    /// (`tools.command[1]: ...`); [`TaskSpec::parse`] already checked what it can,
    /// so this fails only for a hand-edited spec.
    pub fn registry(&self) -> Result<ToolRegistry, TaskError> {
        self.registry_with(&McpServers::default())
    }

    /// The task's `[sandbox]` prepared for a run in `workdir`, with what
    /// `host` hides besides the defaults, for [`TaskSpec::start_mcp`] (the
    /// runtime prepares the run's own at its start). A kernel that cannot
    /// enforce it, or a stdio server's override, is an error naming what is
    /// missing.
    pub fn sandboxes(
        &self,
        workdir: &Path,
        host: &SandboxHost,
    ) -> Result<Arc<RunSandboxes>, TaskError> {
        let sandboxes = prepare_sandboxes(&self.sandbox, workdir, host, None)?;
        for server in &self.mcp_servers {
            if let Some(over) = &server.sandbox {
                sandboxes
                    .check(over)
                    .map_err(|source| agentry_runtime::RuntimeError::Sandbox {
                        tool: Some(format!("{} (tools.mcp)", server.name)),
                        source,
                    })?;
            }
        }
        Ok(sandboxes)
    }

    /// Reads the cards of the task's A2A agents (`[[tools.a2a]]`) for a
    /// run's start, each within [`crate::a2a::CARD_READ_TIMEOUT`]: their
    /// descriptions and skills go into the tools' descriptions, fixed for
    /// the run (a card that cannot be read is logged, and its tool keeps
    /// the plain description).
    pub async fn read_a2a_cards(&mut self) {
        crate::a2a::read_cards(&mut self.a2a_agents).await;
    }

    /// Starts the task's MCP servers (`[[tools.mcp]]`) for a run in `workdir`
    /// (a stdio server's working directory), all at once, each within its
    /// `startup_timeout`, each stdio server under `sandboxes` (its override
    /// of the task's `[sandbox]`: see [`TaskSpec::sandboxes`]); their tools go
    /// to [`TaskSpec::registry_with`]. The servers live until
    /// [`McpServers::shutdown`] or until dropped.
    pub async fn start_mcp(
        &self,
        workdir: &Path,
        sandboxes: &Arc<RunSandboxes>,
    ) -> Result<McpServers, TaskError> {
        if self.mcp_servers.is_empty() {
            return Ok(McpServers::default());
        }
        let mut options = StartOptions::new(workdir.to_path_buf());
        options.sandbox = Some(Arc::clone(sandboxes));
        McpServers::start_all(self.mcp_servers.clone(), options)
            .await
            .map_err(|e| TaskError::Mcp {
                file: self.dir.join(TASK_FILE),
                source: Box::new(e),
            })
    }

    /// [`TaskSpec::registry`] plus the tools of started MCP servers (after the
    /// command tools). A name taken twice (or the same at a model API: `a.b`
    /// and `a_b`) is an error naming both.
    pub fn registry_with(&self, mcp: &McpServers) -> Result<ToolRegistry, TaskError> {
        let file = self.dir.join(TASK_FILE);
        let mut registry = self.command_registry()?;
        for tool in mcp.tools() {
            let name = tool.contract().name;
            registry
                .register(tool)
                .map_err(|e| TaskError::invalid(&file, format!("tools.mcp: tool {name:?}: {e}")))?;
        }
        Ok(registry)
    }

    /// The built-ins, the command tools and the A2A agents' tools.
    fn command_registry(&self) -> Result<ToolRegistry, TaskError> {
        let file = self.dir.join(TASK_FILE);
        let mut registry = ToolRegistry::with_builtins()?;
        for (i, decl) in self.command_tools.iter().enumerate() {
            let invalid = |e: &dyn std::fmt::Display| {
                TaskError::invalid(&file, format!("tools.command[{i}]: {e}"))
            };
            let tool = decl.build().map_err(|e| invalid(&e))?;
            registry.register(Arc::new(tool)).map_err(|e| invalid(&e))?;
        }
        for (i, agent) in self.a2a_agents.iter().enumerate() {
            registry
                .register(Arc::new(agent.tool()))
                .map_err(|e| TaskError::invalid(&file, format!("tools.a2a[{i}]: {e}")))?;
        }
        Ok(registry)
    }

    /// A runtime on this task's tools and its started MCP servers' (see
    /// [`TaskSpec::registry_with`]), kept in step with the servers' tools by
    /// [`TaskSpec::follow_mcp`].
    pub fn runtime_with(&self, mcp: &McpServers) -> Result<Runtime, TaskError> {
        let runtime = Runtime::new(self.registry_with(mcp)?);
        self.follow_mcp(mcp, runtime.live_registry());
        Ok(runtime)
    }

    /// Keeps `live` in step with the servers' tools: each time one's offered
    /// tools change (`tools/list_changed`, a restart listing others), a
    /// registry with the task's tools and the servers' new ones is put in
    /// place, so every run sees it from its next step (its grants still
    /// decide what its model is shown). A registry that cannot be built (a
    /// new tool's name taken) is logged and the runs keep the one they had.
    /// Holds neither the servers nor the registry: it ends with them.
    pub fn follow_mcp(&self, mcp: &McpServers, live: &LiveRegistry) {
        let task = self.clone();
        let live = live.downgrade();
        mcp.on_tools_changed(move |servers| {
            let Some(live) = live.upgrade() else {
                return;
            };
            match task.registry_with(servers) {
                Ok(registry) => live.replace(registry),
                Err(e) => tracing::warn!(
                    task = %task.task_id,
                    error = %e,
                    "the MCP servers' tools changed but cannot be registered; runs keep the tools they had"
                ),
            }
        });
    }

    /// A runtime on this task's tools: `Runtime::new(self.registry()?)`.
    pub fn runtime(&self) -> Result<Runtime, TaskError> {
        Ok(Runtime::new(self.registry()?))
    }

    /// The run configuration for this task in `workdir` (no trace, fresh run id).
    pub fn run_config(&self, workdir: PathBuf) -> RunConfig {
        let mut config = RunConfig::new(self.goal.clone(), workdir);
        config.task_id = self.task_id.clone();
        config.accept = self.accept.clone();
        config.limits = self.limits;
        config.grants = self.grants.clone();
        config.progress_window = self.progress_window;
        config.max_denied = self.max_denied;
        config.approval = self.approval.clone();
        config.driver = self.driver;
        config.tick_every = self.tick_every;
        config.tree = self.tree;
        config.observe = self.observe.clone();
        config.sandbox = self.sandbox.clone();
        if let Some(cap) = self.result_cap {
            config.result_cap = cap;
        }
        config
    }
}
