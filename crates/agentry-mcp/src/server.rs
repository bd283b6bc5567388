//! [`McpServer`]: a started server, its offered tools, restart and shutdown;
//! [`McpServers`]: several started together.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::ToolContract;
use agentry_tools::{Tool, ToolContext, ToolOutput};
use async_trait::async_trait;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientRequest, RequestMetaObject, ServerResult, Tool as McpTool,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde_json::Value;

use crate::config::McpServerConfig;
use crate::content::to_output;
use crate::contract::contract_for;
use crate::error::McpError;
use crate::handler::{Client, ProgressRoutes};
use crate::options::StartOptions;
use crate::session::{Session, connect};

/// Time between SIGTERM and SIGKILL when a stdio server is shut down.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How long a cancelled call may take to send `notifications/cancelled`
/// before it returns; the executor's grace ([`Tool::cancel_grace`]) covers it.
const CANCEL_SEND: Duration = Duration::from_millis(200);

/// A `tools/call`'s options: the call's trace context as `_meta.traceparent`
/// (MCP's SEP-414 key), so a traced server's spans join the run's trace. rmcp
/// merges it with the progress token it adds to the same `_meta`.
fn call_options(ctx: &ToolContext) -> PeerRequestOptions {
    let options = PeerRequestOptions::no_options();
    match &ctx.traceparent {
        Some(traceparent) => {
            let mut meta = RequestMetaObject::new();
            meta.0.set_traceparent(&**traceparent);
            options.with_meta(meta)
        }
        None => options,
    }
}

