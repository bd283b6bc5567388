//! Redaction before every write: secrets a tool reads from the workspace, a
//! user types, the environment holds, a tool declares secret, the model
//! streams across two deltas or puts in a child's name never reach the JSONL
//! trace, the SQLite file, the event stream, the logs or the spans exported
//! over OTLP — while the policy and the tool still see the real values, and
//! the run completes.
//!
//! The run happens in a re-executed copy of this test binary: the env secret
//! must be in the process environment when the run's redactor is built, and a
//! process of its own can set it and install a global subscriber (logs, and
//! the real OTLP exporter sending to a receiver in the process) without
//! racing the other tests.

use std::io::Write as _;
use std::process::Command;
use std::sync::{Arc, Mutex};

use agentry::protocol::decision::Decision;
use agentry::{
    Durability, RunConfig, SqliteStore, StopReason, Tool, ToolCall, ToolContext, ToolContract,
    ToolError, ToolOutput, async_trait,
};
use agentry_telemetry::otlp::{self, OtlpOptions, TelemetryGuard};
use agentry_test_support::{FnPolicy, TestError, TestTask, collect_until_stopped, runtime_with};
use opentelemetry_proto::tonic::trace::v1::Span as OtlpSpan;
use serde_json::{Value, json};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::suite::otlp_receiver::{Receiver, texts};

/// The env variable the child process holds its secret in (its name contains
/// TOKEN, so its value is redacted).
const ENV_NAME: &str = "AGENTRY_REDACTION_TEST_TOKEN";
const ENV_SECRET: &str = "env-secret-9f8e7d6c5b4a";
/// In the workspace's config file, read by `fs.read`.
const OPENAI_KEY: &str = "sk-proj-Zq8xW3vN5mK2pL9rT4yH7jB1";
const AWS_KEY: &str = "AKIAZ7Q3XK2M4N5P6R8T";
/// In a user's message, matched by the task's pattern.
const CARD: &str = "4111 2222 3333 4444";
const CARD_PATTERN: &str = r"\b4[0-9]{3}(?: [0-9]{4}){3}\b";
/// A `redact = ["password"]` argument of the login tool.
const PASSWORD: &str = "hunter2-correct-horse";
/// Streamed by the model in two deltas, cut inside the key.
const STREAMED_KEY: &str = "sk-ant-api03-Vb7Nc4Xd9Fe2Gh5Jk8Lm3Pq6";

/// Every secret the run must not write.
fn secrets() -> [&'static str; 6] {
    [
        ENV_SECRET,
        OPENAI_KEY,
        AWS_KEY,
        CARD,
        PASSWORD,
        STREAMED_KEY,
    ]
}

/// The parts of secrets that would give them away (a half of a key streamed
/// in two deltas must not leak either).
fn fragments() -> Vec<&'static str> {
    let mut out: Vec<&str> = secrets().to_vec();
    out.push(&STREAMED_KEY[..14]);
    out.push(&STREAMED_KEY[14..]);
    out.push("Zq8xW3vN5mK2pL9r");
    out
}

/// Logs in; returns a session whose `password` field echoes the secret (a
/// result field declared secret too). Remembers what it was given.
#[derive(Debug, Clone, Default)]
struct LoginTool {
    got: Arc<Mutex<Option<String>>>,
}

#[async_trait]
impl Tool for LoginTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            "login",
            "Logs in.",
            json!({"type": "object", "properties": {"user": {"type": "string"}, "password": {"type": "string"}}}),
        )
        .redact_fields(["password"])
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let password = args["password"].as_str().unwrap_or_default().to_string();
        if let Ok(mut got) = self.got.lock() {
            *got = Some(password.clone());
        }
        Ok(ToolOutput::data(
            json!({"session": "s-1", "user": args["user"], "password": password}),
        ))
    }
}

/// What the policy saw of the session at each step (as JSON text).
type Seen = Arc<Mutex<Vec<String>>>;

/// What the model names its child: a card number, which only the task's
/// pattern knows (the exporter's backstop does not).
fn child_name() -> String {
    format!("pay {CARD}")
}

/// Reads the config, logs in, delegates to a child it names after the card,
/// then (once the user's message is in the session) streams a key in two
/// deltas and finishes with an answer naming the env secret, the key and the
/// password (as a model echoing them would).
fn policy(seen: Seen) -> FnPolicy {
    FnPolicy::new(move |ctx| {
        let session = serde_json::to_string(ctx.session).unwrap_or_default();
        let heard = session.contains(CARD);
        if let Ok(mut s) = seen.lock() {
            s.push(session);
        }
        let read = || Decision::ToolCalls {
            calls: vec![ToolCall::new(
                format!("r{}", ctx.step),
                "fs.read",
                json!({"path": "config.env"}),
            )],
        };
        match ctx.step {
            1 => read(),
            2 => Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    "l1",
                    "login",
                    json!({"user": "ann", "password": PASSWORD}),
                )],
            },
            3 => Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    "s1",
                    agentry::tools::agents::SPAWN_TOOL,
                    json!({"name": child_name(), "goal": "pay", "budget": {"max_steps": 2},
                           "script": {"turns": [{"final": "paid"}]}}),
                )],
            },
            // The message was sent right after the start: it comes within a
            // step or two.
            _ if !heard => read(),
            _ => {
                if let Some(deltas) = ctx.deltas {
                    deltas.emit(&format!("the key is {}", &STREAMED_KEY[..14]));
                    deltas.emit(&format!("{} and more", &STREAMED_KEY[14..]));
                }
                Decision::ToolCalls {
                    calls: vec![ToolCall::new(
                        "f1",
                        agentry::tools::FINISH_TOOL,
                        json!({"answer": format!("done; token {ENV_SECRET}; key {OPENAI_KEY}; login {PASSWORD}")}),
                    )],
                }
            }
        }
    })
}

