//! The client side of the session: what agentry answers when the server asks
//! something (sampling, elicitation), and where its progress and
//! `tools/list_changed` notifications go.

// Sampling is deprecated by the newest MCP spec (SEP-2577) but servers on
// 2025-11-25 still send it: refusing it needs its types.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agentry_tools::{ProgressSink, ToolProgress};
use async_trait::async_trait;
use rmcp::ClientHandler;
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, ErrorCode, ErrorData, Implementation,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, SamplingCapability,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::Value;

/// Why a handler declined a server's request; the server gets it as the
/// error's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerRefusal {
    /// What the server is told.
    pub message: String,
}

/// Answers an MCP server's `sampling/createMessage` requests (the server asks
/// the client's model for a completion).
///
/// Without one (the default), agentry does not declare the `sampling`
/// capability and refuses such a request with an error naming the server: a
/// server must not spend the run's model budget behind the policy's back.
/// An embedder that installs one decides what is allowed and pays for it.
#[async_trait]
pub trait SamplingHandler: Send + Sync {
    /// `request` is the request's `params` as the server sent them (JSON,
    /// `messages`, `maxTokens`, ...); the answer must be a
    /// `CreateMessageResult` (`role`, `content`, `model`, ...) as JSON.
    async fn create_message(&self, server: &str, request: Value) -> Result<Value, HandlerRefusal>;
}

/// Answers an MCP server's `elicitation/create` requests (the server asks the
/// user for input).
///
/// Without one (the default), agentry does not declare the `elicitation`
/// capability and refuses such a request with an error naming the server:
/// a run has no user to ask unless the embedder provides one.
#[async_trait]
pub trait ElicitationHandler: Send + Sync {
    /// `request` is the request's `params` as the server sent them (JSON,
    /// `message`, `requestedSchema`, ...); the answer must be an
    /// `ElicitResult` (`action`, `content`) as JSON.
    async fn elicit(&self, server: &str, request: Value) -> Result<Value, HandlerRefusal>;
}

/// Where one in-flight call's progress goes.
struct Listener {
    call_id: String,
    sink: Arc<dyn ProgressSink>,
    /// The progress last delivered: MCP progress only grows, and rmcp handles
    /// each notification on a task of its own, so they can arrive out of order.
    last: Option<f64>,
}

/// In-flight calls by the progress token sent with them.
#[derive(Default, Clone)]
pub(crate) struct ProgressRoutes(Arc<Mutex<HashMap<ProgressToken, Listener>>>);

impl ProgressRoutes {
    /// Routes `token`'s notifications to `sink` as `call_id`'s, until the
    /// returned guard is dropped.
    pub(crate) fn route(
        &self,
        token: ProgressToken,
        call_id: &str,
        sink: Arc<dyn ProgressSink>,
    ) -> RouteGuard {
        self.lock().insert(
            token.clone(),
            Listener {
                call_id: call_id.to_string(),
                sink,
                last: None,
            },
        );
        RouteGuard {
            routes: self.clone(),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, Listener>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Delivers a report that moves the call's progress on; one that arrives
    /// after a later one (or after the call ended) is dropped. The sink (it
    /// publishes a run event, taking no lock of ours) runs under the lock, so
    /// two reports cannot pass each other between the check and the event.
    fn deliver(&self, params: ProgressNotificationParam) {
        let mut routes = self.lock();
        let Some(listener) = routes.get_mut(&params.progress_token) else {
            return;
        };
        if listener.last.is_some_and(|last| params.progress <= last) {
            return;
        }
        listener.last = Some(params.progress);
        listener.sink.progress(
            &listener.call_id,
            ToolProgress {
                progress: params.progress,
                total: params.total,
                message: params.message,
            },
        );
    }
}

/// Removes a call's progress route when the call ends.
pub(crate) struct RouteGuard {
    routes: ProgressRoutes,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.lock().remove(&self.token);
    }
}

/// agentry's side of one server's session.
#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) server: Arc<str>,
    pub(crate) sampling: Option<Arc<dyn SamplingHandler>>,
    pub(crate) elicitation: Option<Arc<dyn ElicitationHandler>>,
    pub(crate) progress: ProgressRoutes,
    /// Where `notifications/tools/list_changed` goes: the server re-lists
    /// its tools (on a task of its own, not the notification's).
    pub(crate) list_changed: tokio::sync::mpsc::UnboundedSender<()>,
}

impl Client {
    fn refused(&self, what: &str) -> ErrorData {
        ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "agentry refuses {what} requests from MCP server {}: the embedder installed no handler for them",
                self.server
            ),
            None,
        )
    }
}

/// A handler's JSON answer as the typed result, or the refusal as an error.
fn answer<T: serde::de::DeserializeOwned>(
    result: Result<Value, HandlerRefusal>,
) -> Result<T, ErrorData> {
    let value = result.map_err(|r| ErrorData::new(ErrorCode::INVALID_REQUEST, r.message, None))?;
    serde_json::from_value(value).map_err(|e| {
        ErrorData::internal_error(format!("the client's handler answered badly: {e}"), None)
    })
}

impl ClientHandler for Client {
    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let Some(handler) = &self.sampling else {
            return Err(self.refused("sampling (sampling/createMessage)"));
        };
        let request = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(handler.create_message(&self.server, request).await)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let Some(handler) = &self.elicitation else {
            return Err(self.refused("elicitation (elicitation/create)"));
        };
        let request = serde_json::to_value(request)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        answer(handler.elicit(&self.server, request).await)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.deliver(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // The receiver is gone only with the server.
        let _ = self.list_changed.send(());
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        if self.sampling.is_some() {
            capabilities.sampling = Some(SamplingCapability::default());
        }
        if self.elicitation.is_some() {
            capabilities.elicitation = Some(ElicitationCapability::default());
        }
        // The initialize handshake (2025-11-25), which every server speaks;
        // the server answers with the version it takes.
        ClientConfig::new(
            capabilities,
            Implementation::new("agentry", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}
