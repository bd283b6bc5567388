//! A service that is one node of several on a shared store: requests for a
//! run this node does not hold are handed to the [`Cluster`] the embedder
//! set (`agentry serve` sets one on a Postgres store), which brings back the
//! answer of the node that holds it. The node that holds a run applies such
//! a request with [`App::apply_forwarded`]: through the same routes as a
//! local request, so the answer (status, body, errors) is the one the run's
//! own node would give.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_service::Service;

use super::error::ApiError;
use super::node::{Answer, Cluster, Forward};
use super::table::App;
use super::tenants::Tenant;

/// Request bodies a forwarded request may carry (the largest route limit is
/// the create body's, which is never forwarded).
const MAX_FORWARDED_BODY: usize = 16 * 1024 * 1024;

impl App {
    /// Makes this service a node of `cluster`: requests for runs it does not
    /// hold go there. Set once; later calls are ignored.
    pub fn join_cluster(&self, cluster: Arc<dyn Cluster>) {
        let _ = self.cluster.set(cluster);
    }

    /// Runs of this node's table that have not stopped (running, asleep or
    /// queued): its load, as a cluster places new runs.
    pub fn unfinished_count(&self) -> usize {
        self.unfinished_runs()
    }

    /// Whether run `id` is in this node's table (live, queued or stopped).
    pub fn holds(&self, id: &str) -> bool {
        self.entry(id).is_some()
    }

    /// Applies a request another node forwarded, as if it had come here
    /// (past the guard: the sending node checked the caller's token).
    pub async fn apply_forwarded(&self, forward: Forward) -> Answer {
        let tenant = forward
            .tenant
            .as_deref()
            .map_or_else(Tenant::anyone, Tenant::named);
        let request = Method::from_bytes(forward.method.as_bytes())
            .ok()
            .zip(forward.path.parse::<Uri>().ok())
            .and_then(|(method, uri)| {
                Request::builder()
                    .method(method)
                    .uri(uri)
                    .header(axum::http::header::CONTENT_TYPE, "application/json")
                    .extension(tenant)
                    .body(Body::from(forward.body))
                    .ok()
            });
        let Some(request) = request else {
            return answer_of(
                ApiError::bad_request("a forwarded request that is not one").into_response(),
            )
            .await;
        };
        let mut routes = self.routes();
        match routes.call(request).await {
            Ok(response) => answer_of(response).await,
            Err(never) => match never {},
        }
    }
}

impl App {
    /// The answer the store gives to `forward` without the run's node: 404
    /// for a run it does not hold (or another tenant's), and for a stopped
    /// run its view (`GET`) or 409 (an input). An unfinished run's `GET` gets
    /// the view of its last checkpoint when `unfinished` says so (no node
    /// holds it now). `None`: its node (or the one taking it over) must answer.
    pub async fn answer_from_store(&self, forward: &Forward, unfinished: bool) -> Option<Answer> {
        let id = forward.run_id.as_str();
        let tenant = forward
            .tenant
            .as_deref()
            .map_or_else(Tenant::anyone, Tenant::named);
        let Some(store) = self.runtime.store().map(Arc::clone) else {
            return Some(answer_of(ApiError::no_such_run(id).into_response()).await);
        };
        let key = id.to_string();
        let loaded = tokio::task::spawn_blocking(move || store.load(&key)).await;
        let run = match loaded {
            Ok(Ok(Some(run))) if run.record.parent_id.is_none() => run,
            Ok(Ok(_)) => return Some(answer_of(ApiError::no_such_run(id).into_response()).await),
            Ok(Err(e)) => {
                let e = ApiError::internal(format!("reading run {id} from the store: {e}"));
                return Some(answer_of(e.into_response()).await);
            }
            Err(e) => {
                let e = ApiError::internal(format!("reading run {id} from the store: {e}"));
                return Some(answer_of(e.into_response()).await);
            }
        };
        let meta = match self.runtime.stored_config(id).await {
            Ok(config) => super::agents::RunMeta::stored(&config),
            Err(e) => return Some(answer_of(ApiError::from_runtime(e).into_response()).await),
        };
        if meta.tenant() != tenant {
            return Some(answer_of(ApiError::no_such_run(id).into_response()).await);
        }
        let snapshot = match run.checkpoint {
            Some(checkpoint) => checkpoint.snapshot,
            // Created and never stepped, or its node died before its first
            // checkpoint landed: the state a resume starts it from (else
            // its GET would answer "its node does not answer" for good).
            None => self.runtime.stored_snapshot(id).await.ok()?,
        };
        let stopped = snapshot.status == agentry::RunStatus::Stopped;
        let get = forward.method == "GET";
        let answered_here = stopped || (unfinished && get);
        if !answered_here {
            return None;
        }
        let response = match get {
            true => {
                let mut view = super::views::stored_view(id, &snapshot);
                super::views::meta_fields(&mut view, &meta);
                axum::Json(view).into_response()
            }
            false => ApiError::from_runtime(agentry::RuntimeError::Stopped {
                run_id: id.to_string(),
            })
            .into_response(),
        };
        Some(answer_of(response).await)
    }
}

