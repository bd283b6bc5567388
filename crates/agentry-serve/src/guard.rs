//! What every request passes before it reaches a route, and the one shape every
//! error leaves in.
//!
//! The service runs commands (a task's acceptance checks) as its own user, and
//! it listens on localhost, which every web page in the user's browser can reach.
//! So, in this order:
//!
//! 1. `Host` must name the bound address (`localhost` too when bound to
//!    loopback) or a name given with `--allow-host`: a page whose name was
//!    re-pointed at 127.0.0.1 (DNS rebinding) is answered 421.
//! 2. `Origin`, when present, must be the service's own (the console's
//!    pages, `console.rs`) or one given with `--allow-origin` (none by
//!    default): a cross-site page is answered 403. Allowed origins get CORS
//!    answers, so that a page of theirs can send JSON at all.
//! 3. With tokens configured, every route but `GET /healthz` and the
//!    console's page and assets (`console.rs`: they hold no data) needs
//!    `Authorization: Bearer TOKEN` (401 otherwise, from the headers alone:
//!    the body of a refused request is never read, logged or stored); the
//!    tenant the token stands for goes with the request to its route. (An
//!    allowed origin's CORS preflight, which carries no token, is answered
//!    before this.)
//! 4. A request with a body must say `Content-Type: application/json` (415):
//!    that is what a page cannot send cross-site without a CORS preflight.
//! 5. The URI and the body are bounded (414, 413), and the body must arrive
//!    within `--body-timeout` (408).
//!
//! [`json_errors`] is the outermost layer: any error answer that is not JSON yet
//! (axum's own rejections among them) is rewritten as `{"error": {"code",
//! "message"}}`.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::uri::Authority;
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body::{Frame, SizeHint};

use super::allowed::{AllowedHost, AllowedOrigin};
use super::config::Limits;
use super::error::{ApiError, error_body};
use super::serve::{Activity, Busy};
use super::tenants::{Tenant, Tokens};

/// The one route answered without a token.
pub const HEALTH_PATH: &str = "/healthz";

/// An A2A agent card's well-known path (the default agent's; `a2a/`).
pub const A2A_CARD_PATH: &str = "/.well-known/agent-card.json";

/// The A2A agent cards, public as cards are (`a2a/`): the default agent's
/// and `/a2a/NAME/.well-known/agent-card.json`.
fn is_a2a_card_path(path: &str) -> bool {
    path == A2A_CARD_PATH || (path.starts_with("/a2a/") && path.ends_with(A2A_CARD_PATH))
}

/// Longest path and query taken, in bytes. Run and call ids are short; this
/// stays well below hyper's own limit (64 KiB), past which hyper answers itself.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The body of an error answer read to rewrite it as JSON, at most.
const MAX_ERROR_TEXT: usize = 16 * 1024;

/// The checks of the module docs, with what they compare against.
#[derive(Debug)]
pub struct Guard {
    bound: SocketAddr,
    hosts: Vec<AllowedHost>,
    origins: Vec<AllowedOrigin>,
    limits: Limits,
    tokens: Option<Tokens>,
}

impl Guard {
    /// Checks for a service listening on `bound`.
    pub fn new(
        bound: SocketAddr,
        hosts: Vec<AllowedHost>,
        origins: Vec<AllowedOrigin>,
        limits: Limits,
        tokens: Option<Tokens>,
    ) -> Arc<Guard> {
        Arc::new(Guard {
            bound,
            hosts,
            origins,
            limits,
            tokens,
        })
    }

