//! `GET /agents`: what a client may start and how busy the service is — the
//! named agents (with their models), the run slots and queue, and each named
//! model's requests in flight and held back by its limits. The console's
//! new-run form and its queue panel read it; so may any client.
//!
//! Every tenant may start every named agent, so the list is the same for all;
//! the counts are the service's, over every tenant, as `/metrics` shows them.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use super::openapi::{AgentCatalog, AgentEntry, ModelState, QueueState};
use super::table::App;

/// The route's path.
pub const AGENTS_PATH: &str = "/agents";

pub(super) async fn show_agents(State(app): State<App>) -> Response {
    axum::Json(catalog(&app)).into_response()
}

fn catalog(app: &App) -> AgentCatalog {
    let (agents, models) = match &app.config.agents {
        Some(agents) => (agents.list(), agents.model_loads()),
        None => (Vec::new(), Vec::new()),
    };
    let counts = app.admission.counts();
    let limits = &app.config.run_limits;
    AgentCatalog {
        agents: agents
            .into_iter()
            .map(|a| AgentEntry {
                name: a.name,
                model: a.model,
            })
            .collect(),
        queue: QueueState {
            running: counts.running as u64,
            max_running: limits.max_running.map(|n| n as u64),
            queued: counts.queued as u64,
            max_queued: limits.max_queued as u64,
        },
        models: models
            .into_iter()
            .map(|m| ModelState {
                name: m.model,
                in_flight: m.in_flight as u64,
                throttled: m.throttled as u64,
            })
            .collect(),
    }
}
