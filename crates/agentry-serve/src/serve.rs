//! The accept loop: HTTP/1 connections, bounded in number and in how long they
//! may sit idle.
//!
//! `axum::serve` accepts every connection and waits on each forever, so idle or
//! half-sent connections pile up until the process runs out of file
//! descriptors and no real client gets in. Here:
//!
//! - at most `--max-connections` are open. When a new one arrives at the limit,
//!   the oldest connection that is *idle* (no request being worked on or
//!   answered: it has sent nothing, or half a head, or half a body, or sits
//!   between requests) is closed to make room; only when every connection is
//!   busy does the new one wait for a slot;
//! - a request's head must arrive within `--header-timeout`, counted from the
//!   moment the connection waits for it, so the same bound closes a kept-alive
//!   connection that stays idle between requests (hyper's header-read timer);
//! - its body must arrive within `--body-timeout` (`guard.rs`).
//!
//! A connection serving an event stream is busy for as long as its run lives;
//! `streams.rs` keeps the number of streams below `--max-connections`, so the
//! rest stay free for short requests.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// How long the loop waits after a failed `accept` (out of file descriptors,
/// say) before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What one connection is doing. The guard (`guard.rs`) marks it busy while a
/// request is worked on and answered.
#[derive(Debug, Default)]
pub struct Activity {
    working: AtomicUsize,
    /// Cancelled to close the connection at once (it was idle and a slot was needed).
    close: CancellationToken,
}

impl Activity {
    /// Marks the connection busy until the returned guard is dropped.
    pub fn begin(self: Arc<Self>) -> Busy {
        self.working.fetch_add(1, Ordering::SeqCst);
        Busy(self)
    }

    fn idle(&self) -> bool {
        self.working.load(Ordering::SeqCst) == 0 && !self.close.is_cancelled()
    }
}

/// A request of the connection in progress (see [`Activity::begin`]).
#[derive(Debug)]
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.working.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The open connections, oldest first, and the slots they hold.
#[derive(Debug)]
struct Connections {
    slots: Arc<Semaphore>,
    max: u32,
    open: Mutex<BTreeMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
}

/// A connection's place: its slot comes back, and it leaves the table, when the
/// connection's task ends.
#[derive(Debug)]
struct Slot {
    id: u64,
    activity: Arc<Activity>,
    table: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.lock().remove(&self.id);
    }
}

impl Connections {
    fn new(max: usize) -> Arc<Connections> {
        let max = u32::try_from(max.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        Arc::new(Connections {
            slots: Arc::new(Semaphore::new(max as usize)),
            max,
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Activity>>> {
        // Entries are inserted and removed whole: a poisoned map is still consistent.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection: a free one, or the one the oldest idle
    /// connection gives back when it is closed, or the first one freed.
    async fn admit(self: &Arc<Self>) -> Slot {
        let permit = match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let oldest_idle = self.lock().values().find(|a| a.idle()).cloned();
                if let Some(activity) = oldest_idle {
                    activity.close.cancel();
                }
                match Arc::clone(&self.slots).acquire_owned().await {
                    Ok(permit) => permit,
                    // The semaphore is never closed.
                    Err(_) => return std::future::pending().await,
                }
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let activity = Arc::new(Activity::default());
        self.lock().insert(id, Arc::clone(&activity));
        Slot {
            id,
            activity,
            table: Arc::clone(self),
            _permit: permit,
        }
    }

    /// Waits until every connection has ended.
    async fn drained(&self) {
        let _ = self.slots.acquire_many(self.max).await;
    }
}

/// Connection-level limits (the request-level ones are in `guard.rs`).
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// For a request's head, and for an idle connection between requests.
    pub header_timeout: Duration,
}

/// Serves `router` on `listener` until `shutdown` completes; then stops
/// accepting, lets every connection finish its request in progress, and
/// returns once all have closed.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Connections::new(limits.max_connections);
    let stop = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // An event stream writes small frames as they come: with
                    // Nagle's algorithm each waited for the client's delayed
                    // ACK (~40 ms on Linux) behind the one before it.
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::debug!(error = %e, "TCP_NODELAY not set");
                    }
                    stream
                }
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed; retrying");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    }
                }
            },
        };
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = connections.admit() => slot,
        };
        let connection = serve_connection(stream, router.clone(), slot, limits, stop.clone());
        tokio::spawn(connection);
    }
    stop.cancel();
    connections.drained().await;
}

/// One connection, until the client closes it, it times out, it is closed to
/// make room, or the service stops.
async fn serve_connection(
    stream: TcpStream,
    router: Router,
    slot: Slot,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let activity = Arc::clone(&slot.activity);
    let routes = TowerToHyperService::new(router);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        request.extensions_mut().insert(Arc::clone(&activity));
        routes.call(request)
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let connection = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let closed = slot.activity.close.clone();
    tokio::select! {
        served = connection.as_mut() => {
            if let Err(e) = served {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        // Dropping the connection closes the socket; it had no request in progress.
        () = closed.cancelled() => tracing::debug!("idle connection closed to make room"),
        () = stop.cancelled() => {
            // A connection with no request in progress has nothing to finish
            // (hyper would wait out a half-sent head); one with a request does.
            if !slot.activity.idle() {
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
            }
        }
    }
    drop(slot);
}

/// A quarter of the open-file limit, between 16 and 1,024: the other
/// descriptors are the runs' (their files, tool processes, the store).
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given a pointer to.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    let files = match got {
        0 => usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX),
        _ => 1024,
    };
    (files / 4).clamp(16, 1024)
}
