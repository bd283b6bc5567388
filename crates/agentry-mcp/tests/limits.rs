//! A server that lists too much, names its tools badly, or answers with more
//! than a client takes (examples/test_server.rs, a real rmcp server on
//! stdio). Each of these failed before its defence.

// Test code: a failed unwrap is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry_mcp::{McpError, McpServer, StartOptions};
use agentry_protocol::ErrorCode;
use serde_json::json;
use support::{Run, config, tool, with_env};
use tokio_util::sync::CancellationToken;

/// Far past what any of these takes when it works; before their defences
/// the listing took minutes and the big reply waited forever.
const GENEROUS: Duration = Duration::from_secs(60);

/// A server listing 20,017 tools (20 pages) against the default cap of
/// 1,000: the start fails naming the server, the count and the cap, after
/// the first page past the cap; with `max_tools` above the count every page
/// is listed and every tool offered.
#[tokio::test]
async fn a_server_listing_more_tools_than_max_tools_fails_its_start_naming_the_cap() {
    let run = Run::new();
    let many = with_env(config("many", &[]), "TEST_MANY_TOOLS", "20000");
    let started = Instant::now();
    let err = McpServer::start(many.clone(), StartOptions::new(run.workdir()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, McpError::TooManyTools { server, listed: 1_017, cap: 1_000 } if server == "many"),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("MCP server many lists more than 1000 tools") && text.contains("max_tools"),
        "{text}"
    );

    let mut allowed = many;
    allowed.max_tools = 25_000;
    let server = McpServer::start(allowed, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let tools = server.tools();
    assert_eq!(tools.len(), 20_017);
    assert!(tools.iter().any(|t| t.contract().name == "many.many19999"));
    server.shutdown().await;
    assert!(started.elapsed() < GENEROUS, "{:?}", started.elapsed());
}

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

/// Tools named with ESC and BEL, with U+202E, with a space, or longer than
/// 128 characters are skipped, each with a warning naming the server and the
/// name escaped; the server's other tools are offered.
#[tokio::test]
async fn tools_named_outside_mcps_rule_are_skipped_with_an_escaped_warning() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    // This test's thread only (a current-thread runtime).
    let _guard = tracing::subscriber::set_default(subscriber);

    let run = Run::new();
    let hostile = with_env(config("odd", &[]), "TEST_HOSTILE_NAMES", "1");
    let server = McpServer::start(hostile, StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let names: Vec<String> = server.tools().iter().map(|t| t.contract().name).collect();
    assert_eq!(names.len(), 17, "{names:?}");
    assert!(
        names.iter().all(|n| n
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))),
        "{names:?}"
    );
    server.shutdown().await;

    let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    for shown in [
        r"bell\x07\x1b[2Jclear",
        r"evil\u{202e}txt.exe",
        "with space",
        &"x".repeat(129),
    ] {
        assert!(
            logged
                .lines()
                .any(|l| l.contains("MCP server odd lists a tool named") && l.contains(shown)),
            "no warning for {shown}: {logged}"
        );
    }
    assert!(
        !logged.contains(['\x1b', '\x07', '\u{202e}']),
        "a raw control reached the log: {logged:?}"
    );
}

/// A reply over 16 MiB (17 MiB of text) is the call's `EUNAVAIL` at once,
/// saying so, not retryable; the server goes on answering. Before, rmcp
/// dropped the line and the call waited for an answer that never came. A
/// 15 MiB reply still arrives whole.
#[tokio::test]
async fn a_reply_over_16_mib_is_an_eunavail_at_once_and_the_server_goes_on() {
    let run = Run::new();
    let server = McpServer::start(config("t", &[]), StartOptions::new(run.workdir()))
        .await
        .unwrap();
    let ctx = run.ctx("c1", CancellationToken::new());
    let big = tool(&server, "big");
    let call = big.call(json!({}), &ctx);
    let err = tokio::time::timeout(GENEROUS, call)
        .await
        .expect("the call ends, not waits")
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Eunavail, "{err}");
    assert!(!err.retryable, "{err}");
    assert!(
        err.message.contains("t.big") && err.message.contains("reply is over 16 MiB"),
        "{err}"
    );

    let out = tool(&server, "read")
        .call(json!({"text": "still here"}), &ctx)
        .await
        .unwrap();
    assert_eq!(out.data, json!("read: still here"));
    let fifteen = 15 << 20;
    let out = tokio::time::timeout(GENEROUS, big.call(json!({"bytes": fifteen}), &ctx))
        .await
        .expect("the call ends");
    // Not the output itself in a failure message: 15 MiB of it.
    let len = out
        .map(|o| o.data.as_str().map(str::len))
        .map_err(|e| e.to_string());
    assert_eq!(len, Ok(Some(fifteen)));
    server.shutdown().await;
}