/// A started MCP server (see the crate docs for its lifecycle).
pub struct McpServer {
    config: McpServerConfig,
    options: StartOptions,
    client: Client,
    /// The tools offered (the allow-list applied), as listed at start.
    offered: Vec<McpTool>,
    /// The live session; `None` after a failed restart or shutdown. The lock
    /// is also the one permit to restart.
    session: tokio::sync::Mutex<Option<Session>>,
    shut: AtomicBool,
    pid: AtomicU32,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.config.name)
            .field("pid", &self.pid())
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// Starts the server: spawns it (stdio) or connects (HTTP), runs
    /// `initialize` and `tools/list` within `startup_timeout`, and checks the
    /// allow-list and overrides against what it lists.
    pub async fn start(
        config: McpServerConfig,
        options: StartOptions,
    ) -> Result<Arc<McpServer>, McpError> {
        check_config(&config)?;
        let client = Client {
            server: Arc::from(config.name.as_str()),
            sampling: options.sampling.clone(),
            elicitation: options.elicitation.clone(),
            progress: ProgressRoutes::default(),
        };
        let (session, listed) = connect(&config, &options, client.clone()).await?;
        let offered = match offered(&config, listed) {
            Ok(offered) => offered,
            Err(e) => {
                session.close(SHUTDOWN_GRACE).await;
                return Err(e);
            }
        };
        let pid = session.pid().unwrap_or(0);
        Ok(Arc::new(McpServer {
            config,
            options,
            client,
            offered,
            session: tokio::sync::Mutex::new(Some(session)),
            shut: AtomicBool::new(false),
            pid: AtomicU32::new(pid),
        }))
    }

    /// The declaration it was started from.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// Its tools, named `<server>.<tool>`, the allow-list applied, with
    /// contracts from their annotations and the overrides.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        self.offered
            .iter()
            .map(|tool| {
                Arc::new(McpServerTool {
                    server: Arc::clone(self),
                    name: tool.name.to_string(),
                    contract: contract_for(&self.config, tool),
                }) as Arc<dyn Tool>
            })
            .collect()
    }

    /// The stdio server's current process (group leader); `None` for HTTP,
    /// and after shutdown.
    pub fn pid(&self) -> Option<u32> {
        Some(self.pid.load(Ordering::SeqCst)).filter(|pid| *pid != 0)
    }

    /// Closes the session and ends a stdio server's process group (SIGTERM,
    /// SIGKILL after [`SHUTDOWN_GRACE`]). Idempotent; later calls get a
    /// non-retryable `EUNAVAIL`. Dropping the server SIGKILLs the group too.
    pub async fn shutdown(&self) {
        self.shut.store(true, Ordering::SeqCst);
        let session = self.session.lock().await.take();
        if let Some(session) = session {
            session.close(SHUTDOWN_GRACE).await;
        }
        self.pid.store(0, Ordering::SeqCst);
    }

    /// A live session's peer and process group, restarting the server once
    /// if it is gone.
    async fn ready(&self) -> Result<Ready, ToolError> {
        let mut guard = self.session.lock().await;
        if self.shut.load(Ordering::SeqCst) {
            return Err(ToolError::new(
                ErrorCode::Eunavail,
                format!("MCP server {} was shut down", self.config.name),
            )
            .retryable(false));
        }
        if !guard.as_mut().is_some_and(Session::alive) {
            let stderr = guard.as_ref().map(Session::stderr).unwrap_or_default();
            if let Some(old) = guard.take() {
                old.close(Duration::from_millis(100)).await;
            }
            self.pid.store(0, Ordering::SeqCst);
            tracing::warn!(server = %self.config.name, %stderr, "MCP server is gone; restarting it");
            let (session, _) = connect(&self.config, &self.options, self.client.clone())
                .await
                .map_err(|e| {
                    ToolError::new(
                        ErrorCode::Eunavail,
                        format!(
                            "MCP server {} stopped and could not be restarted: {e}",
                            self.config.name
                        ),
                    )
                    .retryable(true)
                })?;
            self.pid.store(session.pid().unwrap_or(0), Ordering::SeqCst);
            *guard = Some(session);
        }
        let session = guard.as_ref().ok_or_else(|| {
            ToolError::new(
                ErrorCode::Eunavail,
                format!("MCP server {} has no session", self.config.name),
            )
        })?;
        Ok(Ready {
            peer: session.service.peer().clone(),
            record: session.record(),
            broken: Arc::clone(&session.broken),
        })
    }

    /// One `tools/call` (see the crate docs: cancellation, progress, restart).
    async fn call(
        &self,
        tool: &str,
        shown: &str,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other @ (Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_)) => {
                return Err(ToolError::new(
                    ErrorCode::Einval,
                    format!("{shown} takes an object of arguments, not {other}"),
                ));
            }
        };
        let ready = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => return Err(cancelled(shown, false)),
            ready = self.ready() => ready?,
        };
        // Recorded with each call: a resume's fence kills a server that
        // outlived a crash of this process (the warden covers its death too).
        if let (Some(log), Some(record)) = (&ctx.processes, ready.record.clone()) {
            log.started(record);
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let handle = ready
            .peer
            .send_cancellable_request(request, call_options(ctx))
            .await
            .map_err(|e| {
                ready.note(&e);
                service_error(&self.config.name, shown, e)
            })?;
        let id = handle.id.clone();
        // rmcp sends a progress token with every request; its notifications
        // go to the run's sink as this call's.
        let _route = ctx.progress.clone().map(|sink| {
            self.client
                .progress
                .route(handle.progress_token.clone(), &ctx.call_id, sink)
        });
        let response = tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => None,
            response = handle.await_response() => Some(response),
        };
        let Some(response) = response else {
            // Sent (written to the transport) before the call returns.
            let notice = CancelledNotification::new(CancelledNotificationParam::new(
                Some(id),
                Some("cancelled by agentry (deadline, abort or timeout)".into()),
            ));
            let sent =
                tokio::time::timeout(CANCEL_SEND, ready.peer.send_notification(notice.into()))
                    .await
                    .is_ok_and(|r| r.is_ok());
            return Err(cancelled(shown, sent));
        };
        let response = response.map_err(|e| {
            ready.note(&e);
            service_error(&self.config.name, shown, e)
        })?;
        call_result(shown, response, ctx)
    }
}

