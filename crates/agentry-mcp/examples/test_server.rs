//! A real MCP server (rmcp's server side, on stdio) for agentry-mcp's tests.
//!
//! `test_server` serves these tools:
//! - `read` (readOnlyHint, idempotentHint), `write` (unannotated),
//!   `undoable` (destructiveHint: false): echo their `text` argument;
//! - `sum`: `{a, b}` → structured content `{"sum": a+b}` (has an outputSchema);
//! - `fail`: `isError: true` with the text "the widget is broken";
//! - `image`: a 1x1 PNG and a caption;
//! - `slow`: waits `seconds` (default 60); when the client cancels it, it
//!   writes `started`, then on cancellation `cancelled <request id>`, to the
//!   file named by `TEST_CANCEL_FILE`;
//! - `progress`: three progress notifications (1/3, 2/3, 3/3), then "done";
//! - `crash`: the process exits at once (status 3);
//! - `sample`: asks the client for a completion (sampling/createMessage) and
//!   returns what happened as text;
//! - `elicit`: asks the client for input (elicitation/create), likewise;
//! - `spawn`: starts `sleep 600` in the server's process group, returns its pid;
//! - `env`: the value of the variable named `name`, or "(unset)";
//! - `meta`: the request's `_meta` as structured content (what the client sent
//!   besides the arguments: its progress token, trace context);
//! - `retool`: `{remove: [names], add: [names]}` changes the tools it lists
//!   (an added tool echoes like `read`, read-only), sends
//!   `notifications/tools/list_changed`, then answers "retooled".
//!
//! - `sh`: runs `sh -c <command>` in the server's working directory and
//!   answers `{"exit_code", "stdout", "stderr"}` as JSON text (what a server
//!   that runs commands can do: the sandbox tests' attacks);
//! - `big`: a text reply of `bytes` bytes (default 17 MiB: past the 16 MiB a
//!   client takes in one message).
//!
//! With `TEST_MANY_TOOLS=N` it also lists `many00000`… (N read-only echo
//! tools), in pages of 1,000 (`tools/list`'s cursor is the next index). With
//! `TEST_HOSTILE_NAMES` set it also lists tools whose names break MCP's rule:
//! with ESC and BEL, with U+202E, with a space, 129 characters long.
//!
//! With `TEST_SCHEMA_FILE` set to a file that exists when the server starts,
//! `read` requires its `text` (a restarted server listing another schema).
//! `test_server silent` prints "oops: not speaking MCP" on stderr and never
//! answers. With `TEST_REFUSE_FILE` set, a start while that file exists prints
//! "refusing to start" on stderr and exits 1 (a restart that fails).

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, ServerConfig,
    ServerRequest, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// A 1x1 transparent PNG.
const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// The tools `retool` took away and added.
#[derive(Default)]
struct TestServer {
    retooled: Mutex<Retooled>,
}

#[derive(Default)]
struct Retooled {
    removed: BTreeSet<String>,
    added: Vec<String>,
}

impl TestServer {
    /// The tools listed now.
    fn listed(&self) -> Vec<Tool> {
        let retooled = self.retooled.lock().unwrap_or_else(PoisonError::into_inner);
        let added = retooled.added.iter().filter_map(|name| {
            serde_json::from_value(json!({"name": name, "description": "Echo (added).",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
                "annotations": {"readOnlyHint": true}}))
            .ok()
        });
        tools()
            .into_iter()
            .filter(|t| !retooled.removed.contains(t.name.as_ref()))
            .chain(added)
            .collect()
    }

    fn lists(&self, name: &str) -> bool {
        self.listed().iter().any(|t| t.name == name)
    }

