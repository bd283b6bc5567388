//! The routes: the router with the guard in front of it, and the routes that
//! start a run and show it (its state, its events); the inputs a live run takes
//! are in `inputs.rs`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::state::RunSnapshot;
use agentry::{RunOutcome, RunStatus};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio::net::TcpListener;

use super::body::body_bytes;
use super::error::ApiError;
use super::inputs::{decide, inject_event, interrupt, send_message, settle};
use super::table::{App, Run};
use super::tenants::Tenant;
use super::views::{meta_fields, run_view};
use super::{create, guard, ops, serve};

impl App {
    /// Serves the routes on `listener` until `shutdown` completes (see `serve.rs`).
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> std::io::Result<()> {
        let router = self.router(listener.local_addr()?);
        let limits = serve::ConnectionLimits {
            max_connections: self.config.limits.max_connections,
            header_timeout: self.config.limits.header_timeout,
        };
        serve::serve(listener, router, limits, shutdown).await;
        Ok(())
    }

    /// The routes, with this app as their state, for a service bound to `bound`
    /// (the `Host` it answers to).
    pub fn router(&self, bound: SocketAddr) -> Router {
        let guard = guard::Guard::new(
            bound,
            self.config.allow_hosts.clone(),
            self.config.allow_origins.clone(),
            self.config.limits,
            self.config.tokens.clone(),
        );
        route_table()
            // Behind the guard: only a caller it let through is forwarded.
            .layer(middleware::from_fn_with_state(
                self.clone(),
                super::cluster::route_elsewhere,
            ))
            // The guard reads every body within its route's limit; the
            // extractor's own default (2 MB) would cut a large create short.
            .layer(DefaultBodyLimit::disable())
            .layer(middleware::from_fn_with_state(guard, guard::check))
            .layer(middleware::from_fn_with_state(
                self.clone(),
                ops::refuse_while_draining,
            ))
            .layer(middleware::map_response(guard::json_errors))
            .with_state(self.clone())
    }

    /// The routes alone, for a request another node checked and forwarded
    /// (`cluster.rs`): no guard, no forwarding on.
    pub(super) fn routes(&self) -> Router {
        route_table()
            .layer(DefaultBodyLimit::disable())
            .layer(middleware::map_response(guard::json_errors))
            .with_state(self.clone())
    }
}

fn route_table() -> Router<App> {
    Router::new()
        .route(guard::HEALTH_PATH, get(ops::health))
        .route("/runs", post(create_run).get(super::listing::list_runs))
        .route("/runs/{id}", get(show_run))
        .route("/runs/{id}/messages", post(send_message))
        .route("/runs/{id}/events", post(inject_event).get(stream_events))
        .route("/runs/{id}/interrupt", post(interrupt))
        .route("/runs/{id}/approvals/{call_id}", post(decide))
        .route("/runs/{id}/decisions/{call_id}", post(settle))
        .route(super::agui::RUN_AGENT_PATH, post(super::agui::run_agent))
        .route("/metrics", get(show_metrics))
        .route(super::openapi::OPENAPI_PATH, get(show_openapi))
        .route(
            super::catalog::AGENTS_PATH,
            get(super::catalog::show_agents),
        )
        .merge(super::console::routes())
        .merge(super::a2a::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this route",
            )
        })
}

async fn create_run(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body)?;
    let traceparent = create::traceparent(&headers);
    // Checked whole before it is started or queued (`admit.rs`).
    let request = app.request_of(&tenant, bytes.clone(), traceparent).await?;
    app.admit(tenant, request, bytes).await
}

async fn show_run(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let entry = app.run(&tenant, &id)?;
    let view = |snapshot: &RunSnapshot, outcome: Option<&RunOutcome>| {
        let mut view = run_view(&id, snapshot, outcome);
        view["traceparent"] = json!(entry.traceparent);
        meta_fields(&mut view, &entry.meta);
        axum::Json(view).into_response()
    };
    let handle = match entry.current() {
        Run::Live(handle) => *handle,
        Run::Stopped(outcome) => return Ok(view(&outcome.state, Some(&outcome))),
        Run::Queued => {
            let mut view = json!({ "run_id": id, "status": "queued" });
            if let Some(position) = app.admission.position(&id) {
                view["position"] = json!(position);
            }
            meta_fields(&mut view, &entry.meta);
            return Ok(axum::Json(view).into_response());
        }
    };
    let snapshot = handle
        .snapshot()
        .await
        .ok_or_else(|| ApiError::internal("the run's state is unavailable"))?;
    let mut outcome = handle.outcome();
    if outcome.is_none() && snapshot.status == RunStatus::Stopped {
        // The state keeper records the stop just before the conductor publishes
        // the outcome; wait that moment so a stopped run always shows one.
        outcome = tokio::time::timeout(Duration::from_secs(1), handle.wait())
            .await
            .ok()
            .and_then(Result::ok);
    }
    Ok(view(&snapshot, outcome.as_ref()))
}

async fn stream_events(
    State(app): State<App>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    if super::agui::wanted(query.as_deref())? {
        return super::agui::stream_run(&app, &tenant, &id).await;
    }
    let run = app.run(&tenant, &id)?;
    let after = super::events::resume_point(&headers, query.as_deref())?;
    // A node of a cluster serves every run's stream from the kept events,
    // so its numbering is the same whichever node a client reaches.
    if let Some(cluster) = app.cluster.get() {
        let forward = super::node::Forward {
            path: format!("/runs/{id}/events"),
            run_id: id,
            tenant: tenant.name().map(str::to_string),
            method: "GET".into(),
            body: Vec::new(),
        };
        drop(run);
        return Ok(cluster.stream(forward, after).await);
    }
    let slot = app.streams.admit(&id);
    let stream = Arc::clone(&run.log).stream(slot, after);
    // Comments every 15 s keep idle connections open through proxies.
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The Prometheus metrics of every run of this process (OpenMetrics text), as
/// the layer in the process's subscriber counted them. Behind the same guard
/// as every route (Host, Origin): a scraper on another host needs
/// `--allow-host`.
async fn show_metrics(State(app): State<App>) -> Result<Response, ApiError> {
    let Some(metrics) = &app.metrics else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "metrics are not collected by this service",
        ));
    };
    Ok((
        [(header::CONTENT_TYPE, agentry::metrics::CONTENT_TYPE)],
        super::gauges::encode(metrics),
    )
        .into_response())
}

/// `GET /openapi.json`: the routes' OpenAPI 3.1 document (`openapi.rs`).
async fn show_openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::openapi::document_json(),
    )
        .into_response()
}