/// What a `tools/call` answer means for the call.
// rmcp's `ServerResult` is non_exhaustive: a kind it adds is not a call's answer.
#[allow(clippy::wildcard_enum_match_arm)]
fn call_result(
    shown: &str,
    response: ServerResult,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    match response {
        ServerResult::CallToolResult(result) => to_output(shown, result, ctx),
        ServerResult::InputRequiredResult(_) => Err(ToolError::new(
            ErrorCode::Eperm,
            format!("{shown}: the server asked for input (input_required), which agentry does not answer"),
        )
        .retryable(false)),
        ServerResult::DiscoverResult(_)
        | ServerResult::InitializeResult(_)
        | ServerResult::CompleteResult(_)
        | ServerResult::GetPromptResult(_)
        | ServerResult::ListPromptsResult(_)
        | ServerResult::ListResourcesResult(_)
        | ServerResult::ListResourceTemplatesResult(_)
        | ServerResult::ReadResourceResult(_)
        | ServerResult::SubscriptionsListenResult(_)
        | ServerResult::ListToolsResult(_)
        | ServerResult::ListSkillsResult(_)
        | ServerResult::GetSkillResult(_)
        | ServerResult::ElicitResult(_)
        | ServerResult::CreateTaskResult(_)
        | ServerResult::GetTaskResult(_)
        | ServerResult::TaskAckResult(_)
        | ServerResult::EmptyResult(_)
        | ServerResult::CustomResult(_)
        | _ => Err(ToolError::new(
            ErrorCode::Einternal,
            format!("{shown}: the server answered tools/call with something else"),
        )),
    }
}

/// What a call needs from the live session.
struct Ready {
    peer: rmcp::service::Peer<rmcp::service::RoleClient>,
    record: Option<agentry_protocol::ProcessGroupRecord>,
    /// Set on a transport error: the next call reconnects.
    broken: Arc<AtomicBool>,
}

impl Ready {
    /// Marks the session for a reconnect when `e` says the transport failed.
    fn note(&self, e: &ServiceError) {
        if matches!(
            e,
            ServiceError::TransportClosed | ServiceError::TransportSend(_)
        ) {
            self.broken.store(true, Ordering::SeqCst);
        }
    }
}

fn cancelled(shown: &str, notified: bool) -> ToolError {
    let how = if notified {
        "; the server was sent notifications/cancelled"
    } else {
        ""
    };
    ToolError::new(ErrorCode::Ecanceled, format!("{shown} was cancelled{how}"))
}

/// A failed request as the call's error.
// rmcp's `ServiceError` is non_exhaustive: a kind it adds is an internal error.
#[allow(clippy::wildcard_enum_match_arm)]
fn service_error(server: &str, shown: &str, e: ServiceError) -> ToolError {
    match e {
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => ToolError::new(
            ErrorCode::Eunavail,
            format!(
                "{shown}: MCP server {server} closed the connection during the call (it exited or \
                 the connection dropped); the call may or may not have taken effect. The server is \
                 restarted at the next call"
            ),
        )
        .retryable(true),
        ServiceError::McpError(data) => {
            let code = if data.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                ErrorCode::Einval
            } else {
                ErrorCode::Einternal
            };
            ToolError::new(
                code,
                format!(
                    "{shown}: MCP server {server} answered error {}: {}",
                    data.code.0, data.message
                ),
            )
            .retryable(false)
        }
        ServiceError::Timeout { timeout } => ToolError::new(
            ErrorCode::Etimedout,
            format!("{shown}: no answer within {} ms", timeout.as_millis()),
        ),
        other @ (ServiceError::UnexpectedResponse
        | ServiceError::SubscriptionLagged { .. }
        | ServiceError::Cancelled { .. }
        | ServiceError::InputRequiredRoundsExceeded { .. }
        | _) => ToolError::new(ErrorCode::Einternal, format!("{shown}: {other}")),
    }
}

