//! agentry-mcp against `@modelcontextprotocol/server-everything`, the MCP
//! reference server, over stdio and streamable HTTP. Needs
//! `MCP_EVERYTHING_DIR` (the directory whose `node_modules` holds it; CI's
//! `.ci/run` installs it into `.ci/peers`); without it these tests fail.
//!
//! Run: `MCP_EVERYTHING_DIR=$PWD/.ci/peers cargo test -p agentry-mcp --test everything -- --ignored`

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_mcp::{McpServer, McpServerConfig, McpTransport, StartOptions};
use agentry_protocol::ErrorCode;
use agentry_protocol::tool::Effect;
use serde_json::json;
use support::{Run, alive, eventually, tool};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(30);

fn server_bin() -> PathBuf {
    let dir = std::env::var_os("MCP_EVERYTHING_DIR")
        .expect("MCP_EVERYTHING_DIR is not set: point it at the directory holding node_modules/@modelcontextprotocol/server-everything (see .ci/run)");
    let bin = PathBuf::from(dir).join("node_modules/.bin/mcp-server-everything");
    assert!(bin.exists(), "{} is missing", bin.display());
    bin
}

/// Lists the tools, then calls echo, get-sum, get-structured-content and a
/// long-running operation cancelled by the token.
async fn exercise(server: &Arc<McpServer>, run: &Run) {
    let names: Vec<String> = server.tools().iter().map(|t| t.contract().name).collect();
    for expected in [
        "echo",
        "get-sum",
        "get-structured-content",
        "trigger-long-running-operation",
    ] {
        assert!(
            names.contains(&format!("ev.{expected}")),
            "{expected} not in {names:?}"
        );
    }
    let structured = tool(server, "get-structured-content");
    assert_eq!(structured.contract().effect, Effect::ReadOnly);
    let ctx = run.ctx("c1", CancellationToken::new());

    let out = tool(server, "echo")
        .call(json!({"message": "hi there"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("Echo: hi there"));
    let out = tool(server, "get-sum")
        .call(json!({"a": 2, "b": 3}), &ctx)
        .await
        .unwrap();
    assert!(out.data.as_str().unwrap().contains('5'), "{}", out.data);
    let out = structured
        .call(json!({"location": "Chicago"}), &ctx)
        .await
        .unwrap();
    assert!(
        out.data["temperature"].is_number() && out.data["conditions"].is_string(),
        "{}",
        out.data
    );

    let cancel = CancellationToken::new();
    let ctx = run.ctx("long", cancel.clone());
    let long = tool(server, "trigger-long-running-operation");
    let call = tokio::spawn(async move {
        long.call(json!({"duration": 120, "steps": 120}), &ctx)
            .await
    });
    eventually(LIMIT, "a progress report of the long operation", || {
        run.progress
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|(call, _)| call == "long")
    })
    .await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let err = tokio::time::timeout(LIMIT, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Ecanceled, "{err}");
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(10),
        "{:?}",
        cancelled_at.elapsed()
    );
}

#[tokio::test]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn server_everything_over_stdio() {
    let bin = server_bin();
    let run = Run::new();
    let config = McpServerConfig::new(
        "ev",
        McpTransport::Stdio {
            command: vec!["node".into(), bin.display().to_string(), "stdio".into()],
            env: Default::default(),
        },
    );
    let server = McpServer::start(config, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let pid = server.pid().unwrap();
    exercise(&server, &run).await;
    server.shutdown().await;
    assert!(!alive(pid), "no server process after shutdown");
}

/// The HTTP server, made to listen on 127.0.0.1 only (it listens on every
/// interface by itself): a preload patches `listen` to add the host.
struct HttpServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const LOOPBACK_PRELOAD: &str = r#"
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
"#;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn start_http(bin: &PathBuf, port: u16) -> HttpServer {
    let dir = tempfile::tempdir().unwrap();
    let preload = dir.path().join("loopback.cjs");
    std::fs::write(&preload, LOOPBACK_PRELOAD).unwrap();
    let child = Command::new("node")
        .arg("--require")
        .arg(&preload)
        .arg(bin)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = HttpServer {
        child,
        port,
        _dir: dir,
    };
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < LIMIT,
            "server-everything did not listen on 127.0.0.1:{port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server
}

#[tokio::test]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn server_everything_over_streamable_http() {
    let bin = server_bin();
    let http = start_http(&bin, free_port()).await;
    let run = Run::new();
    let mut headers = std::collections::BTreeMap::new();
    headers.insert("X-Agentry-Test".to_string(), "${PATH}".to_string());
    let config = McpServerConfig::new(
        "ev",
        McpTransport::Http {
            url: format!("http://127.0.0.1:{}/mcp", http.port),
            headers,
            ca_cert: None,
        },
    );
    let server = McpServer::start(config, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    assert_eq!(server.pid(), None);
    exercise(&server, &run).await;
    server.shutdown().await;
}

#[tokio::test]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn an_http_server_that_went_away_is_reconnected_at_the_next_call() {
    let bin = server_bin();
    let port = free_port();
    let http = start_http(&bin, port).await;
    let run = Run::new();
    let config = McpServerConfig::new(
        "ev",
        McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: Default::default(),
            ca_cert: None,
        },
    );
    let server = McpServer::start(config, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let echo = tool(&server, "echo");
    let ctx = run.ctx("c1", CancellationToken::new());
    assert!(echo.call(json!({"message": "1"}), &ctx).await.is_ok());

    drop(http);
    let err = echo.call(json!({"message": "2"}), &ctx).await.unwrap_err();
    assert_eq!(
        (err.code, err.retryable),
        (ErrorCode::Eunavail, true),
        "{err}"
    );

    // Back on the same port (a new process, so a new MCP session).
    let _http = start_http(&bin, port).await;
    let out = echo.call(json!({"message": "3"}), &ctx).await.unwrap();
    assert_eq!(out.data, json!("Echo: 3"));
    server.shutdown().await;
}