/// The answer's status and body.
pub(super) async fn answer_of(response: Response) -> Answer {
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), MAX_FORWARDED_BODY)
        .await
        .unwrap_or_else(|_| Bytes::new());
    Answer {
        status,
        body: body.to_vec(),
    }
}

/// The run a path under `/runs/{id}` is about, if it is a request for one
/// run (not a create, not a listing). An event stream is among them: the
/// cluster sends its client to the run's node.
fn forwardable(method: &Method, path: &str) -> Option<String> {
    let rest = path.strip_prefix("/runs/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if id.is_empty() {
        return None;
    }
    let ok = match (method.as_str(), tail) {
        ("GET", "" | "events") => true,
        ("POST", "messages" | "events" | "interrupt") => true,
        ("POST", tail) => tail.starts_with("approvals/") || tail.starts_with("decisions/"),
        _ => false,
    };
    ok.then(|| id.to_string())
}

/// In front of the routes, behind the guard: a request for a run this node
/// does not hold goes to the cluster, if there is one.
pub(super) async fn route_elsewhere(
    State(app): State<App>,
    request: Request,
    next: Next,
) -> Response {
    let Some(cluster) = app.cluster.get().cloned() else {
        return next.run(request).await;
    };
    if request.method() == Method::POST && request.uri().path() == "/runs" {
        return place(cluster, request, next).await;
    }
    let Some(run_id) = forwardable(request.method(), request.uri().path()) else {
        return next.run(request).await;
    };
    if app.holds(&run_id) && request.method() == Method::POST {
        return held_input(&app, cluster, run_id, request, next).await;
    }
    if app.holds(&run_id) {
        return next.run(request).await;
    }
    let tenant = tenant_of(request.extensions());
    let events = request.method() == Method::GET && request.uri().path().ends_with("/events");
    // An AG-UI stream is read here, from the kept events and the run's
    // native view (`agui/`); a bad format is its 400.
    if events && super::agui::wanted(request.uri().query()).unwrap_or(true) {
        return next.run(request).await;
    }
    if events {
        let after = match super::events::resume_point(request.headers(), request.uri().query()) {
            Ok(after) => after,
            Err(e) => return e.into_response(),
        };
        let forward = Forward {
            run_id,
            tenant,
            method: "GET".into(),
            path: request.uri().path().to_string(),
            body: Vec::new(),
        };
        return cluster.stream(forward, after).await;
    }
    let method = request.method().to_string();
    let path = path_of(request.uri());
    let body = match axum::body::to_bytes(request.into_body(), MAX_FORWARDED_BODY).await {
        Ok(body) => body.to_vec(),
        Err(e) => return ApiError::bad_request(format!("reading the body: {e}")).into_response(),
    };
    cluster
        .elsewhere(Forward {
            run_id,
            tenant,
            method,
            path,
            body,
        })
        .await
}