    /// The tenant the request acts for: anyone without tokens; else the one
    /// its bearer token stands for, or 401. `/healthz` needs no token.
    fn authenticate(&self, request: &Request) -> Result<Tenant, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(Tenant::anyone());
        };
        let open = request.uri().path() == HEALTH_PATH
            || super::console::is_open_path(request.uri().path())
            || is_a2a_card_path(request.uri().path());
        if open && request.method() == Method::GET {
            return Ok(Tenant::anyone());
        }
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer(v.as_bytes()));
        presented
            .and_then(|token| tokens.tenant_of(token))
            .ok_or_else(ApiError::unauthorized)
    }

    /// Whether `authority` (a `Host` header) names this service.
    fn host_allowed(&self, authority: &str) -> bool {
        let Ok(parsed) = authority.parse::<Authority>() else {
            return false;
        };
        if parsed.as_str().contains('@') {
            return false;
        }
        let host = parsed.host().to_ascii_lowercase();
        // Plain HTTP: no port means 80.
        let port = parsed.port_u16().unwrap_or(80);
        let named = self.hosts.iter().any(|h| h.admits(&host, port));
        if named {
            return true;
        }
        if port != self.bound.port() {
            return false;
        }
        let bound = self.bound.ip();
        let ip = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>();
        match ip {
            // A name an attacker controls can never be an IP literal; bound to
            // every address, the service is reached at any of the machine's.
            Ok(ip) => ip == bound || bound.is_unspecified(),
            Err(_) => host == "localhost" && (bound.is_loopback() || bound.is_unspecified()),
        }
    }

    fn check_host(&self, request: &Request) -> Result<(), ApiError> {
        let header = request.headers().get(header::HOST);
        let Some(host) = header.and_then(|h| h.to_str().ok()) else {
            return Err(misdirected(
                "the Host header is missing or not ASCII".into(),
            ));
        };
        if !self.host_allowed(host) {
            return Err(misdirected(format!(
                "Host {host:?} is not this service's address ({}); add names with --allow-host",
                self.bound
            )));
        }
        // An absolute-form request line names a host too; it must agree.
        match request.uri().authority() {
            Some(a) if !self.host_allowed(a.as_str()) => Err(misdirected(format!(
                "the request names host {:?}, not this service",
                a.as_str()
            ))),
            _ => Ok(()),
        }
    }

    /// The request's origin when it is allowed and another; `Ok(None)`
    /// without one, or for this service's own origin (the console's pages).
    fn check_origin(&self, headers: &HeaderMap) -> Result<Option<HeaderValue>, ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(None);
        };
        let text = origin.to_str().unwrap_or_default().to_ascii_lowercase();
        if same_origin(&text, headers) {
            return Ok(None);
        }
        if self.origins.iter().any(|o| o.as_str() == text) {
            return Ok(Some(origin.clone()));
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "Origin {:?} may not call this service; allow it with --allow-origin",
                origin.to_str().unwrap_or("(not ASCII)")
            ),
        ))
    }

    /// The body limit of a route, and the `[serve]` key and flag that set it.
    fn body_limit(&self, request: &Request) -> (usize, &'static str) {
        if request.uri().path() == "/runs" {
            (
                self.limits.create_bytes,
                "max_create_bytes, --max-create-bytes",
            )
        } else {
            (
                self.limits.message_bytes,
                "max_message_bytes, --max-message-bytes",
            )
        }
    }
}

/// Whether `origin` is the service's own: the scheme and the `Host` the
/// request came to, which [`Guard::check_host`] found to be this service
/// (a rebinding page's origin names its own host, so it is never this one).
fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host.as_str()))
}

fn misdirected(message: String) -> ApiError {
    ApiError::new(StatusCode::MISDIRECTED_REQUEST, message)
}

/// The checks of the module docs, then the route. While the route works on the
/// request and its answer is being sent, the connection counts as busy (see
/// `serve.rs`): before that, waiting on a client that sends nothing, it does not.
pub async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let origin = match admit(&guard, &request) {
        Ok(origin) => origin,
        Err(e) => return closing(e.into_response()),
    };
    if let Some(origin) = &origin
        && request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
    {
        return preflight(origin);
    }
    let tenant = match guard
        .authenticate(&request)
        .and_then(|tenant| check_shape(&request).map(|()| tenant))
    {
        Ok(tenant) => tenant,
        Err(e) => return closing(e.into_response()),
    };
    let mut request = request;
    request.extensions_mut().insert(tenant);
    let activity = request.extensions().get::<Arc<Activity>>().cloned();
    let request = match read_body(&guard, request).await {
        Ok(request) => request,
        Err(e) => return closing(e.into_response()),
    };
    let busy = activity.map(|a| a.begin());
    let mut response = next.run(request).await;
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(header::VARY, HeaderValue::from_static("origin"));
    }
    match busy {
        Some(busy) => response.map(|body| Body::new(Working { body, _busy: busy })),
        None => response,
    }
}

