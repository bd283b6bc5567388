//! serve.toml's `[agents.NAME]`: each a task directory the operator trusts
//! (command tools, MCP servers, acceptance), run exactly as `agentry run`
//! runs it (`run::prepare_with`), on its named model or its own `[policy]`.
//! A request brings the first user message and files, and may narrow the
//! budget and grants (`agentry_serve::narrow`); the goal stays the task's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use agentry::protocol::stored_policy::StoredPolicy;
use agentry::{RunConfig, TaskSpec};
use agentry_serve::{AgentRun, Agents, ApiError, Launched, RunMeta, ServeFile};
use axum::http::StatusCode;
use futures::future::BoxFuture;

use super::error::ServeCliError;
use super::models::Gates;
use crate::args::RunArgs;
use crate::error::RunError;
use crate::policy::{describe_policy, load_policy};
use crate::run::{Prepared, prepare_with};

/// One configured agent: its task, loaded and checked at start.
#[derive(Debug)]
struct Agent {
    task: TaskSpec,
    model: Option<String>,
    /// `a2a = true`: published over A2A.
    a2a: bool,
}

/// The operator's agents, and what starting one needs.
#[derive(Debug)]
pub(crate) struct ServeAgents {
    agents: BTreeMap<String, Arc<Agent>>,
    file: Arc<ServeFile>,
    store: PathBuf,
    /// Each named model's shared limits.
    gates: Arc<Gates>,
    /// Lease mode's lease (a node of a cluster), if on.
    lease: Option<std::time::Duration>,
    /// `[serve] workdir_root`: runs' working directories are made there.
    workdir_root: Option<PathBuf>,
}

impl ServeAgents {
    /// The agent named `name`, or the 400 naming the field.
    fn agent(&self, name: &str) -> Result<&Arc<Agent>, ApiError> {
        self.agents
            .get(name)
            .ok_or_else(|| ApiError::bad_field("agent", format!("no agent named {name:?}")))
    }

    /// Loads every agent's task directory; an error names the agent's key.
    pub(crate) fn load(
        file: Arc<ServeFile>,
        config: &std::path::Path,
        store: PathBuf,
        gates: Arc<Gates>,
    ) -> Result<Self, ServeCliError> {
        let mut agents = BTreeMap::new();
        for (name, entry) in &file.agents {
            let task = TaskSpec::load(&entry.task).map_err(|e| ServeCliError::Agent {
                config: config.to_path_buf(),
                key: format!("agents.{name}.task"),
                message: e.to_string(),
            })?;
            if let Some(model) = &entry.model {
                super::models::check_keys(&file, model).map_err(|e| ServeCliError::Agent {
                    config: config.to_path_buf(),
                    key: format!("agents.{name}.model"),
                    message: e.to_string(),
                })?;
            }
            agents.insert(
                name.clone(),
                Arc::new(Agent {
                    task,
                    model: entry.model.clone(),
                    a2a: entry.a2a,
                }),
            );
        }
        Ok(ServeAgents {
            agents,
            store,
            workdir_root: file.serve.workdir_root.clone(),
            file,
            gates,
            lease: None,
        })
    }

    /// Runs the agents' runs in lease mode with `lease` (a node of a cluster).
    pub(crate) fn with_lease(mut self, lease: Option<std::time::Duration>) -> Self {
        self.lease = lease;
        self
    }

    /// `agentry run TASK_DIR --store STORE`, as the service runs it.
    fn run_args(&self, task: &TaskSpec) -> RunArgs {
        // A fresh directory per run, as `agentry run` makes one under the
        // temp directory.
        let workdir = self
            .workdir_root
            .as_ref()
            .map(|root| root.join(format!("{}-{}", task.task_id, uuid::Uuid::now_v7())));
        RunArgs {
            store: Some(self.store.clone()),
            lease: self.lease,
            workdir,
            ..RunArgs::served(task.dir.clone())
        }
    }

    /// The run's policy and what it stores: the named model's, else the
    /// task's own.
    async fn policy(
        &self,
        agent: &Agent,
        args: &RunArgs,
        meta: &RunMeta,
    ) -> Result<(crate::policy::LoadedPolicy, StoredPolicy), RunError> {
        let (loaded, mut root) = match &agent.model {
            Some(model) => (
                super::models::named_policy(&self.file, &self.gates, model, &agent.task).await?,
                super::models::describe(&self.file, model, &agent.task),
            ),
            None => {
                let loaded = load_policy(args, &agent.task).await?;
                let root = match describe_policy(args, &agent.task) {
                    StoredPolicy::Root(root) => root,
                    StoredPolicy::Child(_) | StoredPolicy::Text(_) => Default::default(),
                };
                (loaded, root)
            }
        };
        meta.store_in(&mut root);
        Ok((loaded, StoredPolicy::Root(root)))
    }
}

