//! [`McpServer`]: a started server, its offered tools (and their changes),
//! restart and shutdown.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
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
use tokio::sync::{mpsc, watch};

use crate::config::McpServerConfig;
use crate::content::to_output;
use crate::contract::contract_for;
use crate::error::McpError;
use crate::handler::{Client, ProgressRoutes};
use crate::listing::{Changes, Relisted, offered_at_start, offered_later};
use crate::options::StartOptions;
use crate::session::{Session, connect, list_tools, timed_out};

/// Called after a server's offered tools changed ([`crate::McpServers::on_tools_changed`]).
pub(crate) type Hook = Arc<dyn Fn() + Send + Sync>;

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
    /// The tools offered now (the allow-list applied): as listed at start,
    /// then as each later listing changed them (see `listing.rs`).
    offered: RwLock<Vec<McpTool>>,
    /// One re-listing at a time: an older listing never replaces a newer one.
    relisting: tokio::sync::Mutex<()>,
    /// Bumped after each change of `offered`, once the hooks have run.
    changes: watch::Sender<u64>,
    /// Run after each change of `offered` (a registry to rebuild).
    hooks: Mutex<Vec<Hook>>,
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
    /// `initialize` and every page of `tools/list` (at most `max_tools`
    /// tools), and checks what it lists (names, the allow-list, overrides),
    /// all within `startup_timeout`.
    pub async fn start(
        config: McpServerConfig,
        options: StartOptions,
    ) -> Result<Arc<McpServer>, McpError> {
        let deadline = tokio::time::Instant::now() + config.startup_timeout;
        check_config(&config)?;
        let (list_changed, notices) = mpsc::unbounded_channel();
        let client = Client {
            server: Arc::from(config.name.as_str()),
            sampling: options.sampling.clone(),
            elicitation: options.elicitation.clone(),
            progress: ProgressRoutes::default(),
            list_changed,
        };
        let (session, listed) = connect(&config, &options, client.clone(), deadline).await?;
        // Checking the listing is part of the start: it too must end in time.
        let offered = offered_at_start(&config, listed).and_then(|offered| {
            if tokio::time::Instant::now() > deadline {
                Err(timed_out(&config, session.stderr()))
            } else {
                Ok(offered)
            }
        });
        let offered = match offered {
            Ok(offered) => offered,
            Err(e) => {
                session.close(SHUTDOWN_GRACE).await;
                return Err(e);
            }
        };
        let pid = session.pid().unwrap_or(0);
        let server = Arc::new(McpServer {
            config,
            options,
            client,
            offered: RwLock::new(offered),
            relisting: tokio::sync::Mutex::new(()),
            changes: watch::Sender::new(0),
            hooks: Mutex::new(Vec::new()),
            session: tokio::sync::Mutex::new(Some(session)),
            shut: AtomicBool::new(false),
            pid: AtomicU32::new(pid),
        });
        tokio::spawn(follow_list_changes(Arc::downgrade(&server), notices));
        Ok(server)
    }

    /// The declaration it was started from.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// Its tools, named `<server>.<tool>`, the allow-list applied, with
    /// contracts from their annotations and the overrides.
    ///
    /// These are the tools offered now: after `tools/list_changed` or a
    /// restart they may differ (see [`McpServer::tools_changed`]). A tool
    /// taken from an earlier list whose server no longer lists it answers
    /// `ENOTOOL` naming it.
    pub fn tools(self: &Arc<Self>) -> Vec<Arc<dyn Tool>> {
        self.read_offered()
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

    /// Changes each time the offered tools change (a `tools/list_changed`
    /// re-listed, a restarted server listing others), after the hooks of
    /// [`crate::McpServers::on_tools_changed`] have run.
    pub fn tools_changed(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn read_offered(&self) -> std::sync::RwLockReadGuard<'_, Vec<McpTool>> {
        self.offered.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn add_hook(&self, hook: Hook) {
        self.hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hook);
    }

    /// Lists the tools again (the server said they changed) and applies the
    /// listing. A failed listing (an error, more than `max_tools`, longer
    /// than `startup_timeout`) keeps the tools as they were.
    async fn relist(&self) {
        let _one = self.relisting.lock().await;
        let peer = match self.session.lock().await.as_ref() {
            Some(session) if !self.shut.load(Ordering::SeqCst) => session.service.peer().clone(),
            Some(_) | None => return,
        };
        let listing = list_tools(&peer, self.config.max_tools);
        let listed = tokio::time::timeout(self.config.startup_timeout, listing)
            .await
            .unwrap_or_else(|_| {
                Err(crate::session::ListFailure::Request(format!(
                    "no full listing within {} ms (startup_timeout)",
                    self.config.startup_timeout.as_millis()
                )))
            });
        match listed {
            Ok(listed) => self.apply(listed, Relisted::ListChanged),
            Err(e) => tracing::warn!(
                server = %self.config.name,
                error = %e,
                "MCP server {} sent tools/list_changed but tools/list failed; its tools stay as they were",
                self.config.name
            ),
        }
    }

    /// Offers `listed` (the allow-list applied) from now on, if it changes
    /// anything: logged, the hooks run, then `tools_changed` moves.
    fn apply(&self, listed: Vec<McpTool>, why: Relisted) {
        let now = offered_later(&self.config, listed);
        let changes = {
            let mut offered = self.offered.write().unwrap_or_else(PoisonError::into_inner);
            let changes = Changes::between(&self.config, &offered, &now);
            if changes.is_empty() {
                return;
            }
            *offered = now;
            changes
        };
        changes.log(&self.config.name, why);
        let hooks = self
            .hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for hook in hooks {
            hook();
        }
        self.changes.send_modify(|n| *n += 1);
    }

    /// The error of a call to a tool the server no longer lists.
    fn not_offered(&self, tool: &str, shown: &str) -> ToolError {
        let listed: Vec<String> = self
            .read_offered()
            .iter()
            .map(|t| self.config.tool_name(&t.name))
            .collect();
        ToolError::new(
            ErrorCode::Enotool,
            format!(
                "{shown}: MCP server {} no longer lists tool {tool} (its tool list changed during the run)",
                self.config.name
            ),
        )
        .with_action(format!(
            "call one of its tools offered now: {}",
            listed.join(", ")
        ))
        .retryable(false)
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
        self.hooks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
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
            let deadline = tokio::time::Instant::now() + self.config.startup_timeout;
            let (session, listed) =
                connect(&self.config, &self.options, self.client.clone(), deadline)
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
            // The new process may list other tools, or other schemas.
            self.apply(listed, Relisted::Restarted);
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
        let _route = ctx.run.progress.clone().map(|sink| {
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
        ServiceError::McpError(data) if crate::framing::too_large(&data) => ToolError::new(
            ErrorCode::Eunavail,
            format!(
                "{shown}: MCP server {server}'s reply is over {} MiB, more than an MCP client takes in one message; it was dropped",
                crate::framing::MAX_LINE >> 20
            ),
        )
        .with_action("ask for less at a time (a narrower query, a smaller page)")
        .retryable(false),
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
            if config.sandbox.is_some() {
                return Err(bad("sandbox: for a stdio server only"));
            }
        }
    }
    Ok(())
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

    /// A stdio server's tools run in its process, under its sandbox.
    fn sandbox(&self) -> Option<agentry_sandbox::SandboxOverride> {
        let config = self.server.config();
        let stdio = matches!(config.transport, crate::config::McpTransport::Stdio { .. });
        stdio.then(|| config.sandbox.clone().unwrap_or_default())
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        // A registry built before the server's list changed still holds it.
        if !self.server.offers(&self.name) {
            return Err(self.server.not_offered(&self.name, &self.contract.name));
        }
        self.server
            .call(&self.name, &self.contract.name, args, ctx)
            .await
    }

    /// Time to send `notifications/cancelled` after the token fires.
    fn cancel_grace(&self) -> Duration {
        CANCEL_SEND + Duration::from_millis(50)
    }
}

impl McpServer {
    /// Whether the server offers its tool `tool` now.
    fn offers(&self, tool: &str) -> bool {
        self.read_offered().iter().any(|t| t.name == tool)
    }
}

/// Re-lists `server`'s tools at each `tools/list_changed` (a burst is one
/// re-listing), until the server is gone.
async fn follow_list_changes(server: Weak<McpServer>, mut notices: mpsc::UnboundedReceiver<()>) {
    while notices.recv().await.is_some() {
        while notices.try_recv().is_ok() {}
        let Some(server) = server.upgrade() else {
            return;
        };
        server.relist().await;
    }
}
