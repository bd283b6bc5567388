//! `agentry mcp --http`'s sessions, closed once idle: a client that
//! initializes and leaves holds its session's memory only until
//! `--session-idle-timeout` has passed; its id is then answered 404 and the
//! client must initialize again.
//!
//! Idle means no request in flight. rmcp's own keep-alive counts only
//! messages, so it would end the session of a `run_task` that waits quietly
//! for a long run, and abort that run; it is turned off, and
//! [`IdleSessions`] (rmcp's [`LocalSessionManager`] with the time of each
//! session's last request and the response streams still open) closes the
//! idle ones instead. A standalone GET stream does not keep a session: this
//! server sends nothing on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{ServerSseMessage, SessionId};
use tokio_util::sync::CancellationToken;

/// How often, at most, the idle sessions are looked for.
const MAX_SWEEP: Duration = Duration::from_secs(30);

/// What is known of one session's use.
struct Activity {
    /// When its last request came, or its last response stream ended.
    last: Instant,
    /// Response streams open (requests in flight).
    busy: usize,
}

/// Each session's activity, shared with the guards of its open streams.
type Activities = Arc<Mutex<HashMap<SessionId, Activity>>>;

/// rmcp's in-memory sessions, closed after `idle_timeout` without a request
/// in flight.
pub(crate) struct IdleSessions {
    inner: LocalSessionManager,
    activity: Activities,
    idle_timeout: Duration,
}

impl IdleSessions {
    /// Sessions closed after `idle_timeout` idle; [`IdleSessions::sweep`]
    /// does the closing.
    pub(crate) fn new(idle_timeout: Duration) -> IdleSessions {
        let mut inner = LocalSessionManager::default();
        // Ours replaces it (see the module's docs).
        inner.session_config.keep_alive = None;
        IdleSessions {
            inner,
            activity: Arc::default(),
            idle_timeout,
        }
    }

    /// Closes the idle sessions every so often until `stop`.
    pub(crate) async fn sweep(self: Arc<Self>, stop: CancellationToken) {
        let every = (self.idle_timeout / 4).clamp(Duration::from_millis(50), MAX_SWEEP);
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = ticks.tick() => self.close_idle().await,
            }
        }
    }

    async fn close_idle(&self) {
        let idle: Vec<SessionId> = self
            .lock()
            .iter()
            .filter(|(_, a)| self.is_idle(a))
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            // Looked at again, and forgotten in the same breath: a request
            // that came meanwhile keeps its session.
            let still_idle = {
                let mut activity = self.lock();
                let idle = activity.get(&id).is_some_and(|a| self.is_idle(a));
                if idle {
                    activity.remove(&id);
                }
                idle
            };
            if !still_idle {
                continue;
            }
            tracing::debug!(session = %id, "closing an idle MCP session");
            if let Err(e) = self.inner.close_session(&id).await {
                tracing::debug!(session = %id, error = %e, "an idle MCP session did not close cleanly");
            }
        }
    }

    fn is_idle(&self, activity: &Activity) -> bool {
        activity.busy == 0 && activity.last.elapsed() >= self.idle_timeout
    }

    /// A request came: the session's idle time starts again.
    fn touch(&self, id: &SessionId) {
        if let Some(activity) = self.lock().get_mut(id) {
            activity.last = Instant::now();
        }
    }

    /// A response stream opened: the session is busy until it is dropped.
    fn hold<S>(
        &self,
        id: &SessionId,
        stream: S,
    ) -> impl Stream<Item = S::Item> + Send + Sync + 'static
    where
        S: Stream + Send + Sync + 'static,
    {
        if let Some(activity) = self.lock().get_mut(id) {
            activity.busy += 1;
            activity.last = Instant::now();
        }
        let guard = Busy {
            activity: self.activity.clone(),
            id: id.clone(),
        };
        // The guard lives as long as the stream, dropped with it.
        stream.map(move |item| {
            let _ = &guard;
            item
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Activity>> {
        // Each update is one assignment: a panic leaves the map usable.
        self.activity.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A response stream of a session still open.
struct Busy {
    activity: Activities,
    id: SessionId,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut activity = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(activity) = activity.get_mut(&self.id) {
            activity.busy = activity.busy.saturating_sub(1);
            activity.last = Instant::now();
        }
    }
}

impl SessionManager for IdleSessions {
    type Error = <LocalSessionManager as SessionManager>::Error;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        self.lock().insert(
            id.clone(),
            Activity {
                last: Instant::now(),
                busy: 0,
            },
        );
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.lock().remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.create_stream(id, message).await?;
        Ok(self.hold(id, stream))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let stream = self.inner.resume(id, last_event_id).await?;
        Ok(self.hold(id, stream))
    }
}
