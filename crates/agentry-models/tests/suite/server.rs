//! A scripted model server: answers each POST with the next scripted reply (status,
//! headers, SSE body chunks with pauses between them, optionally stalling) and
//! records what the client sent. Every request is first held to its provider's
//! rules ([`super::strict`]): one the real API would refuse gets the real API's
//! HTTP 400, and no scripted reply.

// Test-only helper outside #[test] functions: a poisoned lock or a bad scripted
// status is a bug in the test itself, and panicking says so loudest.
#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::strict::{Invalid, check_path};
use super::tls_server::{TlsListener, TlsServer};

pub type TestError = Box<dyn std::error::Error + Send + Sync>;

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub chunks: Vec<String>,
    /// After sending this many chunks, hold the connection open without bytes.
    pub stall_after: Option<usize>,
    /// After sending this many chunks, wait until the test notifies, then go on.
    pub hold: Option<(usize, Arc<tokio::sync::Notify>)>,
    /// Builds the reply from the request it answers (the fields above are unused).
    pub respond: Option<Responder>,
}

/// A reply built from the request body it answers.
#[derive(Clone)]
pub struct Responder(pub Arc<dyn Fn(&Value) -> Reply + Send + Sync>);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder")
    }
}

impl Reply {
    /// A 200 SSE stream of these raw body chunks (split anywhere).
    pub fn sse(chunks: Vec<String>) -> Self {
        Reply {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            chunks,
            stall_after: None,
            hold: None,
            respond: None,
        }
    }

    /// The reply `respond` builds from the request it answers.
    pub fn from_request(respond: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        Reply {
            respond: Some(Responder(Arc::new(respond))),
            ..Reply::sse(Vec::new())
        }
    }

    /// An error status with a JSON body.
    pub fn status(status: u16, body: &str) -> Self {
        Reply {
            status,
            headers: vec![("content-type", "application/json".into())],
            chunks: vec![body.to_string()],
            stall_after: None,
            hold: None,
            respond: None,
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    pub fn stall_after(mut self, n: usize) -> Self {
        self.stall_after = Some(n);
        self
    }

    /// After `n` chunks, sends nothing more until `go` is notified.
    pub fn hold_after(mut self, n: usize, go: Arc<tokio::sync::Notify>) -> Self {
        self.hold = Some((n, go));
        self
    }
}

/// Splits SSE `data:` payloads into one body string, then cuts it into pieces of
/// `size` bytes — mid-JSON and mid-UTF-8 alike.
pub fn split_events(payloads: &[String], size: usize) -> Vec<String> {
    let body: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
    split_bytes(body.as_bytes(), size)
}

/// Anthropic-style events (`event:` + `data:`), cut into `size`-byte pieces.
pub fn split_named_events(events: &[(&str, Value)], size: usize) -> Vec<String> {
    let body: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    split_bytes(body.as_bytes(), size)
}

/// Byte pieces carried as lossless strings via latin-1 would corrupt UTF-8, so the
/// server sends `chunks` as raw bytes: each string here holds hex of its bytes.
fn split_bytes(bytes: &[u8], size: usize) -> Vec<String> {
    bytes
        .chunks(size.max(1))
        .map(|c| format!("hex:{}", to_hex(c)))
        .collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn chunk_bytes(chunk: &str) -> Vec<u8> {
    match chunk.strip_prefix("hex:") {
        Some(hex) => (0..hex.len() / 2)
            .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
            .collect(),
        None => chunk.as_bytes().to_vec(),
    }
}

/// What the client sent.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    /// When it arrived.
    pub at: tokio::time::Instant,
}

#[derive(Clone, Default)]
struct Shared {
    replies: Arc<Mutex<VecDeque<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
    rejected: Arc<Mutex<Vec<Invalid>>>,
    in_flight: InFlight,
}

/// Requests whose reply is still being sent, and the most there ever were.
#[derive(Clone, Default)]
struct InFlight {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

/// One request in flight, until its reply's stream is dropped.
struct Flying(InFlight);

impl InFlight {
    fn start(&self) -> Flying {
        let now = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        Flying(self.clone())
    }
}

impl Drop for Flying {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The running server.
pub struct MockServer {
    pub base_url: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockServer {
    /// Binds 127.0.0.1:0 and serves `replies` in order.
    pub async fn start(replies: Vec<Reply>) -> Result<Self, TestError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}", listener.local_addr()?);
        Ok(Self::serve(listener, base_url, replies))
    }

    /// [`MockServer::start`] over TLS: `https://127.0.0.1:PORT`, presenting
    /// what `tls` says (see [`super::tls_server`]).
    pub async fn start_tls(replies: Vec<Reply>, tls: &TlsServer) -> Result<Self, TestError> {
        let listener = TlsListener::bind(tls.clone()).await?;
        let base_url = format!("https://{}", listener.local_addr());
        Ok(Self::serve(listener, base_url, replies))
    }

    fn serve<L>(listener: L, base_url: String, replies: Vec<Reply>) -> Self
    where
        L: axum::serve::Listener<Addr = std::net::SocketAddr>,
    {
        let shared = Shared::default();
        shared.replies.lock().unwrap().extend(replies);
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockServer {
            base_url,
            shared,
            task,
        }
    }

    /// Every POST received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Requests whose reply is being sent now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.now.load(Ordering::SeqCst)
    }

    /// The most requests that were ever in flight at once.
    pub fn most_in_flight(&self) -> usize {
        self.shared.in_flight.most.load(Ordering::SeqCst)
    }

    /// Every request refused by the provider's rules so far, in order.
    pub fn rejected(&self) -> Vec<Invalid> {
        self.shared.rejected.lock().unwrap().clone()
    }
}

async fn handle(
    State(shared): State<Shared>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if method != axum::http::Method::POST {
        return Response::new(Body::from("ok"));
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let refused = check_path(uri.path(), &body);
    shared.received.lock().unwrap().push(Received {
        path: uri.path().to_string(),
        headers,
        body: body.clone(),
        at: tokio::time::Instant::now(),
    });
    if let Some((invalid, shape)) = refused {
        shared.rejected.lock().unwrap().push(invalid);
        let mut r = Response::new(Body::from(shape.to_string()));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        return r;
    }
    let next = shared.replies.lock().unwrap().pop_front();
    let Some(reply) = next else {
        let mut r = Response::new(Body::from("{\"error\":\"script exhausted\"}"));
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let reply = match &reply.respond {
        Some(Responder(respond)) => respond(&body),
        None => reply,
    };
    let stall_after = reply.stall_after;
    let hold = reply.hold;
    let flying = shared.in_flight.start();
    let chunks: Vec<Vec<u8>> = reply.chunks.iter().map(|c| chunk_bytes(c)).collect();
    let stream = futures::stream::unfold((chunks, 0usize, flying), move |(chunks, i, flying)| {
        let hold = hold.clone();
        async move {
            if let Some((_, go)) = hold.filter(|(n, _)| *n == i) {
                // Bounded like the stall: a test that never notifies fails, not hangs.
                let _ = tokio::time::timeout(Duration::from_secs(20), go.notified()).await;
            }
            if stall_after == Some(i) {
                // Bounded: long enough for any client stall timeout used in tests.
                tokio::time::sleep(Duration::from_secs(20)).await;
                return None;
            }
            let chunk = chunks.get(i)?.clone();
            // A pause between pieces so they reach the client as separate reads.
            tokio::time::sleep(Duration::from_millis(2)).await;
            Some((
                Ok::<_, std::convert::Infallible>(Bytes::from(chunk)),
                (chunks, i + 1, flying),
            ))
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap();
    for (name, value) in reply.headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}
