//! agentry-mcp against a real MCP server over stdio (examples/test_server.rs).

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry_mcp::{ContractOverride, McpError, McpServer, McpServers, StartOptions};
use agentry_protocol::ErrorCode;
use agentry_protocol::tool::{Effect, Idempotency};
use serde_json::json;
use support::{Run, alive, config, eventually, tool, with_env};
use tokio_util::sync::CancellationToken;

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn contracts_come_from_annotations_and_overrides() {
    let run = Run::new();
    let mut declared = config("t", &[]);
    declared.timeout = Duration::from_millis(4321);
    declared.overrides.insert(
        "write".into(),
        ContractOverride {
            effect: Some(Effect::Reversible),
            idempotency: Some(Idempotency::RequiredKey),
            approve: None,
            redact: vec!["text".into()],
        },
    );
    let server = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let contract = |name: &str| tool(&server, name).contract();
    assert_eq!(contract("read").effect, Effect::ReadOnly);
    assert_eq!(contract("read").idempotency, Idempotency::Idempotent);
    assert_eq!(contract("undoable").effect, Effect::Reversible);
    assert_eq!(
        contract("fail").effect,
        Effect::IrreversibleExternal,
        "unannotated"
    );
    assert_eq!(contract("write").effect, Effect::Reversible, "overridden");
    assert_eq!(contract("write").idempotency, Idempotency::RequiredKey);
    assert_eq!(contract("write").redact, ["text"]);
    assert!(contract("read").redact.is_empty());
    assert_eq!(contract("read").timeout_ms, 4321);
    assert_eq!(contract("read").auth_scope, "t");
    assert_eq!(contract("sum").input_schema["required"], json!(["a", "b"]));
    assert_eq!(server.tools().len(), 17);
    server.shutdown().await;
}

#[tokio::test]
async fn allow_list_and_overrides_must_name_offered_tools() {
    let run = Run::new();
    let mut declared = config("t", &[]);
    declared.tools = Some(vec!["read".into(), "nope".into()]);
    let err = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::UnknownTool { tool, .. } if tool == "nope"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("MCP server t") && text.contains("nope") && text.contains("read, write"),
        "{text}"
    );

    // An override for a tool the allow-list leaves out.
    let mut declared = config("t", &[]);
    declared.tools = Some(vec!["read".into()]);
    declared
        .overrides
        .insert("write".into(), ContractOverride::default());
    let err = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::UnknownOverride { tool, .. } if tool == "write"),
        "{err}"
    );
    assert!(err.to_string().contains("offered: read"), "{err}");

    let mut declared = config("t", &[]);
    declared.tools = Some(vec!["read".into()]);
    let server = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let names: Vec<String> = server.tools().iter().map(|t| t.contract().name).collect();
    assert_eq!(names, ["t.read"]);
    server.shutdown().await;
}

