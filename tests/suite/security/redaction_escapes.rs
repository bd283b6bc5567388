//! Redaction however JSON escapes a secret or a tool encodes it (issue 33).
//!
//! A real streamed model turn (the scripted OpenAI-compatible server, over
//! HTTP and SSE) whose tool-call arguments hold the environment's secrets
//! after, before and inside every JSON escape, and a command tool that prints
//! the process's environment as `base64` does (lines wrapped, at each
//! alignment, URL-safe), as hex (lower and upper case), percent-encoded and
//! upper-cased: with span content on, no secret reaches the JSONL trace, the
//! SQLite file, the event stream, the OTLP export or the logs. And a child the
//! model names after an env secret reaches the collector redacted in its
//! span's name, with content off.
//!
//! Each run happens in a re-executed copy of this test binary, as in
//! `redaction.rs`: the secrets must be in the process environment (and in
//! `/proc/<pid>/environ`) when the redactors are built, and the process's
//! subscriber is global.

use std::io::Write as _;
use std::process::Command;
use std::sync::Arc;

use agentry::protocol::decision::Decision;
use agentry::tools::proc::{CommandTool, DEFAULT_ENV_ALLOWLIST, ProcConfig};
use agentry::{
    Durability, SqliteStore, StopReason, Tool, ToolCall, ToolContext, ToolContract, ToolError,
    ToolOutput, async_trait,
};
use agentry_models::OpenAiPolicy;
use agentry_telemetry::otlp::TelemetryGuard;
use agentry_test_support::{FnPolicy, TestError, TestTask, collect_until_stopped, runtime_with};
use opentelemetry_proto::tonic::trace::v1::Span as OtlpSpan;
use serde_json::{Value, json};

use super::redaction::capture_logs_and_spans;
use crate::suite::models::server::{MockServer, Reply};
use crate::suite::models::sse::{calls_turn, config as model_config};
use crate::suite::otlp_receiver::{Receiver, texts};

/// A secret with nothing JSON escapes.
const PLAIN_NAME: &str = "AGENTRY_ESCAPES_TEST_TOKEN";
const PLAIN: &str = "env-plain-7c6d5b4a3f2e";
/// A secret with a quote, a backslash, a slash and a non-ASCII letter in it.
const ODD_NAME: &str = "AGENTRY_ESCAPES_TEST_SECRET";
const ODD: &str = "p\"w\\d/é-Zq8xW3vN5mK2";

fn markers() -> [String; 2] {
    [
        format!("[redacted:env:{PLAIN_NAME}]"),
        format!("[redacted:env:{ODD_NAME}]"),
    ]
}

/// Runs `test` (this file's test of that name) in a child process whose
/// environment holds the secrets.
fn in_child(test: &str) -> Result<(), TestError> {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            &format!("suite::security::redaction_escapes::{test}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PLAIN_NAME, PLAIN)
        .env(ODD_NAME, ODD)
        .output()?;
    std::io::stderr().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the run in the child process failed");
    // The child really ran the test (a filter matching nothing also succeeds).
    assert!(stdout.contains("1 passed"), "{stdout}");
    Ok(())
}

/// Echoes its `text` argument back (a tool's output holding what the model wrote).
#[derive(Debug, Clone, Default)]
struct NoteTool;

#[async_trait]
impl Tool for NoteTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            "note",
            "Notes a text.",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        )
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::data(json!({"noted": args["text"]})))
    }
}

/// Prints the secrets (`NAME=value\0` as in `/proc/<pid>/environ`) in the
/// encodings a tool may use, the encodings separated by `--` lines. The
/// sandbox hides agentry's own `/proc/<pid>/environ` from a tool, so the
/// secrets reach it the one way left: allowlisted by the operator
/// ([`dump_tool`]).
const DUMP: &str = r#"set -e
grep -z AGENTRY_ESCAPES /proc/self/environ > env.bin
base64 env.bin; echo --
(printf a; cat env.bin) | base64 -w0; echo; echo --
(printf ab; cat env.bin) | base64 -w0 | tr '+/' '-_' | tr -d =; echo; echo --
xxd -p env.bin; echo --
xxd -p -u env.bin | tr -d '\n'; echo; echo --
od -An -tx1 -v env.bin | tr -d ' \n' | sed 's/../%&/g'; echo; echo --
tr a-z A-Z < env.bin | tr '\0' '\n'
"#;

