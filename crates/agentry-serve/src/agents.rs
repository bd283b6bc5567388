//! The operator's named agents: `POST /runs {"agent": NAME, ...}` starts one
//! through an [`Agents`] the embedder gives (`agentry serve` builds its
//! agents from serve.toml's task directories and models); and [`RunMeta`],
//! what the service keeps with a run in the store (its tenant, agent and
//! model), so that a restarted service knows whose run it is.

use agentry::protocol::stored_policy::{RootSpec, StoredPolicy};
use agentry::{RunConfig, RunHandle};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::ApiError;
use super::tenants::Tenant;

/// The key of [`RootSpec::other`] the service's [`RunMeta`] is stored under.
const META_KEY: &str = agentry::store::SERVE_META_KEY;

/// What the service keeps with each run: who created it, of which agent, on
/// which named model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The tenant that created the run (none without tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The named agent the run is of (none for an inline task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The named model the run is on (none for a scripted policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the run's completion webhook goes (kept with the run, so a run
    /// that stops after a restart still gets its delivery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// The files its task declares as output (task.toml's `artifacts`),
    /// sent with its A2A task when it completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
}

impl RunMeta {
    /// The meta a run of `tenant` starts with.
    pub fn of_tenant(tenant: &Tenant) -> RunMeta {
        RunMeta {
            tenant: tenant.name().map(str::to_string),
            ..RunMeta::default()
        }
    }

    /// The tenant the run belongs to.
    pub fn tenant(&self) -> Tenant {
        match &self.tenant {
            Some(name) => Tenant::named(name),
            None => Tenant::anyone(),
        }
    }

    /// Writes this meta into the run's stored policy description.
    pub fn store_in(&self, spec: &mut RootSpec) {
        if let Ok(value) = serde_json::to_value(self) {
            spec.other.insert(META_KEY.to_string(), value);
        }
    }

    /// The meta a stored run carries (empty for a run stored without one).
    pub fn stored(config: &RunConfig) -> RunMeta {
        match &config.policy_spec {
            Some(policy) => RunMeta::of_policy(policy),
            None => RunMeta::default(),
        }
    }

    /// The meta a stored policy description carries.
    pub fn of_policy(policy: &StoredPolicy) -> RunMeta {
        match policy {
            StoredPolicy::Root(root) => root
                .other
                .get(META_KEY)
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default(),
            StoredPolicy::Child(_) | StoredPolicy::Text(_) => RunMeta::default(),
        }
    }
}

/// A request to start a run of a named agent, checked for its shape only:
/// the [`Agents`] narrows the agent's budget and grants with it
/// ([`narrow`](crate::narrow)) and writes its files
/// ([`write_files`](crate::write_files)).
#[derive(Debug, Clone)]
pub struct AgentRun {
    /// The agent's name.
    pub agent: String,
    /// The first user message.
    pub input: Option<String>,
    /// Files for the working directory: relative path → content.
    pub files: Option<Value>,
    /// Budget limits, each at most the agent's.
    pub budget: Option<Map<String, Value>>,
    /// `{"grant": [...]}`, a subset of the agent's grants.
    pub tools: Option<Map<String, Value>>,
    /// Who asks.
    pub tenant: Tenant,
    /// The request's valid W3C `traceparent`, if any.
    pub traceparent: Option<String>,
    /// The inbox capacity the service gives every run.
    pub inbox_capacity: usize,
    /// The completion webhook's URL, checked against the allowed hosts; the
    /// [`Agents`] keeps it in the run's [`RunMeta`].
    pub webhook: Option<String>,
    /// The run's id, chosen by the service (a queued run's was given to its
    /// client before it started); `None`: the runtime's.
    pub run_id: Option<String>,
    /// The most the run may spend, in millionths: what is left of its
    /// tenant's `max_cost_per_day` (apply with [`cap_cost`](crate::cap_cost)).
    pub cost_cap_micros: Option<u64>,
}

/// A named model's requests now, over every run on it (its shared gate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLoad {
    /// The model's name in serve.toml.
    pub model: String,
    /// Requests in flight.
    pub in_flight: usize,
    /// Requests held back by its limits (`max_concurrent`, per-minute
    /// budgets, a provider's `Retry-After`).
    pub throttled: usize,
}

/// A started run of a named agent.
#[derive(Debug)]
pub struct Launched {
    /// The run.
    pub handle: RunHandle,
    /// What the service shows and keeps of it.
    pub meta: RunMeta,
}

/// The operator's named agents.
#[async_trait::async_trait]
pub trait Agents: Send + Sync + std::fmt::Debug {
    /// Whether an agent of this name exists.
    fn has(&self, name: &str) -> bool;

    /// Starts a run of `run.agent`: 400 (naming the field) for a request
    /// that would widen the agent's budget or grants, 500 when the run cannot
    /// start. The run's working directory outlives the process (the run is
    /// durable).
    async fn launch(&self, run: AgentRun) -> Result<Launched, ApiError>;

    /// Checks a request before it is queued (400 naming the field, as
    /// [`Agents::launch`] would) and says what the run will show.
    fn check(&self, run: &AgentRun) -> Result<RunMeta, ApiError> {
        Ok(RunMeta {
            agent: Some(run.agent.clone()),
            ..RunMeta::of_tenant(&run.tenant)
        })
    }

    /// Each named model's requests now, for `/metrics` and `GET /agents`.
    fn model_loads(&self) -> Vec<ModelLoad> {
        Vec::new()
    }

    /// Every agent a request may name, for `GET /agents`.
    fn list(&self) -> Vec<AgentInfo> {
        Vec::new()
    }

    /// `[serve] a2a_default`: the agent whose A2A card is also served at
    /// `/.well-known/agent-card.json` (without it, the only agent with
    /// `a2a = true`, if there is exactly one).
    fn a2a_default(&self) -> Option<String> {
        None
    }
}

/// One named agent, as `GET /agents` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// The agent's name in serve.toml.
    pub name: String,
    /// The named model it runs on (none for its own `[policy]`).
    pub model: Option<String>,
    /// Its task's goal (an A2A card's description).
    pub goal: String,
    /// Published over A2A (`a2a = true`, `a2a/`).
    pub a2a: bool,
}