#[tokio::test]
async fn results_map_to_data_errors_and_files() {
    let run = Run::new();
    let server = McpServer::start(config("t", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let ctx = run.ctx("c1", CancellationToken::new());

    let out = tool(&server, "read")
        .call(json!({"text": "hi"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("read: hi"));

    let out = tool(&server, "sum")
        .call(json!({"a": 1, "b": 2}), &ctx)
        .await
        .unwrap();
    assert_eq!(
        out.data,
        json!({"sum": 3.0}),
        "structured content is the data"
    );

    let err = tool(&server, "fail")
        .call(json!({}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    assert!(
        err.message.contains("the widget is broken") && err.message.contains("t.fail"),
        "{err}"
    );

    let out = tool(&server, "image").call(json!({}), &ctx).await.unwrap();
    assert_eq!(out.data[0], json!("a pixel"));
    let image = &out.data[1];
    assert_eq!(image["type"], "image");
    assert_eq!(out.refs.len(), 1);
    let reference = &out.refs[0];
    assert!(
        reference.path.starts_with(".agentry/mcp/") && reference.path.ends_with(".png"),
        "{reference:?}"
    );
    assert_eq!(image["path"], json!(reference.path));
    let bytes = std::fs::read(run.workdir().join(&reference.path)).unwrap();
    assert_eq!(bytes.len() as u64, reference.bytes);
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "the file holds the decoded image"
    );
    assert!(!out.data.to_string().contains("iVBOR"), "not inlined");

    let err = tool(&server, "read")
        .call(json!(["x"]), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Einval);
    server.shutdown().await;
}

/// A call's trace context travels as `_meta.traceparent` (SEP-414), beside
/// the progress token rmcp adds; a call without one sends no `traceparent`.
#[tokio::test]
async fn a_call_carries_the_trace_context_in_meta() {
    let run = Run::new();
    let server = McpServer::start(config("t", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut ctx = run.ctx("c1", CancellationToken::new());
    ctx.traceparent = Some(Arc::from(tp));
    let out = tool(&server, "meta").call(json!({}), &ctx).await.unwrap();
    assert_eq!(out.data["meta"]["traceparent"], tp, "{}", out.data);
    assert!(
        out.data["meta"].get("progressToken").is_some(),
        "rmcp's progress token is kept: {}",
        out.data
    );
    ctx.traceparent = None;
    let out = tool(&server, "meta").call(json!({}), &ctx).await.unwrap();
    assert!(
        out.data["meta"].get("traceparent").is_none(),
        "{}",
        out.data
    );
    server.shutdown().await;
}

/// The server's whole environment, as the kernel holds it: each allowlisted
/// variable the host has (with the host's value), then the declaration's
/// `env` over it, and the spawn id the host sets; nothing else (no run id: a
/// resumed run's fence must not kill the new server; no forged host id).
#[tokio::test]
async fn the_server_gets_only_the_allowlist_and_its_env() {
    let run = Run::new();
    let mut declared = with_env(config("t", &[]), "GREETING", "hello");
    // A declared value wins over the host's allowlisted one; a host-owned
    // name cannot be declared.
    declared = with_env(declared, "HOME", "/declared/home");
    declared = with_env(declared, "AGENTRY_RUN_ID", "forged");
    let options = StartOptions::new(run.workdir());
    let server = McpServer::start(declared, options.clone()).await.unwrap();
    // Cargo sets it for this test process; the server must not inherit it.
    assert!(std::env::var("CARGO_MANIFEST_DIR").is_ok());

    let environ = std::fs::read(format!("/proc/{}/environ", server.pid().unwrap())).unwrap();
    let mut actual: BTreeMap<String, String> = environ
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let text = String::from_utf8_lossy(entry);
            let (name, value) = text.split_once('=').unwrap();
            (name.to_string(), value.to_string())
        })
        .collect();
    let spawn_id = actual.remove("AGENTRY_SPAWN_ID").expect("the spawn id");
    assert!(!spawn_id.is_empty());
    let mut expected: BTreeMap<String, String> = options
        .env_allowlist
        .iter()
        .filter_map(|name| Some((name.clone(), std::env::var(name).ok()?)))
        .collect();
    expected.insert("GREETING".into(), "hello".into());
    expected.insert("HOME".into(), "/declared/home".into());
    assert_eq!(actual, expected);

    // Each call records the server's group for the fence.
    let ctx = run.ctx("c1", CancellationToken::new());
    let out = tool(&server, "env")
        .call(json!({"name": "GREETING"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("hello"));
    let groups = run.groups.0.lock().unwrap().clone();
    assert!(!groups.is_empty());
    assert!(groups.iter().all(|g| Some(g.pgid as u32) == server.pid()));
    server.shutdown().await;
}

#[tokio::test]
async fn a_server_that_never_answers_fails_start_naming_it_and_its_stderr() {
    let run = Run::new();
    let mut declared = config("mute", &["silent"]);
    declared.startup_timeout = Duration::from_millis(500);
    let started = Instant::now();
    let err = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
    assert!(matches!(err, McpError::StartupTimeout { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("MCP server mute") && text.contains("500 ms"),
        "{text}"
    );
    assert!(
        text.contains("oops: not speaking MCP"),
        "stderr is in the error: {text}"
    );
}

#[tokio::test]
async fn a_command_that_does_not_exist_is_a_spawn_error() {
    let run = Run::new();
    let declared = agentry_mcp::McpServerConfig::new(
        "ghost",
        agentry_mcp::McpTransport::Stdio {
            command: vec!["/nonexistent/mcp-server".into()],
            env: Default::default(),
        },
    );
    let err = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap_err();
    assert!(matches!(err, McpError::Spawn { .. }), "{err}");
    assert!(
        err.to_string().contains("ghost") && err.to_string().contains("/nonexistent/mcp-server")
    );
}

#[tokio::test]
async fn a_dead_server_is_restarted_once_then_calls_get_eunavail() {
    let run = Run::new();
    let refuse = run.workdir().join("refuse");
    let declared = with_env(
        config("t", &[]),
        "TEST_REFUSE_FILE",
        refuse.to_str().unwrap(),
    );
    let server = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let ctx = run.ctx("c1", CancellationToken::new());
    let first = server.pid().unwrap();

    // Dies during the call: that call fails retryable, never re-sent.
    let err = tool(&server, "crash")
        .call(json!({}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eunavail, "{err}");
    assert!(err.retryable);

    // The next call restarts it.
    let out = tool(&server, "read")
        .call(json!({"text": "again"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("read: again"));
    let second = server.pid().unwrap();
    assert_ne!(first, second);
    assert!(!alive(first));

    // Now a restart fails: the call gets a retryable EUNAVAIL with the reason.
    std::fs::write(&refuse, "").unwrap();
    let _ = tool(&server, "crash").call(json!({}), &ctx).await;
    let err = tool(&server, "read")
        .call(json!({"text": "x"}), &ctx)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eunavail, "{err}");
    assert!(err.retryable);
    assert!(
        err.message.contains("could not be restarted") && err.message.contains("refusing to start"),
        "{err}"
    );

    // Once it can start again, it is back.
    std::fs::remove_file(&refuse).unwrap();
    let out = tool(&server, "read")
        .call(json!({"text": "back"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("read: back"));
    server.shutdown().await;
}

#[tokio::test]
async fn a_cancelled_call_returns_promptly_and_the_server_is_told() {
    let run = Run::new();
    let marker = run.workdir().join("cancel-marker");
    let declared = with_env(
        config("t", &[]),
        "TEST_CANCEL_FILE",
        marker.to_str().unwrap(),
    );
    let server = McpServer::start(declared, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let pid = server.pid().unwrap();
    let cancel = CancellationToken::new();
    let ctx = run.ctx("c1", cancel.clone());
    let slow = tool(&server, "slow");
    assert!(
        slow.cancel_grace() > Duration::ZERO,
        "the executor gives time to notify"
    );
    let call = tokio::spawn(async move { slow.call(json!({"seconds": 600}), &ctx).await });
    eventually(LIMIT, "the server started the call", || {
        std::fs::read_to_string(&marker).is_ok_and(|s| s == "started")
    })
    .await;
    let cancelled_at = Instant::now();
    cancel.cancel();
    let err = tokio::time::timeout(LIMIT, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(cancelled_at.elapsed() < Duration::from_secs(5));
    assert_eq!(err.code, ErrorCode::Ecanceled, "{err}");
    assert!(err.message.contains("notifications/cancelled"), "{err}");
    eventually(LIMIT, "the server recorded the cancellation", || {
        std::fs::read_to_string(&marker).is_ok_and(|s| s.starts_with("cancelled"))
    })
    .await;

    // The server still serves; shutdown leaves no process.
    let ctx = run.ctx("c2", CancellationToken::new());
    assert!(tool(&server, "read").call(json!({}), &ctx).await.is_ok());
    server.shutdown().await;
    assert!(!alive(pid), "no server process after shutdown");
    assert_eq!(server.pid(), None);
    let err = tool(&server, "read")
        .call(json!({}), &ctx)
        .await
        .unwrap_err();
    assert_eq!((err.code, err.retryable), (ErrorCode::Eunavail, false));
    server.shutdown().await; // idempotent
}

#[tokio::test]
async fn dropping_the_server_kills_it() {
    let run = Run::new();
    let server = McpServer::start(config("t", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let pid = server.pid().unwrap();
    drop(server);
    eventually(LIMIT, "the dropped server's process is gone", || {
        !alive(pid)
    })
    .await;
}

#[tokio::test]
async fn progress_notifications_become_progress_reports() {
    let run = Run::new();
    let server = McpServer::start(config("t", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let ctx = run.ctx("call-p", CancellationToken::new());
    let out = tool(&server, "progress")
        .call(json!({}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("done"));
    // Notifications may be handled just after the reply.
    eventually(LIMIT, "three progress reports", || {
        run.progress.0.lock().unwrap().len() == 3
    })
    .await;
    let reports = run.progress.0.lock().unwrap().clone();
    for (i, (call, update)) in reports.iter().enumerate() {
        assert_eq!(call, "call-p");
        assert_eq!(update.progress, (i + 1) as f64);
        assert_eq!(update.total, Some(3.0));
        assert_eq!(
            update.message.as_deref(),
            Some(format!("step {}", i + 1).as_str())
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn sampling_and_elicitation_are_refused_without_a_handler() {
    let run = Run::new();
    let server = McpServer::start(config("asker", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let ctx = run.ctx("c1", CancellationToken::new());
    let out = tool(&server, "sample").call(json!({}), &ctx).await.unwrap();
    let text = out.data.as_str().unwrap();
    assert!(
        text.starts_with("client error")
            && text.contains("refuses sampling")
            && text.contains("asker"),
        "{text}"
    );
    let out = tool(&server, "elicit").call(json!({}), &ctx).await.unwrap();
    let text = out.data.as_str().unwrap();
    assert!(
        text.starts_with("client error")
            && text.contains("refuses elicitation")
            && text.contains("asker"),
        "{text}"
    );
    server.shutdown().await;
}

struct CannedModel;

#[async_trait::async_trait]
impl agentry_mcp::SamplingHandler for CannedModel {
    async fn create_message(
        &self,
        server: &str,
        request: serde_json::Value,
    ) -> Result<serde_json::Value, agentry_mcp::HandlerRefusal> {
        assert_eq!(request["maxTokens"], 10);
        Ok(
            json!({"role": "assistant", "content": {"type": "text", "text": format!("hello {server}")}, "model": "canned"}),
        )
    }
}

#[tokio::test]
async fn an_installed_sampling_handler_answers() {
    let run = Run::new();
    let mut options = StartOptions::new(run.workdir());
    options.sampling = Some(std::sync::Arc::new(CannedModel));
    let server = McpServer::start(config("asker", &[]), options)
        .await
        .unwrap();
    let ctx = run.ctx("c1", CancellationToken::new());
    let out = tool(&server, "sample").call(json!({}), &ctx).await.unwrap();
    let text = out.data.as_str().unwrap();
    assert!(
        text.starts_with("answered") && text.contains("hello asker"),
        "{text}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn several_servers_start_together_and_a_failure_stops_them_all() {
    let run = Run::new();
    let servers = McpServers::start_all(
        vec![config("a", &[]), config("b", &[])],
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap();
    let names: Vec<String> = servers.tools().iter().map(|t| t.contract().name).collect();
    assert!(names.contains(&"a.read".to_string()) && names.contains(&"b.read".to_string()));
    let pids: Vec<u32> = servers.iter().filter_map(|s| s.pid()).collect();
    assert_eq!(pids.len(), 2);
    servers.shutdown().await;
    assert!(pids.iter().all(|p| !alive(*p)));

    let mut bad = config("b", &[]);
    bad.tools = Some(vec!["missing".into()]);
    let err = McpServers::start_all(
        vec![config("a", &[]), bad],
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("MCP server b"), "{err}");
    let err = McpServers::start_all(
        vec![config("a", &[]), config("a", &[])],
        StartOptions::new(run.workdir()),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, McpError::Duplicate { .. }), "{err}");
}