/// The tenant a request is for, as a forwarded request names it.
fn tenant_of(extensions: &axum::http::Extensions) -> Option<String> {
    extensions
        .get::<Tenant>()
        .and_then(|t| t.name().map(str::to_string))
}

/// A request's path and query, as a forwarded request carries them.
fn path_of(uri: &Uri) -> String {
    uri.path_and_query()
        .map_or_else(|| uri.path().to_string(), |p| p.as_str().to_string())
}

/// How long an input for a run letting its lease go waits for it to be gone
/// from this node's table before it follows the run.
const LET_GO_WAIT: Duration = Duration::from_secs(5);

/// An input for a run this node holds: applied here, unless the run was
/// letting its lease go as it came (a hibernated run of a cluster): then it
/// goes through the cluster, to whichever node takes the run next.
async fn held_input(
    app: &App,
    cluster: Arc<dyn Cluster>,
    run_id: String,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_FORWARDED_BODY).await {
        Ok(body) => body,
        Err(e) => return ApiError::bad_request(format!("reading the body: {e}")).into_response(),
    };
    let forward = Forward {
        run_id,
        tenant: tenant_of(&parts.extensions),
        method: parts.method.to_string(),
        path: path_of(&parts.uri),
        body: body.to_vec(),
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    if response.status() != axum::http::StatusCode::CONFLICT {
        return response;
    }
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_FORWARDED_BODY)
        .await
        .unwrap_or_else(|_| Bytes::new());
    let answer = Answer {
        status: parts.status.as_u16(),
        body: body.to_vec(),
    };
    if !answer.is_let_go() {
        return Response::from_parts(parts, Body::from(body));
    }
    // Gone from the table once its lease is released; bounded, since a
    // store that does not answer keeps it here.
    let deadline = tokio::time::Instant::now() + LET_GO_WAIT;
    while app.holds(&forward.run_id) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.elsewhere(forward).await
}

/// A new run goes to the node the cluster places it on, or starts here.
async fn place(cluster: Arc<dyn Cluster>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_FORWARDED_BODY).await {
        Ok(body) => body,
        Err(e) => return ApiError::bad_request(format!("reading the body: {e}")).into_response(),
    };
    let forward = Forward {
        run_id: String::new(),
        tenant: tenant_of(&parts.extensions),
        method: "POST".into(),
        path: "/runs".into(),
        body: body.to_vec(),
    };
    match cluster.place(forward).await {
        Some(placed) => placed,
        None => next.run(Request::from_parts(parts, Body::from(body))).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_for_one_run_that_another_node_can_answer_are_forwarded() {
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(forwardable(&get, "/runs/r1").as_deref(), Some("r1"));
        assert_eq!(
            forwardable(&post, "/runs/r1/messages").as_deref(),
            Some("r1")
        );
        assert_eq!(forwardable(&post, "/runs/r1/events").as_deref(), Some("r1"));
        assert_eq!(
            forwardable(&post, "/runs/r1/interrupt").as_deref(),
            Some("r1")
        );
        assert_eq!(
            forwardable(&post, "/runs/r1/approvals/c1").as_deref(),
            Some("r1")
        );
        assert_eq!(
            forwardable(&post, "/runs/r1/decisions/c1").as_deref(),
            Some("r1")
        );
        assert_eq!(forwardable(&get, "/runs/r1/events").as_deref(), Some("r1"));
        assert_eq!(forwardable(&post, "/runs"), None);
        assert_eq!(forwardable(&get, "/runs"), None);
        assert_eq!(forwardable(&get, "/runs/"), None);
        assert_eq!(forwardable(&get, "/healthz"), None);
    }
}