    async fn retool(
        &self,
        request: &CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let names = |field: &str| -> Vec<String> {
            arg(request, field)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        {
            let mut retooled = self.retooled.lock().unwrap_or_else(PoisonError::into_inner);
            retooled.removed.extend(names("remove"));
            retooled.added.extend(names("add"));
        }
        // Before the answer, as a server whose call changed its tools would.
        let _ = context.peer.notify_tool_list_changed().await;
        text("retooled")
    }
}

fn tools() -> Vec<Tool> {
    let read_schema = if std::env::var_os("TEST_SCHEMA_FILE")
        .is_some_and(|f| std::path::Path::new(&f).exists())
    {
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    } else {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    };
    let text_schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    let empty = json!({"type": "object", "properties": {}});
    let defs = [
        json!({"name": "read", "description": "Echo (read-only).", "inputSchema": read_schema,
               "annotations": {"readOnlyHint": true, "idempotentHint": true}}),
        json!({"name": "write", "description": "Echo (unannotated).", "inputSchema": text_schema}),
        json!({"name": "undoable", "description": "Echo (not destructive).", "inputSchema": text_schema,
               "annotations": {"destructiveHint": false}}),
        json!({"name": "sum", "description": "Add two numbers.",
               "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                               "required": ["a", "b"]},
               "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}, "required": ["sum"]},
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "fail", "description": "Always fails.", "inputSchema": empty}),
        json!({"name": "image", "description": "A tiny image.", "inputSchema": empty,
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "slow", "description": "Waits.",
               "inputSchema": {"type": "object", "properties": {"seconds": {"type": "number"}}}}),
        json!({"name": "progress", "description": "Reports progress.", "inputSchema": empty,
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "crash", "description": "Exits the server.", "inputSchema": empty}),
        json!({"name": "sample", "description": "Asks the client's model.", "inputSchema": empty}),
        json!({"name": "elicit", "description": "Asks the client's user.", "inputSchema": empty}),
        json!({"name": "spawn", "description": "Starts `sleep 600` in the server's group.", "inputSchema": empty}),
        json!({"name": "env", "description": "Reads a variable.",
               "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "meta", "description": "Echoes the request's _meta.", "inputSchema": empty,
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "sh", "description": "Runs a shell command.",
               "inputSchema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}),
        json!({"name": "big", "description": "A large reply.",
               "inputSchema": {"type": "object", "properties": {"bytes": {"type": "number"}}},
               "annotations": {"readOnlyHint": true}}),
        json!({"name": "retool", "description": "Changes the tools listed.",
               "inputSchema": {"type": "object", "properties": {
                   "remove": {"type": "array", "items": {"type": "string"}},
                   "add": {"type": "array", "items": {"type": "string"}}}},
               "annotations": {"destructiveHint": false}}),
    ];
    let hostile = std::env::var_os("TEST_HOSTILE_NAMES").map(|_| {
        [
            "bell\x07\x1b[2Jclear",
            "evil\u{202e}txt.exe",
            "with space",
            &"x".repeat(129),
        ]
        .map(|name| json!({"name": name, "description": "Badly named.", "inputSchema": empty}))
    });
    defs.into_iter()
        .chain(hostile.into_iter().flatten())
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
}

/// `TEST_MANY_TOOLS`: how many extra tools to list.
fn many() -> usize {
    std::env::var("TEST_MANY_TOOLS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// One page of the listing: the fixed tools first, then 1,000 of the many.
fn page(listed: Vec<Tool>, cursor: Option<&str>) -> ListToolsResult {
    const PAGE: usize = 1_000;
    let from: usize = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
    let first = if from == 0 { listed } else { Vec::new() };
    let to = (from + PAGE).min(many());
    let extra = (from..to).filter_map(|i| {
        serde_json::from_value(
            json!({"name": format!("many{i:05}"), "description": "Echo (many).",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            "annotations": {"readOnlyHint": true}}),
        )
        .ok()
    });
    let mut result = ListToolsResult::with_all_items(first.into_iter().chain(extra).collect());
    result.next_cursor = (to < many()).then(|| to.to_string());
    result
}

fn result(value: Value) -> Result<CallToolResponse, ErrorData> {
    serde_json::from_value::<CallToolResult>(value)
        .map(CallToolResponse::Complete)
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

fn text(t: impl Into<String>) -> Result<CallToolResponse, ErrorData> {
    result(json!({"content": [{"type": "text", "text": t.into()}]}))
}

/// `sh -c command`, its exit code and output as JSON text.
fn sh(command: &str) -> Result<CallToolResponse, ErrorData> {
    match std::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) => text(
            json!({
                "exit_code": out.status.code(),
                "stdout": String::from_utf8_lossy(&out.stdout),
                "stderr": String::from_utf8_lossy(&out.stderr),
            })
            .to_string(),
        ),
        Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
    }
}

fn arg<'a>(request: &'a CallToolRequestParams, name: &str) -> Option<&'a Value> {
    request.arguments.as_ref().and_then(|a| a.get(name))
}

impl TestServer {
    async fn slow(
        &self,
        request: &CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let seconds = arg(request, "seconds")
            .and_then(Value::as_f64)
            .unwrap_or(60.0);
        let marker = std::env::var("TEST_CANCEL_FILE").ok();
        if let Some(path) = &marker {
            let _ = std::fs::write(path, "started");
        }
        tokio::select! {
            () = context.ct.cancelled() => {
                if let Some(path) = &marker {
                    let _ = std::fs::write(path, format!("cancelled {}", context.id));
                }
                Err(ErrorData::internal_error("cancelled", None))
            }
            () = tokio::time::sleep(Duration::from_secs_f64(seconds)) => text("slept"),
        }
    }

    async fn progress(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(token) = context.meta.get_progress_token() {
            for step in 1..=3 {
                let params: ProgressNotificationParam = serde_json::from_value(json!({
                    "progressToken": token, "progress": step, "total": 3, "message": format!("step {step}")
                }))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                let _ = context.peer.notify_progress(params).await;
                // Like a real long operation: time between reports and before
                // the result (the client handles each notification on a task
                // of its own; back to back they may be handled after the reply).
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        text("done")
    }

    async fn ask(
        &self,
        request: Value,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let request: ServerRequest = match serde_json::from_value(request) {
            Ok(r) => r,
            Err(e) => return text(format!("bad request: {e}")),
        };
        match context.peer.send_request(request).await {
            Ok(answer) => text(format!("answered: {}", json!(answer))),
            Err(e) => text(format!("client error: {e}")),
        }
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let cursor = request.and_then(|r| r.cursor);
        Ok(page(self.listed(), cursor.as_deref()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.lists(&request.name) {
            return Err(ErrorData::invalid_params(
                format!("no tool {}", request.name),
                None,
            ));
        }
        let added = self
            .retooled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .added
            .contains(&request.name.to_string());
        if added {
            let t = arg(&request, "text").and_then(Value::as_str).unwrap_or("");
            return text(format!("{}: {t}", request.name));
        }
        match request.name.as_ref() {
            "read" | "write" | "undoable" => {
                let t = arg(&request, "text").and_then(Value::as_str).unwrap_or("");
                text(format!("{}: {t}", request.name))
            }
            "sum" => {
                let a = arg(&request, "a").and_then(Value::as_f64).unwrap_or(0.0);
                let b = arg(&request, "b").and_then(Value::as_f64).unwrap_or(0.0);
                result(json!({"content": [{"type": "text", "text": format!("{}", a + b)}],
                              "structuredContent": {"sum": a + b}}))
            }
            "fail" => result(json!({"content": [{"type": "text", "text": "the widget is broken"}], "isError": true})),
            "image" => result(json!({"content": [
                {"type": "text", "text": "a pixel"},
                {"type": "image", "data": PNG, "mimeType": "image/png"}
            ]})),
            "slow" => self.slow(&request, context).await,
            "progress" => self.progress(context).await,
            "crash" => std::process::exit(3),
            "sample" => self.ask(json!({"method": "sampling/createMessage", "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10
            }}), context).await,
            "elicit" => self.ask(json!({"method": "elicitation/create", "params": {
                "mode": "form", "message": "name?", "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
            }}), context).await,
            "spawn" => match std::process::Command::new("sleep")
                .arg("600")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                Ok(child) => text(child.id().to_string()),
                Err(e) => Err(ErrorData::internal_error(e.to_string(), None)),
            },
            "env" => {
                let name = arg(&request, "name").and_then(Value::as_str).unwrap_or("");
                text(std::env::var(name).unwrap_or_else(|_| "(unset)".into()))
            }
            "meta" => {
                let meta = Value::Object(context.meta.0.0.clone());
                result(json!({"content": [{"type": "text", "text": meta.to_string()}],
                              "structuredContent": {"meta": meta}}))
            }
            "retool" => self.retool(&request, context).await,
            "sh" => sh(arg(&request, "command").and_then(Value::as_str).unwrap_or("")),
            "big" => {
                let bytes = arg(&request, "bytes")
                    .and_then(Value::as_u64)
                    .unwrap_or(17 << 20);
                text("x".repeat(usize::try_from(bytes).unwrap_or(0)))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Ok(path) = std::env::var("TEST_REFUSE_FILE")
        && std::path::Path::new(&path).exists()
    {
        eprintln!("refusing to start: {path} exists");
        std::process::exit(1);
    }
    if std::env::args().nth(1).as_deref() == Some("silent") {
        eprintln!("oops: not speaking MCP");
        tokio::time::sleep(Duration::from_secs(600)).await;
        return Ok(());
    }
    let service = TestServer::default()
        .serve(rmcp::transport::stdio())
        .await?;
    service.waiting().await?;
    Ok(())
}