fn dump_tool() -> Result<CommandTool, TestError> {
    Ok(CommandTool::new(
        ToolContract::new(
            "env.dump",
            "Prints the environment, encoded.",
            json!({"type": "object"}),
        ),
        ["sh", "-c", DUMP],
    )?
    .with_config(ProcConfig {
        env_allowlist: DEFAULT_ENV_ALLOWLIST
            .iter()
            .chain(&[PLAIN_NAME, ODD_NAME])
            .map(|s| s.to_string())
            .collect(),
        ..ProcConfig::default()
    }))
}

/// `text` as serde_json writes it inside a string.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_default();
    quoted[1..quoted.len() - 1].to_owned()
}

/// `text` inside a string as ASCII-only encoders write it (`\/`, `\u00e9`).
fn ascii_escaped(text: &str) -> String {
    escaped(text)
        .replace('/', "\\/")
        .chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                let mut units = [0u16; 2];
                c.encode_utf16(&mut units)
                    .iter()
                    .map(|u| format!("\\u{u:04x}"))
                    .collect()
            }
        })
        .collect()
}

/// The model's tool-call arguments, as it writes them (JSON text): each
/// escape before and after a secret, the odd secret escaped in both styles,
/// and JSON in a string.
fn note_arguments() -> Vec<String> {
    let mut out: Vec<String> = [r"\n", r"\t", r"\r", r#"\""#, r"\\", r"\/", r"\u00e9"]
        .iter()
        .map(|e| format!(r#"{{"text":"line1{e}{PLAIN}{e}x"}}"#))
        .collect();
    out.push(format!(r#"{{"text":"line1\n{}\nx"}}"#, escaped(ODD)));
    out.push(format!(
        r#"{{"text":"line1\t{}\u00e9x"}}"#,
        ascii_escaped(ODD)
    ));
    let inner = format!(r#"{{"cmd":"line1\n{PLAIN}\n{}"}}"#, escaped(ODD));
    out.push(format!(r#"{{"text":"{}"}}"#, escaped(&inner)));
    out
}

/// The model: notes (turn 1), dumps the environment (turn 2), finishes.
async fn model() -> Result<MockServer, TestError> {
    let notes = note_arguments();
    let ids: Vec<String> = (0..notes.len()).map(|i| format!("n{i}")).collect();
    let calls: Vec<(&str, &str, &str)> = ids
        .iter()
        .zip(&notes)
        .map(|(id, args)| (id.as_str(), "note", args.as_str()))
        .collect();
    MockServer::start(vec![
        Reply::sse(calls_turn(&calls)),
        Reply::sse(calls_turn(&[("d1", "env_dump", "{}")])),
        Reply::sse(calls_turn(&[(
            "f1",
            "task_finish",
            r#"{"answer":"noted and dumped"}"#,
        )])),
    ])
    .await
}

/// Flushes the exporter until the receiver holds a span `done` accepts.
async fn exported(
    receiver: &Receiver,
    guard: &TelemetryGuard,
    done: impl Fn(&[OtlpSpan]) -> bool,
) -> Result<Vec<OtlpSpan>, TestError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        guard.flush();
        let spans = receiver.spans();
        if done(&spans) {
            return Ok(spans);
        }
        if std::time::Instant::now() > deadline {
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            return Err(format!("the receiver never got the run's spans; got {names:?}").into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// All of a sink's text as one string.
fn span_text(spans: &[OtlpSpan]) -> String {
    let mut all = String::new();
    for span in spans {
        for (_, text) in texts(span) {
            all.push_str(&text);
            all.push('\n');
        }
    }
    all
}

/// Each secret `text` holds, however written: as is or in any ASCII case,
/// JSON-escaped (one to three levels, both styles), or — with line breaks
/// (and escaped ones) removed — in base64 (any alignment, either
/// alphabet), hex, or percent-encoding.
fn leaks(what: &str, text: &str) -> Vec<String> {
    let joined = without_line_breaks(text);
    let mut decoded: Vec<Vec<u8>> = vec![text.as_bytes().to_vec(), joined.as_bytes().to_vec()];
    decoded.extend(base64_decodings(&joined));
    decoded.extend(hex_decodings(&joined));
    decoded.push(percent_decoded(&joined));
    let mut out = Vec::new();
    for secret in [PLAIN, ODD] {
        let mut spellings = vec![secret.to_owned()];
        for escape in [escaped, ascii_escaped] {
            let mut s = secret.to_owned();
            for _ in 0..3 {
                s = escape(&s);
                spellings.push(s.clone());
            }
        }
        let found = spellings.iter().any(|s| {
            decoded.iter().any(|d| {
                d.windows(s.len())
                    .any(|w| w.eq_ignore_ascii_case(s.as_bytes()))
            })
        });
        if found {
            out.push(format!("{what} holds {secret:?}"));
        }
    }
    out
}

/// `text` without `\r`, `\n`, or a JSON-escaped line break at any nesting.
fn without_line_breaks(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' | '\n' => {}
            '\\' => {
                let mut run = String::from('\\');
                while chars.peek() == Some(&'\\') {
                    run.push('\\');
                    chars.next();
                }
                if matches!(chars.peek(), Some('n' | 'r')) {
                    chars.next();
                } else {
                    out.push_str(&run);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Every run of base64 characters, decoded from each of its first four offsets.
fn base64_decodings(text: &str) -> Vec<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let c = match c {
            b'-' => b'+',
            b'_' => b'/',
            other => other,
        };
        alphabet.iter().position(|&a| a == c).map(|p| p as u32)
    };
    let mut out = Vec::new();
    for run in text.split(|c: char| !(c.is_ascii_alphanumeric() || "+/-_".contains(c))) {
        let run = run.as_bytes();
        for skip in 0..4.min(run.len()) {
            let mut bytes = Vec::new();
            // The last group may be short (its padding was cut off).
            for quad in run[skip..].chunks(4) {
                let Some(n) = quad
                    .iter()
                    .try_fold(0u32, |n, &c| value(c).map(|v| n << 6 | v))
                else {
                    break;
                };
                let n = n << (6 * (4 - quad.len()));
                let whole = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
                bytes.extend(&whole[..(quad.len() * 6 / 8)]);
            }
            out.push(bytes);
        }
    }
    out
}

/// Every run of hex digits, decoded from each of its first two offsets.
fn hex_decodings(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !c.is_ascii_hexdigit()) {
        for skip in 0..2.min(run.len()) {
            let bytes: Vec<u8> = run.as_bytes()[skip..]
                .chunks_exact(2)
                .filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
                .collect();
            out.push(bytes);
        }
    }
    out
}

fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let byte = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match byte {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

/// The model run, in the child process.
async fn model_run_writes_no_secret() -> Result<(), TestError> {
    let receiver = Receiver::start()?;
    let (logs, guard) = capture_logs_and_spans(&receiver)?;
    let server = model().await?;
    let task = TestTask::new("note and dump", &[])?
        .grant(&["note", "env.dump"])
        .max_steps(6)
        .trace();
    let db = task.root().join("runs.db");
    let runtime = runtime_with(vec![Arc::new(NoteTool), Arc::new(dump_tool()?)])?
        .with_store(Arc::new(SqliteStore::open(&db)?), Durability::Strict)?;
    let mut config = task.config();
    config.observe.content = true;
    let handle = runtime
        .start(config, OpenAiPolicy::new(model_config(&server.base_url))?)
        .await?;
    let events = handle.subscribe();
    let outcome = handle.wait().await?;
    let events = collect_until_stopped(events).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    // The tool really printed the secrets in every encoding, and the check
    // below sees each (the model's next request holds the real output: what
    // the model is sent is not a write).
    let stdout = dumped(&server)?;
    assert!(stdout.starts_with(DUMPED_NAME), "{stdout}");
    for (i, section) in stdout.split("\n--\n").enumerate() {
        let seen = leaks("the dump", section);
        assert!(
            seen.iter().any(|l| l.contains(PLAIN)),
            "section {i}: {section}"
        );
    }

    drop(handle);
    drop(runtime);
    let mut store = std::fs::read(&db)?;
    if let Ok(wal) = std::fs::read(db.with_extension("db-wal")) {
        store.extend(wal);
    }
    let spans = exported(&receiver, &guard, |spans| {
        spans.iter().any(|s| s.name.starts_with("invoke_agent "))
            && spans.iter().any(|s| s.name == "execute_tool env.dump")
    })
    .await?;
    let trace = String::from_utf8_lossy(&std::fs::read(task.trace_path())?).into_owned();
    let store = String::from_utf8_lossy(&store).into_owned();
    let events = serde_json::to_string(&events)?;
    let logs =
        String::from_utf8_lossy(&logs.0.lock().map(|l| l.clone()).unwrap_or_default()).into_owned();
    let spans = span_text(&spans);
    let mut leaked = Vec::new();
    for (what, text) in [
        ("the trace", &trace),
        ("the SQLite file", &store),
        ("the event stream", &events),
        ("the logs", &logs),
        ("the spans", &spans),
    ] {
        leaked.extend(leaks(what, text));
    }
    // What was redacted was written: the notes and the dump reach every
    // sink but the logs (which carry no content).
    for (what, text) in [("the trace", &trace), ("the spans", &spans)] {
        for marker in markers() {
            if !text.contains(&marker) {
                leaked.push(format!("{what} lacks {marker}"));
            }
        }
    }
    assert!(leaked.is_empty(), "{leaked:#?}");
    Ok(())
}

/// The dump's stdout as the model was sent it (in the third request).
fn dumped(server: &MockServer) -> Result<String, TestError> {
    let received = server.received();
    let messages = received
        .get(2)
        .and_then(|r| r.body["messages"].as_array().cloned())
        .ok_or("no third request")?;
    let content = messages
        .iter()
        .find(|m| m["tool_call_id"] == "d1")
        .and_then(|m| m["content"].as_str())
        .ok_or("no result of the dump")?;
    let envelope: Value = serde_json::from_str(content)?;
    Ok(envelope["data"]["stdout"]
        .as_str()
        .ok_or("no stdout")?
        .to_owned())
}

/// What `base64 env.bin` prints first: both variables' names start with
/// `AGENTRY_ESCAPES_TEST_` (these are its 21 bytes in base64).
const DUMPED_NAME: &str = "QUdFTlRSWV9FU0NBUEVTX1RFU1Rf";

/// A model turn's tool-call arguments holding an env secret after every JSON
/// escape, before it and inside it, and a tool's output holding it in base64,
/// hex, percent-encoding and upper case: with span content on, no secret
/// reaches the trace, the SQLite file, the events, the OTLP export or the logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escaped_and_encoded_secrets_never_reach_any_sink() -> Result<(), TestError> {
    if std::env::var(PLAIN_NAME).is_ok() {
        return model_run_writes_no_secret().await;
    }
    in_child("escaped_and_encoded_secrets_never_reach_any_sink")
}

/// Spawns a child named after the plain secret, waits for it, finishes.
fn spawning_policy() -> FnPolicy {
    let name = format!("child-{PLAIN}");
    FnPolicy::new(move |ctx| match ctx.step {
        1 => Decision::ToolCalls {
            calls: vec![ToolCall::new(
                "s1",
                agentry::tools::agents::SPAWN_TOOL,
                json!({"name": name, "goal": "wait",
                       "budget": {"max_steps": 2},
                       "script": {"turns": [{"final": "waited"}]}}),
            )],
        },
        2 => Decision::ToolCalls {
            calls: vec![ToolCall::new(
                "w1",
                agentry::tools::agents::WAIT_TOOL,
                json!({"child_ids": [name]}),
            )],
        },
        _ => Decision::ToolCalls {
            calls: vec![ToolCall::new(
                "f1",
                agentry::tools::FINISH_TOOL,
                json!({"answer": "spawned"}),
            )],
        },
    })
}

/// The spawn run, in the child process: span content off.
async fn child_name_is_exported_redacted() -> Result<(), TestError> {
    let receiver = Receiver::start()?;
    let (_logs, guard) = capture_logs_and_spans(&receiver)?;
    let task = TestTask::new("spawn a child", &[])?
        .grant(&["agent"])
        .max_steps(10);
    let runtime = runtime_with(Vec::new())?;
    let config = task.config();
    assert!(!config.observe.content);
    let outcome = runtime.run(config, spawning_policy()).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    drop(runtime);
    let spans = exported(&receiver, &guard, |spans| {
        spans
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent "))
            .count()
            == 2
    })
    .await?;
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    let child = format!("invoke_agent child-[redacted:env:{PLAIN_NAME}]");
    assert!(names.contains(&child.as_str()), "{names:?}");
    let leaked = leaks("the spans", &span_text(&spans));
    assert!(leaked.is_empty(), "{leaked:#?}");
    Ok(())
}

/// A child the model names after an env secret is exported with the secret
/// redacted from its span's name (and everywhere else), span content off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_named_after_an_env_secret_reaches_the_collector_redacted() -> Result<(), TestError>
{
    if std::env::var(PLAIN_NAME).is_ok() {
        return child_name_is_exported_redacted().await;
    }
    in_child("a_child_named_after_an_env_secret_reaches_the_collector_redacted")
}
