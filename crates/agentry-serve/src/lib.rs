//! agentry as an HTTP service: routes, the table of runs, tenants, and JSON
//! errors — the library behind `agentry serve` (the CLI adds serve.toml's
//! agents and models, the store, logging and signals; `examples/service`
//! embeds it with flags).
//!
//! Every request first passes `guard.rs` (who may call, what it may send);
//! connections are accepted and bounded by `serve.rs`; a stopped run keeps its
//! outcome and a bounded history (`events.rs`) only.
//!
//! ```text
//! GET  /healthz                       200 {"status": "ok", "store": "ok"} (no token needed);
//!                                     503 when the store does not answer or the service drains
//! POST /runs                          task fields + script + files → 201 {"run_id"}
//!                                     or {"agent", "input", "files", "budget", "tools"}
//! GET  /runs                          the caller's runs, newest first:
//!                                     ?status=running|stopped&agent=&limit=&cursor=
//!                                     → {"runs", "next_cursor"}
//! GET  /runs/{id}                     status, steps, pending approvals, outcome
//! POST /runs/{id}/messages            {"text"}                     → 202
//! POST /runs/{id}/events              {"name", "payload"}          → 202
//! GET  /runs/{id}/events              Server-Sent Events, from the run's first event
//!                                     (?format=ag-ui: AG-UI events, `agui/`)
//! POST /runs/{id}/interrupt           {"action": pause|resume|abort} → 202
//!                                     {"action": "redirect", "message"} → 202 (cuts the step)
//! POST /runs/{id}/approvals/{call_id} {"decision": approve|deny, "reason"} → 200 {"seq"}
//! POST /runs/{id}/decisions/{call_id} {"decision": happened|retry|skip} → 200 {"seq"}
//! GET  /metrics                       Prometheus metrics (OpenMetrics text)
//! GET  /openapi.json                  this API's OpenAPI 3.1 document
//! GET  /.well-known/agent-card.json   the default A2A agent's card (`a2a/`)
//! GET  /a2a/NAME/.well-known/agent-card.json   an A2A agent's card (no token)
//! POST /a2a/NAME                      A2A 1.0 JSON-RPC (`a2a = true` agents)
//! POST /agents/{name}/ag-ui           AG-UI RunAgentInput → the AG-UI stream of the run
//! ```
//!
//! Every error is `{"error": {"code", "message", "field"?}}`. With tokens
//! configured ([`Tokens`]) every route but `/healthz` needs `Authorization:
//! Bearer TOKEN`; a run belongs to the tenant that created it, and any other
//! tenant gets the 404 of a run that does not exist.
//!
//! ```no_run
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! // Inline scripted tasks for anyone who reaches loopback; `agentry serve`
//! // adds tokens (`ServiceConfig::tokens`) and named agents (`Agents`).
//! let app = agentry_serve::App::new(agentry::Runtime::with_builtins()?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! app.serve(listener, std::future::pending()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Layout, leaves first (each file names only files above it):
//!
//! ```text
//! error.rs      ApiError, the JSON error answer
//! tenants.rs    bearer tokens and the tenant a request acts for
//! body.rs       reading a JSON request body
//! narrow.rs     an agent request's budget and grants, narrowed never widened
//! openapi/      the OpenAPI 3.1 document: body types and one path per route
//! allowed.rs    --allow-host and --allow-origin values
//! streams.rs    open event streams, bounded per run and in total
//! events.rs     a run's event log and its SSE stream
//! node.rs       the cluster seam: a forwarded request, its answer, `Cluster`
//! serve.rs      accepting and bounding connections
//! status.rs     draining, and the store file /healthz checks
//! agents.rs     the operator's named agents (`Agents`, implemented by the CLI)
//! views.rs      answers several routes give (a started run's 201, agent and model)
//! webhooks.rs   completion webhooks: the allowed hosts, the outbox, the body
//! limits.rs     slots, the queue and each tenant's day, as bookkeeping
//! queue.rs      the queue and the day's spend in the store's SQLite file
//! queue_pg.rs   … or in a Postgres store's database, shared by services
//! queue_place.rs the queue's tables in whichever of the two
//! config.rs     ServiceConfig and Limits
//! create.rs     a POST /runs body → task, script and working directory
//! admission.rs  the limits' state over the requests they hold
//! gauges.rs     the service's gauges in GET /metrics
//! file.rs       serve.toml, parsed and checked
//! guard.rs      what every request passes before its route
//! agui/threads.rs AG-UI threads and the runs they map to
//! table.rs      App: the table of runs, following each until it stops
//! hooks.rs      a run's webhook reserved as it enters the table, ready at its stop
//! admit.rs      POST /runs through the limits: start, queue or 429
//! queue_held.rs a queue shared by services: holding it, taking what the gone left
//! listing.rs    GET /runs: filters, the cursor, store and table merged
//! retention.rs  stopped runs removed after [serve] retention
//! ops.rs        /healthz and the drain on SIGTERM
//! inputs.rs     the routes a live run takes input by
//! cluster.rs    requests for runs another node holds, and applying theirs
//! a2a/          the A2A 1.0 server: agent cards, JSON-RPC, a task is a run
//! agui/         AG-UI: a run's events as AG-UI events, RunAgentInput
//! routes.rs     the router, App::serve, and the routes that start and show runs
//! ```

mod a2a;
mod admission;
mod admit;
mod agents;
mod agui;
mod allowed;
mod body;
mod catalog;
mod cluster;
mod config;
pub mod console;
mod create;
mod error;
mod events;
mod file;
mod gauges;
mod guard;
mod hooks;
mod inputs;
mod limits;
mod listing;
mod narrow;
mod node;
pub mod openapi;
mod ops;
mod queue;
mod queue_held;
#[cfg(feature = "postgres")]
mod queue_pg;
mod queue_place;
mod retention;
mod routes;
mod serve;
mod status;
mod streams;
mod table;
mod tenants;
mod turn;
mod views;
mod webhooks;

pub use admit::cap_cost;
pub use agentry_webhooks::WebhookError;
pub use agents::{AgentInfo, AgentRun, Agents, Launched, ModelLoad, RunMeta};
pub use allowed::{AllowError, AllowedHost, AllowedOrigin};
pub use config::{LimitSettings, Limits, ServiceConfig};
pub use create::write_files;
pub use error::{ApiError, LET_GO, ServeError, code_of};
pub use events::{EventFeed, FedEvent, ReplayLimits};
pub use file::{
    AgentEntry, AuthSection, BadKey, DEFAULT_DRAIN_TIMEOUT, ModelEntry, ServeFile, ServeSection,
    TelemetrySection, TenantEntry, micros_of,
};
pub use limits::{DEFAULT_MAX_QUEUED, QueuePlace, RunLimits, TenantLimits};
pub use listing::{DEFAULT_LIMIT, MAX_LIMIT};
pub use narrow::narrow;
pub use node::{Answer, Cluster, Forward};
pub use ops::{DRAIN_RETRY_AFTER_SECONDS, Drained};
pub use streams::StreamLimits;
pub use table::{App, Resumed};
pub use tenants::{DEFAULT_TENANT, Tenant, Tokens};
pub use webhooks::{Webhooks, webhook_id};