/// A writer the log subscriber appends to.
#[derive(Clone, Default)]
pub(super) struct Captured(pub(super) Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Each secret (or give-away part of one) `bytes` holds, named with `what`.
fn leaks(what: &str, bytes: &[u8]) -> Vec<String> {
    fragments()
        .into_iter()
        .filter(|secret| bytes.windows(secret.len()).any(|w| w == secret.as_bytes()))
        .map(|secret| format!("{what} holds {secret:?}"))
        .collect()
}

/// Installs the process's subscriber: logs (DEBUG and up) written into the
/// returned buffer, and the real OTLP exporter (with span content on) sending
/// to `receiver` — the backstop redactor it builds knows the built-in
/// detectors and the environment's secrets, not the task's patterns.
pub(super) fn capture_logs_and_spans(
    receiver: &Receiver,
) -> Result<(Captured, TelemetryGuard), TestError> {
    let logs = Captured::default();
    let sink = logs.clone();
    let log_layer = tracing_subscriber::fmt::layer()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG);
    let (otlp_layer, guard) = otlp::init(OtlpOptions {
        endpoint: Some(receiver.url.clone()),
        ..OtlpOptions::default()
    })?;
    tracing_subscriber::registry()
        .with(log_layer)
        .with(otlp_layer)
        .try_init()
        .map_err(|e| e.to_string())?;
    Ok((logs, guard))
}

