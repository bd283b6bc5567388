//! agentry-mcp against a real MCP server over real TLS (streamable HTTP, a CA
//! made for the test): trusted through the declaration's `ca_cert`, refused
//! without it with an error that says how to trust the CA. `SSL_CERT_FILE` is
//! exercised through the binary (`agentry-cli/tests/cli/mcp_tls.rs`): it is
//! process-wide.

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

// The models crate's TLS helpers, shared by path (they name `server::TestError`).
#[allow(dead_code, reason = "the models crate's own tests use the rest")]
#[path = "../../agentry-models/tests/suite/tls_server.rs"]
mod tls_server;
mod server {
    pub type TestError = Box<dyn std::error::Error + Send + Sync>;
}
#[path = "support/https.rs"]
mod https;

use std::path::PathBuf;
use std::time::Duration;

use agentry_mcp::{McpError, McpServer, McpServerConfig, McpTransport, StartOptions};
use serde_json::json;
use support::{Run, eventually, tool};
use tls_server::TestCa;
use tokio_util::sync::CancellationToken;

fn declared(url: &str, ca_cert: Option<PathBuf>) -> McpServerConfig {
    McpServerConfig::new(
        "secure",
        McpTransport::Http {
            url: url.to_string(),
            headers: Default::default(),
            ca_cert,
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_server_is_trusted_through_ca_cert_and_refused_without() {
    // A CA made now is in no bundle: whatever SSL_CERT_FILE names (a
    // system bundle, often), only ca_cert can make the server trusted.
    let ca = TestCa::new("agentry MCP test CA").unwrap();
    let server = https::HttpsMcp::start(&ca).await.unwrap();
    assert!(server.url.starts_with("https://127.0.0.1:"));
    let run = Run::new();
    let pem = ca.write_pem(run.workdir(), "ca.pem").unwrap();

    // Trusted: the tools list and answer over TLS.
    let started = McpServer::start(
        declared(&server.url, Some(pem)),
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap();
    let out = tool(&started, "echo")
        .call(
            json!({"text": "over tls"}),
            &run.ctx("c1", CancellationToken::new()),
        )
        .await
        .unwrap();
    assert_eq!(out.data, json!("echo: over tls"));
    started.shutdown().await;
    assert_eq!(server.tls.failed_handshakes(), 0);

    // Untrusted: refused at the handshake, the error naming the server, the
    // URL, rustls' reason and the two ways to trust the CA.
    let err = McpServer::start(
        declared(&server.url, None),
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::Tls { .. }), "{err:?}");
    let text = err.to_string();
    for part in [
        "MCP server secure",
        server.url.as_str(),
        "invalid peer certificate",
        "SSL_CERT_FILE",
        "ca_cert",
    ] {
        assert!(text.contains(part), "{part:?} missing from: {text}");
    }
    // Counted by the server's accept task, which may finish after the client.
    eventually(
        Duration::from_secs(10),
        "the server saw the refused handshake",
        || server.tls.failed_handshakes() > 0,
    )
    .await;

    // A CA file that is not PEM is named, before anything is sent.
    let junk = run.workdir().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let err = McpServer::start(
        declared(&server.url, Some(junk)),
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            &err,
            McpError::CaCert {
                field: "ca_cert",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("junk.pem"), "{err}");
}
