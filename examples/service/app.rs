//! The HTTP service: routes, the table of runs, and JSON errors.
//!
//! Kept apart from `main.rs` (arguments, logging, signals) so the integration test
//! (`tests/suite/service/`) runs this very router on a real TCP listener.
//! Every request first passes `guard.rs` (who may call, what it may send);
//! connections are accepted and bounded by `serve.rs`; a stopped run keeps its
//! outcome and a bounded history (`events.rs`) only.
//!
//! ```text
//! POST /runs                          task fields + script + files → 201 {"run_id"}
//! GET  /runs/{id}                     status, steps, pending approvals, outcome
//! POST /runs/{id}/messages            {"text"}                     → 202
//! POST /runs/{id}/events              {"name", "payload"}          → 202
//! GET  /runs/{id}/events              Server-Sent Events, from the run's first event
//! POST /runs/{id}/interrupt           {"action": pause|resume|abort} → 202
//!                                     {"action": "redirect", "message"} → 202 (cuts the step)
//! POST /runs/{id}/approvals/{call_id} {"decision": approve|deny, "reason"} → 200 {"seq"}
//! POST /runs/{id}/decisions/{call_id} {"decision": happened|retry|skip} → 200 {"seq"}
//! GET  /metrics                       Prometheus metrics (OpenMetrics text)
//! ```
//!
//! Layout, leaves first (each file names only files above it):
//!
//! ```text
//! error.rs    ApiError, the JSON error answer
//! body.rs     reading a JSON request body
//! allowed.rs  --allow-host and --allow-origin values
//! streams.rs  open event streams, bounded per run and in total
//! events.rs   a run's event log and its SSE stream
//! serve.rs    accepting and bounding connections
//! config.rs   ServiceConfig and Limits
//! create.rs   a POST /runs body → task, script and working directory
//! guard.rs    what every request passes before its route
//! table.rs    App: the table of runs, following each until it stops
//! inputs.rs   the routes a live run takes input by
//! routes.rs   the router, App::serve, and the routes that start and show runs
//! ```

// Paths relative to this file, so the test can include it with `#[path]` too.
#[path = "allowed.rs"]
mod allowed;
#[path = "body.rs"]
mod body;
#[path = "config.rs"]
mod config;
#[path = "create.rs"]
mod create;
#[path = "error.rs"]
mod error;
#[path = "events.rs"]
mod events;
#[path = "guard.rs"]
mod guard;
#[path = "inputs.rs"]
mod inputs;
#[path = "routes.rs"]
mod routes;
#[path = "serve.rs"]
mod serve;
#[path = "streams.rs"]
mod streams;
#[path = "table.rs"]
mod table;

pub use table::App;
#[allow(unused_imports)] // main.rs names these; the test including this file only `App`
pub use {
    allowed::{AllowedHost, AllowedOrigin},
    config::{Limits, ServiceConfig},
    events::ReplayLimits,
    streams::StreamLimits,
};