/// Flushes the exporter until the receiver holds the spans of the run and
/// of its child, and of the login call (the actors close theirs as they stop).
async fn exported(receiver: &Receiver, guard: &TelemetryGuard) -> Result<Vec<OtlpSpan>, TestError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        guard.flush();
        let spans = receiver.spans();
        let runs = spans
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent "))
            .count();
        if runs == 2 && spans.iter().any(|s| s.name == "execute_tool login") {
            return Ok(spans);
        }
        if std::time::Instant::now() > deadline {
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            return Err(format!("the receiver never got the run's spans; got {names:?}").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// What was written: the trace file, the SQLite file and its WAL, the events
/// (as JSON), the logs and the exported spans.
struct Written {
    trace: Vec<u8>,
    store: Vec<u8>,
    events: Vec<agentry::protocol::event::EventRecord>,
    logs: Vec<u8>,
    spans: Vec<OtlpSpan>,
}

/// Each secret in a text of an exported span (its name, every attribute,
/// every event, its status), named by span and place; and each marker the
/// spans must show (content was exported, the child's name was redacted).
fn leaks_in_spans(spans: &[OtlpSpan]) -> Vec<String> {
    let mut leaked = Vec::new();
    let mut all = String::new();
    for span in spans {
        for (at, text) in texts(span) {
            leaked.extend(leaks(
                &format!("span {:?}, {at},", span.name),
                text.as_bytes(),
            ));
            all.push_str(&text);
            all.push('\n');
        }
    }
    for marker in [
        "invoke_agent pay [redacted:pattern:0]",
        "[redacted:field:password]",
        "sk-…[redacted:openai_key]",
        "[redacted:pattern:0]",
    ] {
        if !all.contains(marker) {
            leaked.push(format!("the spans lack {marker}"));
        }
    }
    leaked
}

/// Every leak of `written`, and every redaction marker it lacks. All places
/// are checked before the test fails, so one run shows every write point that
/// leaks.
fn leaks_in(written: &Written) -> Result<Vec<String>, TestError> {
    let mut leaked = leaks("the trace", &written.trace);
    let trace_text = String::from_utf8_lossy(&written.trace);
    for marker in [
        "sk-…[redacted:openai_key]",
        "AKIA…[redacted:aws_access_key]",
        "[redacted:pattern:0]",
        "[redacted:field:password]",
        &format!("[redacted:env:{ENV_NAME}]"),
    ] {
        if !trace_text.contains(marker) {
            leaked.push(format!("the trace lacks {marker}"));
        }
    }
    leaked.extend(leaks("the SQLite file", &written.store));
    if !String::from_utf8_lossy(&written.store).contains("[redacted:field:password]") {
        leaked.push("the SQLite file lacks [redacted:field:password]".into());
    }
    leaked.extend(leaks(
        "the event stream",
        &serde_json::to_vec(&written.events)?,
    ));
    let deltas: String = written
        .events
        .iter()
        .filter_map(|e| {
            if let agentry::protocol::event::RunEvent::TokenDelta { text, .. } = &e.event {
                Some(text.as_str())
            } else {
                None
            }
        })
        .collect();
    if deltas != "the key is sk-ant-…[redacted:anthropic_key] and more" {
        leaked.push(format!("the streamed deltas, joined, are {deltas:?}"));
    }
    // The capture works: the run logged something.
    assert!(!written.logs.is_empty(), "no log line was captured");
    leaked.extend(leaks("the logs", &written.logs));
    leaked.extend(leaks_in_spans(&written.spans));
    Ok(leaked)
}

/// The run, in the child process.
async fn run_and_check() -> Result<(), TestError> {
    let receiver = Receiver::start()?;
    let (logs, guard) = capture_logs_and_spans(&receiver)?;
    let task = TestTask::new(
        "read config.env and log in",
        &[(
            "config.env",
            &format!("OPENAI_API_KEY={OPENAI_KEY}\nAWS_ACCESS_KEY_ID={AWS_KEY}\n"),
        )],
    )?
    .grant(&["fs.read", "login", "agent"])
    .max_steps(10)
    .trace();
    let db = task.root().join("runs.db");
    let login = LoginTool::default();
    let runtime = runtime_with(vec![Arc::new(login.clone())])?
        .with_store(Arc::new(SqliteStore::open(&db)?), Durability::Strict)?;
    let mut config: RunConfig = task.config();
    config.observe.redact_patterns = vec![CARD_PATTERN.to_string()];
    // Tool arguments and results as span attributes: content to redact.
    config.observe.content = true;
    let seen = Seen::default();
    let handle = runtime.start(config, policy(Arc::clone(&seen))).await?;
    let events = handle.subscribe();
    handle.send_message(format!("my card is {CARD}, charge it"))?;
    let outcome = handle.wait().await?;
    let events = collect_until_stopped(events).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    // The policy and the tool saw the real values; so does the embedder (the
    // outcome is not a write).
    let seen = seen.lock().map(|s| s.join("\n")).unwrap_or_default();
    for real in [OPENAI_KEY, AWS_KEY, CARD, PASSWORD] {
        assert!(seen.contains(real), "the policy never saw {real}");
    }
    assert_eq!(
        login.got.lock().ok().and_then(|g| g.clone()).as_deref(),
        Some(PASSWORD)
    );
    assert!(
        outcome
            .answer
            .as_deref()
            .unwrap_or_default()
            .contains(ENV_SECRET)
    );

    // The handle holds the run's span (a child's handle its parent's): the
    // spans close, and are exported, once every handle is gone.
    drop(handle);
    drop(runtime);
    let mut store = std::fs::read(&db)?;
    if let Ok(wal) = std::fs::read(db.with_extension("db-wal")) {
        store.extend(wal);
    }
    assert!(!store.is_empty());
    let written = Written {
        trace: std::fs::read(task.trace_path())?,
        store,
        events,
        logs: logs.0.lock().map(|l| l.clone()).unwrap_or_default(),
        spans: exported(&receiver, &guard).await?,
    };
    let leaked = leaks_in(&written)?;
    assert!(leaked.is_empty(), "{leaked:#?}");
    Ok(())
}

/// The invariant ARCHITECTURE.md cites: nothing is written before it passes
/// the redactor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_trace_store_or_events() -> Result<(), TestError> {
    if std::env::var(ENV_NAME).is_ok() {
        return run_and_check().await;
    }
    let out = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "suite::security::redaction::secrets_never_reach_trace_store_or_events",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV_NAME, ENV_SECRET)
        .output()?;
    std::io::stderr().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the run in the child process failed");
    // The child really ran the test (a filter matching nothing also succeeds).
    assert!(stdout.contains("1 passed"), "{stdout}");
    Ok(())
}

/// A `[redact] patterns` entry that is not a regex refuses the run at its
/// start, naming the pattern, before anything is written (no trace file, no
/// stored run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_redact_pattern_refuses_the_run_before_any_write() -> Result<(), TestError> {
    let task = TestTask::new("g", &[])?.trace();
    let db = task.root().join("runs.db");
    let runtime = runtime_with(Vec::new())?
        .with_store(Arc::new(SqliteStore::open(&db)?), Durability::Strict)?;
    let mut config = task.config();
    config.observe.redact_patterns = vec![CARD_PATTERN.to_string(), "(unclosed".to_string()];
    let err = runtime
        .start(config, FnPolicy::pending())
        .await
        .err()
        .ok_or("a bad pattern was accepted")?;
    assert!(
        matches!(err, agentry::RuntimeError::Redaction(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("(unclosed"), "{err}");
    assert!(!task.trace_path().exists(), "a trace file was created");
    assert!(runtime.runs().await?.is_empty(), "a run was stored");
    Ok(())
}
