//! A server whose tools change while it runs (examples/test_server.rs, a real
//! rmcp server on stdio): `tools/list_changed` re-lists them, a restarted
//! server's listing is compared with the one before.

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry_mcp::{McpServer, McpServers, StartOptions};
use agentry_protocol::ErrorCode;
use serde_json::json;
use support::{Run, config, tool, with_env};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(20);

fn names(server: &Arc<McpServer>) -> Vec<String> {
    let mut names: Vec<String> = server.tools().iter().map(|t| t.contract().name).collect();
    names.sort();
    names
}

/// Waits (bounded) for the server's offered tools to change once more.
async fn changed(rx: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::time::timeout(LIMIT, rx.changed())
        .await
        .expect("the tools change within the limit")
        .unwrap();
}

/// `retool` drops `write` and adds `fresh`, then the server sends
/// `tools/list_changed`: the tools are listed again, a handle to the dropped
/// tool answers ENOTOOL naming it, the new one answers, and the hook of
/// `on_tools_changed` ran before `tools_changed` moved. With an allow-list,
/// a new tool it does not name is not offered.
#[tokio::test]
async fn list_changed_relists_the_tools() {
    let run = Run::new();
    let mut allowing = config("a", &[]);
    allowing.tools = Some(["read", "retool"].map(String::from).to_vec());
    let servers = McpServers::start_all(
        vec![config("t", &[]), allowing],
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap();
    let server = servers.iter().next().unwrap().clone();
    let allowing = servers.iter().nth(1).unwrap().clone();
    let seen: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let hook_seen = Arc::clone(&seen);
    servers.on_tools_changed(move |servers| {
        let mut names: Vec<String> = servers
            .tools()
            .iter()
            .map(|t| t.contract().name)
            .filter(|n| n.starts_with("t.") && !TEST_TOOLS.contains(&n.as_str()))
            .collect();
        names.sort();
        hook_seen.lock().unwrap().push(names);
    });
    assert!(names(&server).contains(&"t.write".to_string()));
    let mut changes = server.tools_changed();
    let write = tool(&server, "write");
    let ctx = run.ctx("c1", CancellationToken::new());

    let out = tool(&server, "retool")
        .call(json!({"remove": ["write"], "add": ["fresh"]}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("retooled"));
    changed(&mut changes).await;

    let listed = names(&server);
    assert!(listed.contains(&"t.fresh".to_string()), "{listed:?}");
    assert!(!listed.contains(&"t.write".to_string()), "{listed:?}");
    // The hook saw the new tools (beyond the test server's fixed ones).
    assert_eq!(*seen.lock().unwrap(), [vec!["t.fresh".to_string()]]);
    let err = write.call(json!({"text": "x"}), &ctx).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Enotool, "{err}");
    assert!(!err.retryable);
    assert!(
        err.message.contains("t.write") && err.message.contains("no longer lists tool write"),
        "{err}"
    );
    assert!(
        err.suggested_action
            .as_deref()
            .is_some_and(|a| a.contains("t.fresh")),
        "{err:?}"
    );
    let out = tool(&server, "fresh")
        .call(json!({"text": "hi"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("fresh: hi"));

    // The allow-list still applies: `other` is not offered (`read` going
    // makes the change one to wait for).
    let mut changes = allowing.tools_changed();
    tool(&allowing, "retool")
        .call(json!({"add": ["other"], "remove": ["read"]}), &ctx)
        .await
        .unwrap();
    changed(&mut changes).await;
    assert_eq!(names(&allowing), ["a.retool"]);
    servers.shutdown().await;
}

/// The test server's tools before any `retool` (the hook's view leaves them out).
const TEST_TOOLS: [&str; 17] = [
    "t.read",
    "t.write",
    "t.undoable",
    "t.sum",
    "t.fail",
    "t.image",
    "t.slow",
    "t.progress",
    "t.crash",
    "t.sample",
    "t.elicit",
    "t.spawn",
    "t.env",
    "t.meta",
    "t.sh",
    "t.big",
    "t.retool",
];

/// What a test's tracing subscriber wrote.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The server dies; the one started in its place lists `read` with another
/// schema (`text` now required): the change is logged as a warning naming
/// the tool, and the tool is offered with the new schema.
#[tokio::test]
async fn a_restarted_server_listing_another_schema_is_logged_and_used() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    // This test's thread only (a current-thread runtime: every task of the
    // test runs on it).
    let _guard = tracing::subscriber::set_default(subscriber);

    let run = Run::new();
    let schema_file = run.workdir().join("new-schema");
    let declared = with_env(
        config("t", &[]),
        "TEST_SCHEMA_FILE",
        schema_file.to_str().unwrap(),
    );
    let server = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let schema = |server: &Arc<McpServer>| tool(server, "read").contract().input_schema;
    assert_eq!(schema(&server).get("required"), None);
    let mut changes = server.tools_changed();
    let ctx = run.ctx("c1", CancellationToken::new());

    std::fs::write(&schema_file, "").unwrap();
    let err = tool(&server, "crash")
        .call(json!({}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eunavail, "{err}");
    // Restarted for this call, which goes through; the new listing is applied.
    let out = tool(&server, "read")
        .call(json!({"text": "again"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("read: again"));
    changed(&mut changes).await;
    assert_eq!(schema(&server)["required"], json!(["text"]));

    let logged = captured.text();
    let line = logged
        .lines()
        .find(|l| l.contains("tool read changed"))
        .unwrap_or_else(|| panic!("no warning naming read: {logged}"));
    assert!(
        line.contains("WARN") && line.contains("it was restarted"),
        "{line}"
    );
    // Only read changed: no other tool is named.
    assert_eq!(
        logged
            .lines()
            .filter(|l| l.contains(" changed its "))
            .count(),
        1,
        "{logged}"
    );
    server.shutdown().await;
}
