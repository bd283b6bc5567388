//! The body of `GET /agents`: what may be started, and how busy the service is.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `200` to `GET /agents`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentCatalog {
    /// The operator's named agents (`POST /runs {"agent": NAME}`), by name.
    pub agents: Vec<AgentEntry>,
    /// The service's run slots and queue (`[serve] max_running`, `max_queued`).
    pub queue: QueueState,
    /// Each named model's requests now.
    pub models: Vec<ModelState>,
}

/// One named agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    /// Its name in serve.toml.
    pub name: String,
    /// The named model it runs on; `null` for its own `[policy]`.
    pub model: Option<String>,
}

/// The service's run slots and queue, over every tenant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueState {
    /// Runs holding a slot.
    pub running: u64,
    /// `[serve] max_running`; `null`: no limit.
    pub max_running: Option<u64>,
    /// Runs waiting for a slot.
    pub queued: u64,
    /// `[serve] max_queued`.
    pub max_queued: u64,
}

/// One named model's requests now, over every run on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelState {
    /// Its name in serve.toml.
    pub name: String,
    /// Requests in flight.
    pub in_flight: u64,
    /// Requests held back by its limits (`max_concurrent`, per-minute
    /// budgets, a provider's `Retry-After`).
    pub throttled: u64,
}
