//! A real MCP server over real TLS: rmcp's server side serving streamable
//! HTTP at `/mcp` (one tool, `echo`), behind the models crate's TLS listener
//! (`tls_server.rs`: a CA made per test, a certificate it signs for
//! 127.0.0.1). Shared by path with the CLI's tests; expects the including
//! crate to have `tls_server` and `server::TestError` at its root.

// Test-only helper: a failed unwrap is the failure report.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::server::TestError;
use crate::tls_server::{TestCa, TlsListener, TlsServer};

/// The server's one tool: `echo {text}` answers "echo: <text>".
#[derive(Clone)]
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": "echo", "description": "Echo.",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}
        }))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let result: CallToolResult = serde_json::from_value(
            json!({"content": [{"type": "text", "text": format!("echo: {text}")}]}),
        )
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(CallToolResponse::Complete(result))
    }
}

/// The HTTPS MCP server; it stops with the test's runtime (or on drop).
pub struct HttpsMcp {
    /// `https://127.0.0.1:PORT/mcp`.
    pub url: String,
    /// What the TLS listener saw (handshakes that failed).
    pub tls: TlsServer,
    task: JoinHandle<()>,
}

impl HttpsMcp {
    /// Serves on 127.0.0.1 (a free port) with a certificate `ca` signs.
    pub async fn start(ca: &TestCa) -> Result<HttpsMcp, TestError> {
        let tls = TlsServer::new(ca.server_config()?);
        let listener = TlsListener::bind(tls.clone()).await?;
        let url = format!("https://{}/mcp", listener.local_addr());
        let service: StreamableHttpService<Echo, LocalSessionManager> = StreamableHttpService::new(
            || Ok(Echo),
            Arc::default(),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(HttpsMcp { url, tls, task })
    }
}

impl Drop for HttpsMcp {
    fn drop(&mut self) {
        self.task.abort();
    }
}
