//! A stdio MCP server's process group does not outlive the process that
//! started it: the test runs itself as the host in a child process, has the
//! server start `sleep 600` in its group (the server itself would exit on
//! its stdin's EOF; the sleeper would not), SIGKILLs the host, and waits for
//! the sleeper to be gone (the process warden kills the group).

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use agentry_mcp::{McpServer, StartOptions};
use serde_json::json;
use support::{Run, alive, config, eventually, tool};
use tokio_util::sync::CancellationToken;

const HOST_MODE: &str = "AGENTRY_MCP_TEST_HOST";
const TEST: &str = "a_stdio_server_dies_with_its_host";

#[tokio::test]
async fn a_stdio_server_dies_with_its_host() {
    if let Some(report) = std::env::var_os(HOST_MODE) {
        return host(report.into()).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("sleeper-pid");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--test-threads=1"])
        .env(HOST_MODE, &report)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pid = None;
    eventually(
        Duration::from_secs(20),
        "the host reports the sleeper's pid",
        || {
            pid = std::fs::read_to_string(&report)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            pid.is_some()
        },
    )
    .await;
    let pid = pid.unwrap();
    assert!(alive(pid));
    child.kill().unwrap();
    child.wait().unwrap();
    eventually(
        Duration::from_secs(20),
        "the server's group died with its host",
        || !alive(pid),
    )
    .await;
}

/// The host's side: start a server and its sleeper, write the sleeper's pid
/// to `report`, wait to be killed.
async fn host(report: PathBuf) {
    let run = Run::new();
    let server = McpServer::start(config("t", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let ctx = run.ctx("c1", CancellationToken::new());
    let out = tool(&server, "spawn").call(json!({}), &ctx).await.unwrap();
    // Written whole, then renamed: the test never reads half a pid.
    let partial = report.with_extension("partial");
    std::fs::write(&partial, out.data.as_str().unwrap()).unwrap();
    std::fs::rename(&partial, &report).unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}