/// A declaration that cannot work, before anything is started.
fn check_config(config: &McpServerConfig) -> Result<(), McpError> {
    let bad = |reason: &str| McpError::Config {
        server: config.name.clone(),
        reason: reason.to_string(),
    };
    if config.name.is_empty() {
        return Err(bad("the server's name is empty"));
    }
    match &config.transport {
        crate::config::McpTransport::Stdio { command, .. } => {
            if command.first().is_none_or(String::is_empty) {
                return Err(bad("the command is empty"));
            }
        }
        crate::config::McpTransport::Http { url, .. } => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad(&format!("the url {url} is not http:// or https://")));
            }
        }
    }
    Ok(())
}

/// The listed tools the declaration offers; an allow-list entry or override
/// naming a tool not offered is an error naming it and what is.
fn offered(config: &McpServerConfig, listed: Vec<McpTool>) -> Result<Vec<McpTool>, McpError> {
    let names: Vec<String> = listed.iter().map(|t| t.name.to_string()).collect();
    let offered: Vec<McpTool> = match &config.tools {
        None => listed,
        Some(allowed) => {
            if let Some(missing) = allowed.iter().find(|a| !names.contains(a)) {
                return Err(McpError::UnknownTool {
                    server: config.name.clone(),
                    tool: missing.clone(),
                    listed: names,
                });
            }
            let allowed: BTreeSet<&str> = allowed.iter().map(String::as_str).collect();
            listed
                .into_iter()
                .filter(|t| allowed.contains(t.name.as_ref()))
                .collect()
        }
    };
    let offered_names: Vec<String> = offered.iter().map(|t| t.name.to_string()).collect();
    if let Some(tool) = config.overrides.keys().find(|k| !offered_names.contains(k)) {
        return Err(McpError::UnknownOverride {
            server: config.name.clone(),
            tool: tool.clone(),
            listed: offered_names,
        });
    }
    Ok(offered)
}

/// One offered tool: calls go through its server.
struct McpServerTool {
    server: Arc<McpServer>,
    /// The server's name for it.
    name: String,
    contract: ToolContract,
}

#[async_trait]
impl Tool for McpServerTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.server
            .call(&self.name, &self.contract.name, args, ctx)
            .await
    }

    /// Time to send `notifications/cancelled` after the token fires.
    fn cancel_grace(&self) -> Duration {
        CANCEL_SEND + Duration::from_millis(50)
    }
}

/// Several servers, started concurrently.
#[derive(Debug, Default)]
pub struct McpServers {
    servers: Vec<Arc<McpServer>>,
}

impl McpServers {
    /// Starts every server at once; if any fails, those started are shut
    /// down and the first failure (in declaration order) is returned.
    pub async fn start_all(
        configs: Vec<McpServerConfig>,
        options: StartOptions,
    ) -> Result<McpServers, McpError> {
        let mut seen = BTreeSet::new();
        for config in &configs {
            if !seen.insert(config.name.clone()) {
                return Err(McpError::Duplicate {
                    server: config.name.clone(),
                });
            }
        }
        let results = futures::future::join_all(
            configs
                .into_iter()
                .map(|config| McpServer::start(config, options.clone())),
        )
        .await;
        let mut servers = Vec::new();
        let mut failure = None;
        for result in results {
            match result {
                Ok(server) => servers.push(server),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let started = McpServers { servers };
        match failure {
            Some(e) => {
                started.shutdown().await;
                Err(e)
            }
            None => Ok(started),
        }
    }

    /// Every server's tools.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.servers.iter().flat_map(McpServer::tools).collect()
    }

    /// The servers, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<McpServer>> {
        self.servers.iter()
    }

    /// Shuts every server down (concurrently).
    pub async fn shutdown(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.shutdown())).await;
    }
}