/// Host and origin; the allowed origin, if one was sent.
fn admit(guard: &Guard, request: &Request) -> Result<Option<HeaderValue>, ApiError> {
    guard.check_host(request)?;
    guard.check_origin(request.headers())
}

/// URI length and content type: checked once the caller is known, so a
/// caller without a token learns nothing of them.
fn check_shape(request: &Request) -> Result<(), ApiError> {
    let uri_len = request
        .uri()
        .path_and_query()
        .map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return Err(ApiError::new(
            StatusCode::URI_TOO_LONG,
            format!("the URI is {uri_len} bytes long, more than the {MAX_URI_BYTES} taken"),
        ));
    }
    if has_body(request.headers()) {
        let content_type = request.headers().get(header::CONTENT_TYPE);
        if !content_type.is_some_and(is_json) {
            let found = content_type.map_or("none".into(), |v| format!("{v:?}"));
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Type must be application/json, found {found}"),
            ));
        }
    }
    Ok(())
}

/// An allowed origin's CORS preflight: JSON may be posted from its pages.
fn preflight(origin: &HeaderValue) -> Response {
    (
        StatusCode::NO_CONTENT,
        [
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone()),
            (
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST"),
            ),
            (
                header::ACCESS_CONTROL_ALLOW_HEADERS,
                HeaderValue::from_static("authorization, content-type"),
            ),
            (header::VARY, HeaderValue::from_static("origin")),
        ],
    )
        .into_response()
}

/// The token of an `Authorization: Bearer TOKEN` header value.
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let scheme = value.get(..7)?;
    if !scheme.eq_ignore_ascii_case(b"bearer ") {
        return None;
    }
    let token = value.get(7..)?.trim_ascii();
    (!token.is_empty()).then_some(token)
}

fn has_body(headers: &HeaderMap) -> bool {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0");
    declared || headers.contains_key(header::TRANSFER_ENCODING)
}

fn is_json(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// The request with its body read whole: within the route's limit, and within
/// `--body-timeout` of its head.
async fn read_body(guard: &Guard, request: Request) -> Result<Request, ApiError> {
    let (limit, flag) = guard.body_limit(&request);
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than {limit} bytes, the limit of this route ({flag})"
            ),
        )
    };
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let (parts, body) = request.into_parts();
    let timeout = guard.limits.body_timeout;
    // What the client declared is not reserved up front: it may never send it.
    let capacity = declared.map_or(0, |n| usize::try_from(n).unwrap_or(0).min(64 * 1024));
    let collect = async {
        let mut bytes = Vec::with_capacity(capacity);
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::bad_request(format!("the request body could not be read: {e}"))
            })?;
            if bytes.len() + chunk.len() > limit {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(bytes))
    };
    let bytes = tokio::time::timeout(timeout, collect)
        .await
        .map_err(|_| body_timeout(timeout))??;
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

fn body_timeout(timeout: Duration) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request body did not arrive within {timeout:?} (body_timeout, --body-timeout)"
        ),
    )
}

/// The connection is not reused after a refusal: the request's body (or what
/// is left of it) was never read.
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A response body that keeps its connection marked busy until it is sent (or
/// dropped): a long event stream is work, not idleness.
struct Working {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Working {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    // Kept exact, so an answer of known length is still sent with its length.
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Rewrites every error answer that is not JSON yet (a rejection from axum's
/// extractors, a bare status) as `{"error": {"code", "message"}}`, keeping
/// status and headers.
pub async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_error = status.is_client_error() || status.is_server_error();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(is_json);
    if !is_error || json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::CONTENT_TYPE);
    (parts, axum::Json(error_body(status, &message, None))).into_response()
}