/// Builds a hibernated run's policy again when it wakes: the agent's named
/// model, else its task's own policy.
fn wake_policy(
    file: Arc<ServeFile>,
    gates: Arc<Gates>,
    agent: Arc<Agent>,
    store: PathBuf,
) -> impl Fn(&RunConfig) -> BoxFuture<'static, Result<Box<dyn agentry::Policy>, agentry::RuntimeError>>
+ Send
+ Sync
+ 'static {
    move |config: &RunConfig| {
        let (file, gates, agent, store) = (
            Arc::clone(&file),
            Arc::clone(&gates),
            Arc::clone(&agent),
            store.clone(),
        );
        let run_id = config.run_id.clone().unwrap_or_default();
        Box::pin(async move {
            let loaded = match &agent.model {
                // The model's one shared gate, as for every run on it.
                Some(model) => super::models::named_policy(&file, &gates, model, &agent.task).await,
                None => {
                    let args = RunArgs {
                        store: Some(store),
                        ..RunArgs::served(agent.task.dir.clone())
                    };
                    load_policy(&args, &agent.task).await
                }
            };
            loaded
                .map(|l| l.policy)
                .map_err(|e| super::resume::not_rebuilt(run_id, &e))
        })
    }
}

/// A run that could not start: the operator's setup, not the client's request.
fn not_started(e: &RunError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("the agent's run could not start: {e}"),
    )
}

#[async_trait::async_trait]
impl Agents for ServeAgents {
    fn has(&self, name: &str) -> bool {
        self.agents.contains_key(name)
    }

    fn check(&self, run: &AgentRun) -> Result<RunMeta, ApiError> {
        let agent = self.agent(&run.agent)?;
        let mut probe = agent.task.run_config(PathBuf::new());
        agentry_serve::narrow(&mut probe, run.budget.as_ref(), run.tools.as_ref())?;
        Ok(RunMeta {
            agent: Some(run.agent.clone()),
            model: agent.model.clone(),
            webhook: run.webhook.clone(),
            artifacts: agent.task.artifacts.clone(),
            ..RunMeta::of_tenant(&run.tenant)
        })
    }

    fn model_loads(&self) -> Vec<agentry_serve::ModelLoad> {
        self.gates.loads()
    }

    fn list(&self) -> Vec<agentry_serve::AgentInfo> {
        self.agents
            .iter()
            .map(|(name, agent)| agentry_serve::AgentInfo {
                name: name.clone(),
                model: agent.model.clone(),
                goal: agent.task.goal.clone(),
                a2a: agent.a2a,
            })
            .collect()
    }

    fn a2a_default(&self) -> Option<String> {
        self.file.serve.a2a_default.clone()
    }

    async fn launch(&self, run: AgentRun) -> Result<Launched, ApiError> {
        // Checked before anything is made: a refused request leaves nothing.
        let meta = self.check(&run)?;
        let agent = self.agent(&run.agent)?;
        let args = self.run_args(&agent.task);
        let (loaded, spec) = self
            .policy(agent, &args, &meta)
            .await
            .map_err(|e| not_started(&e))?;
        let Prepared {
            runtime,
            mut config,
            policy,
            mcp,
            ..
        } = prepare_with(&args, agent.task.clone(), loaded, spec)
            .await
            .map_err(|e| not_started(&e))?;
        agentry_serve::narrow(&mut config, run.budget.as_ref(), run.tools.as_ref())?;
        // An event-driven run asleep this long leaves memory; it wakes with
        // the agent's policy built again, as a resume builds it.
        config.hibernate_after = self.file.serve.hibernate_after();
        let runtime = runtime.with_async_wake_policy(wake_policy(
            Arc::clone(&self.file),
            Arc::clone(&self.gates),
            Arc::clone(agent),
            self.store.clone(),
        ));
        config.traceparent = run.traceparent;
        config.inbox_capacity = run.inbox_capacity;
        if run.run_id.is_some() {
            config.run_id = run.run_id;
        }
        agentry_serve::cap_cost(&mut config, run.cost_cap_micros);
        let dir = config.workdir.clone();
        let started = match write(run.files, dir.clone()).await {
            Ok(()) => runtime
                .start_boxed(config, policy)
                .await
                .map_err(|e| ApiError::internal(format!("the agent's run could not start: {e}"))),
            Err(e) => Err(e),
        };
        let handle = match started {
            Ok(handle) => handle,
            Err(e) => {
                // Nothing ran: nothing of the request is left behind.
                mcp.shutdown().await;
                let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
                return Err(e);
            }
        };
        if let Some(input) = run.input {
            // The first user message; the run's inbox is empty, so it is taken.
            handle.send_message(input).map_err(ApiError::from_runtime)?;
        }
        // The task's MCP servers live as long as its run.
        let ended = handle.clone();
        tokio::spawn(async move {
            let _ = ended.wait().await;
            mcp.shutdown().await;
        });
        Ok(Launched { handle, meta })
    }
}

/// Writes a request's files into the run's working directory (blocking).
async fn write(files: Option<serde_json::Value>, dir: PathBuf) -> Result<(), ApiError> {
    let Some(files) = files else {
        return Ok(());
    };
    tokio::task::spawn_blocking(move || agentry_serve::write_files(&dir, files))
        .await
        .map_err(|e| ApiError::internal(format!("writing the files failed: {e}")))?
}
