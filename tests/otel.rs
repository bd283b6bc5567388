//! OpenTelemetry spans of real runs, exported by the real OTLP/HTTP exporter
//! to a receiver in the test that decodes the protobuf it gets
//! (`suite/otlp_receiver.rs`). A process of its own: each test installs a
//! subscriber for its thread (a current-thread runtime keeps every actor of
//! its runs on that thread), so the tests' exports never mix.

// Test-only helpers outside #[test] functions (a poisoned lock is a bug in
// the test itself).
#![allow(clippy::unwrap_used)]

#[allow(dead_code, reason = "the all-sinks redaction test uses the rest")]
#[path = "suite/otlp_receiver.rs"]
mod otlp_receiver;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../crates/agentry-models/tests/suite/server.rs"]
mod server;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../crates/agentry-models/tests/suite/sse.rs"]
mod sse;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../crates/agentry-models/tests/suite/strict.rs"]
mod strict;
#[allow(dead_code, reason = "agentry-models' own tests use the rest")]
#[path = "../crates/agentry-models/tests/suite/tls_server.rs"]
mod tls_server;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agentry::{
    ErrorCode, Idempotency, StopReason, Tool, ToolContext, ToolContract, ToolError, ToolOutput,
    async_trait,
};
use agentry_models::OpenAiPolicy;
use agentry_telemetry::otlp::{self, OtlpOptions, TelemetryGuard};
use agentry_test_support::{FlakyTool, ScriptBuilder, TestError, TestTask, runtime_with};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span as OtlpSpan;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

use otlp_receiver::Receiver;
use server::{MockServer, Reply};
use sse::{calls_turn, config, one_call};

/// The parent context a run is given: trace `4bf9…`, span `00f0…`.
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// The OpenTelemetry layer exporting to `endpoint`, as this thread's
/// subscriber while the returned guard lives.
fn export_to(
    endpoint: &str,
) -> Result<(tracing::subscriber::DefaultGuard, TelemetryGuard), TestError> {
    let (layer, guard) = otlp::init(OtlpOptions {
        endpoint: Some(endpoint.to_string()),
        ..OtlpOptions::default()
    })?;
    let subscriber = tracing_subscriber::registry().with(layer);
    Ok((tracing::subscriber::set_default(subscriber), guard))
}

/// Flushes until `done` holds of what the receiver got (the run's actors
/// close their spans as they stop, just after its outcome).
async fn collect(
    receiver: &Receiver,
    guard: &TelemetryGuard,
    done: impl Fn(&[OtlpSpan]) -> bool,
) -> Result<Vec<OtlpSpan>, TestError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        guard.flush();
        let spans = receiver.spans();
        if done(&spans) {
            return Ok(spans);
        }
        if Instant::now() > deadline {
            let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
            return Err(format!("the receiver never got the spans wanted; got {names:?}").into());
        }
        // Lets the stopping actors run (one thread).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attribute, as JSON (strings, ints, bools, arrays of strings).
fn attr(span: &OtlpSpan, key: &str) -> Option<Value> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    let value = kv.value.as_ref()?.value.as_ref()?;
    Some(any_json(value))
}

fn any_json(value: &AnyValue) -> Value {
    match value {
        AnyValue::StringValue(s) => json!(s),
        AnyValue::IntValue(i) => json!(i),
        AnyValue::BoolValue(b) => json!(b),
        AnyValue::DoubleValue(d) => json!(d),
        AnyValue::ArrayValue(a) => a
            .values
            .iter()
            .filter_map(|v| v.value.as_ref().map(any_json))
            .collect(),
        AnyValue::KvlistValue(_) | AnyValue::BytesValue(_) | AnyValue::StringValueStrindex(_) => {
            Value::Null
        }
    }
}

fn named<'a>(spans: &'a [OtlpSpan], name: &str) -> Vec<&'a OtlpSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [OtlpSpan], name: &str) -> Result<&'a OtlpSpan, TestError> {
    match named(spans, name).as_slice() {
        [span] => Ok(span),
        other => Err(format!("{} spans named {name:?}", other.len()).into()),
    }
}

/// The run's traceparent as its JSONL trace's stop record says it.
fn trace_file_traceparent(task: &TestTask) -> Result<String, TestError> {
    let lines = task.read_trace()?;
    let stop = lines
        .iter()
        .rev()
        .find(|l| l.get("stop_reason").is_some())
        .ok_or("no stop record")?;
    Ok(stop["traceparent"]
        .as_str()
        .ok_or("no traceparent")?
        .to_string())
}

/// A parent on the OpenAI adapter (three model requests, served by the
/// scripted server) spawns two scripted children and calls a tool that fails
/// once; run under a given traceparent, every span lands in that trace:
/// `invoke_agent` ×3 (the root's parent the given span, each child's its
/// `execute_tool agent.spawn`), `chat` (CLIENT) under the root, the retry as
/// an event; the model server got each request's `chat` span as its
/// `traceparent` header.
#[tokio::test]
async fn a_tree_run_exports_its_span_tree_over_otlp() -> Result<(), TestError> {
    // Size: one scenario, then its assertions span by span, in tree order.
    let receiver = Receiver::start()?;
    let (_subscriber, guard) = export_to(&receiver.url)?;
    let child = |name: &str| {
        json!({"name": name, "goal": format!("child {name}"), "budget": {"max_steps": 2},
               "script": {"turns": [{"final": format!("{name} done")}]}})
        .to_string()
    };
    let (a, b) = (child("a"), child("b"));
    let server = MockServer::start(vec![
        Reply::sse(calls_turn(&[
            ("s1", "agent_spawn", &a),
            ("s2", "agent_spawn", &b),
            ("f1", "flaky", "{}"),
        ])),
        Reply::sse(one_call(
            "w1",
            "agent_wait",
            &json!({"child_ids": ["a", "b"]}).to_string(),
        )),
        Reply::sse(one_call("fin", "task_finish", "{\"answer\":\"ok\"}")),
    ])
    .await?;
    let flaky = FlakyTool::new(
        "flaky",
        1,
        ToolError::new(ErrorCode::Eunavail, "upstream is down"),
    )
    .idempotency(Idempotency::Idempotent);
    let runtime = runtime_with(vec![Arc::new(flaky)])?;
    let task = TestTask::new("plan", &[])?
        .grant(&["flaky", "agent"])
        .trace();
    let mut config_ = task.config();
    config_.traceparent = Some(PARENT.to_string());
    let policy = OpenAiPolicy::new(config(&server.base_url))?;

    let outcome = runtime.run(config_, policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    let spans = collect(&receiver, &guard, |s| {
        s.iter()
            .filter(|s| s.name.starts_with("invoke_agent "))
            .count()
            == 3
            && s.iter().filter(|s| s.name.starts_with("chat ")).count() == 3
    })
    .await?;
    for span in &spans {
        assert_eq!(hex(&span.trace_id), PARENT_TRACE, "{}", span.name);
    }
    let root = spans
        .iter()
        .find(|s| attr(s, "gen_ai.agent.id") == Some(json!(outcome.run_id)))
        .ok_or("no span of the root run")?;
    assert!(root.name.starts_with("invoke_agent "), "{}", root.name);
    assert_eq!(root.kind, SpanKind::Internal as i32);
    assert_eq!(hex(&root.parent_span_id), PARENT_SPAN);
    assert_eq!(
        attr(root, "gen_ai.operation.name"),
        Some(json!("invoke_agent"))
    );
    assert_eq!(attr(root, "gen_ai.provider.name"), Some(json!("openai")));
    assert_eq!(
        attr(root, "gen_ai.request.model"),
        Some(json!("test-model"))
    );
    assert_eq!(
        attr(root, "gen_ai.conversation.id"),
        Some(json!(outcome.run_id))
    );
    assert_eq!(attr(root, "agentry.stop_reason"), Some(json!("done")));
    assert_eq!(attr(root, "error.type"), None, "a run that stopped done");
    assert_eq!(attr(root, "gen_ai.usage.input_tokens"), Some(json!(30)));
    assert!(attr(root, "agentry.budget.spent.tool_calls").is_some());
    let root_id = hex(&root.span_id);
    // The trace file names the same trace and the same span.
    assert_eq!(
        trace_file_traceparent(&task)?,
        format!("00-{PARENT_TRACE}-{root_id}-01")
    );

    // Each child nests under the spawn that started it.
    let spawns: HashMap<String, &OtlpSpan> = named(&spans, "execute_tool agent.spawn")
        .into_iter()
        .filter_map(|s| Some((attr(s, "gen_ai.tool.call.id")?.as_str()?.to_string(), s)))
        .collect();
    assert_eq!(spawns.len(), 2);
    for (call, name) in [("s1", "a"), ("s2", "b")] {
        let spawn = spawns[call];
        assert_eq!(hex(&spawn.parent_span_id), root_id);
        let child = one(&spans, &format!("invoke_agent {name}"))?;
        assert_eq!(child.kind, SpanKind::Internal as i32);
        assert_eq!(hex(&child.parent_span_id), hex(&spawn.span_id), "{name}");
        assert_eq!(attr(child, "gen_ai.provider.name"), Some(json!("agentry")));
        assert_eq!(
            attr(child, "gen_ai.conversation.id"),
            Some(json!(outcome.run_id))
        );
        assert_eq!(attr(child, "agentry.stop_reason"), Some(json!("done")));
    }

    // The retried call: one span, two attempts, the retry an event on it.
    let flaky = one(&spans, "execute_tool flaky")?;
    assert_eq!(hex(&flaky.parent_span_id), root_id);
    assert_eq!(attr(flaky, "gen_ai.tool.name"), Some(json!("flaky")));
    assert_eq!(attr(flaky, "gen_ai.tool.call.id"), Some(json!("f1")));
    assert_eq!(attr(flaky, "gen_ai.tool.type"), Some(json!("function")));
    assert_eq!(attr(flaky, "agentry.attempt"), Some(json!(2)));
    assert_eq!(attr(flaky, "agentry.outcome"), Some(json!("ok")));
    assert_eq!(
        attr(flaky, "agentry.idempotency"),
        Some(json!("idempotent"))
    );
    assert!(attr(flaky, "agentry.operation_id").is_some());
    assert_eq!(attr(flaky, "error.type"), None);
    let retries: Vec<_> = flaky.events.iter().filter(|e| e.name == "retry").collect();
    assert_eq!(retries.len(), 1, "{:?}", flaky.events);
    let code = retries[0]
        .attributes
        .iter()
        .find(|kv| kv.key == "error.type")
        .and_then(|kv| kv.value.as_ref()?.value.as_ref().map(any_json));
    assert_eq!(code, Some(json!("EUNAVAIL")));

    // Model requests: CLIENT spans under the run, each the parent the server was told.
    let chats = named(&spans, "chat test-model");
    assert_eq!(chats.len(), 3);
    for chat in &chats {
        assert_eq!(chat.kind, SpanKind::Client as i32);
        assert_eq!(hex(&chat.parent_span_id), root_id);
        assert_eq!(attr(chat, "gen_ai.operation.name"), Some(json!("chat")));
        assert_eq!(attr(chat, "gen_ai.provider.name"), Some(json!("openai")));
        assert_eq!(attr(chat, "gen_ai.request.stream"), Some(json!(true)));
        assert_eq!(attr(chat, "gen_ai.response.id"), Some(json!("x")));
        assert_eq!(
            attr(chat, "gen_ai.response.finish_reasons"),
            Some(json!(["tool_calls"]))
        );
        assert_eq!(attr(chat, "gen_ai.usage.input_tokens"), Some(json!(10)));
        assert_eq!(attr(chat, "gen_ai.usage.output_tokens"), Some(json!(5)));
        assert!(attr(chat, "agentry.time_to_first_chunk_ms").is_some());
        assert_eq!(
            attr(chat, "gen_ai.input.messages"),
            None,
            "content is opt-in"
        );
        assert_eq!(
            attr(chat, "gen_ai.output.messages"),
            None,
            "content is opt-in"
        );
    }
    let mut sent: Vec<String> = server
        .received()
        .iter()
        .map(|r| {
            r.headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_string()
        })
        .collect();
    let mut expected: Vec<String> = chats
        .iter()
        .map(|c| format!("00-{PARENT_TRACE}-{}-01", hex(&c.span_id)))
        .collect();
    sent.sort();
    expected.sort();
    assert_eq!(sent, expected);
    Ok(())
}

/// What a tool is handed as `ToolContext::traceparent`, call by call.
#[derive(Clone, Default)]
struct Probe {
    seen: Arc<Mutex<Vec<Option<String>>>>,
}

#[async_trait]
impl Tool for Probe {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            "probe",
            "Records its traceparent.",
            json!({"type": "object"}),
        )
    }

    /// Echoes its arguments.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let tp = ctx.traceparent.as_deref().map(str::to_string);
        self.seen.lock().unwrap().push(tp);
        Ok(ToolOutput::data(args))
    }
}

/// A key-shaped secret a tool is called with (and echoes).
const SECRET: &str = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789";

async fn probe_run(probe: &Probe) -> Result<(agentry::RunOutcome, TestTask), TestError> {
    probe_run_with(probe, false).await
}

/// A scripted run calling `probe` once (with [`SECRET`]); `content`: span
/// content on.
async fn probe_run_with(
    probe: &Probe,
    content: bool,
) -> Result<(agentry::RunOutcome, TestTask), TestError> {
    let runtime = runtime_with(vec![Arc::new(probe.clone())])?;
    let task = TestTask::new("probe", &[])?.grant(&["probe"]).trace();
    let policy = ScriptBuilder::new()
        .call("p1", "probe", json!({"key": SECRET}))
        .finish("ok")
        .policy();
    let mut config = task.config();
    config.observe.content = content;
    let outcome = runtime.run(config, policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok((outcome, task))
}

/// With no subscriber, a tool gets the run's own traceparent (the one its
/// trace file names).
#[tokio::test]
async fn without_spans_a_tool_gets_the_runs_traceparent() -> Result<(), TestError> {
    let probe = Probe::default();
    let (_, task) = probe_run(&probe).await?;
    let seen = probe.seen.lock().unwrap().clone();
    assert_eq!(seen, vec![Some(trace_file_traceparent(&task)?)]);
    Ok(())
}

/// With spans exported, a tool gets its `execute_tool` span's traceparent,
/// and a run given no parent takes its exported span's trace id: the trace
/// file names the trace and span the collector got.
#[tokio::test]
async fn with_spans_a_tool_gets_its_call_spans_traceparent() -> Result<(), TestError> {
    let receiver = Receiver::start()?;
    let (_subscriber, guard) = export_to(&receiver.url)?;
    let probe = Probe::default();
    let (outcome, task) = probe_run(&probe).await?;
    let spans = collect(&receiver, &guard, |s| {
        s.iter().any(|s| s.name.starts_with("invoke_agent "))
            && s.iter().any(|s| s.name == "execute_tool probe")
    })
    .await?;
    let call = one(&spans, "execute_tool probe")?;
    assert_eq!(
        attr(call, "gen_ai.tool.call.arguments"),
        None,
        "content is opt-in"
    );
    assert_eq!(
        attr(call, "gen_ai.tool.call.result"),
        None,
        "content is opt-in"
    );
    let trace = hex(&call.trace_id);
    let seen = probe.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![Some(format!("00-{trace}-{}-01", hex(&call.span_id)))]
    );
    let run = spans
        .iter()
        .find(|s| attr(s, "gen_ai.agent.id") == Some(json!(outcome.run_id)))
        .ok_or("no run span")?;
    assert_eq!(attr(run, "gen_ai.provider.name"), Some(json!("agentry")));
    assert!(run.parent_span_id.is_empty(), "a root with no parent given");
    assert_eq!(
        trace_file_traceparent(&task)?,
        format!("00-{trace}-{}-01", hex(&run.span_id))
    );
    Ok(())
}

/// A collector that is down costs the run nothing but its spans: the run
/// finishes `done`, and the spans it could not send are counted.
#[tokio::test]
async fn a_dead_collector_drops_spans_and_the_run_goes_on() -> Result<(), TestError> {
    // A port nobody listens on any more.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.local_addr()?
    };
    let (_subscriber, guard) = export_to(&format!("http://{closed}/v1/traces"))?;
    let probe = Probe::default();
    let (outcome, _task) = probe_run(&probe).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done);
    let deadline = Instant::now() + Duration::from_secs(30);
    // At least the run's span and its probe call's.
    while guard.dropped() < 2 {
        assert!(
            Instant::now() < deadline,
            "dropped {} spans, wanted the run's and its call's",
            guard.dropped()
        );
        guard.flush();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// With `observe.content`, a call's arguments and result are span
/// attributes, redacted before they are recorded: the key-shaped secret the
/// tool got and echoed keeps its shape, never its value.
#[tokio::test]
async fn span_content_is_opt_in_and_redacted() -> Result<(), TestError> {
    let receiver = Receiver::start()?;
    let (_subscriber, guard) = export_to(&receiver.url)?;
    let probe = Probe::default();
    probe_run_with(&probe, true).await?;
    let spans = collect(&receiver, &guard, |s| {
        s.iter().any(|s| s.name == "execute_tool probe")
    })
    .await?;
    let call = one(&spans, "execute_tool probe")?;
    for field in ["gen_ai.tool.call.arguments", "gen_ai.tool.call.result"] {
        let text = attr(call, field).ok_or(field)?.to_string();
        assert!(text.contains("[redacted:openai_key]"), "{field}: {text}");
        assert!(!text.contains(&SECRET[8..]), "{field}: {text}");
    }
    Ok(())
}

/// With `observe.content`, a model request's span carries the messages sent
/// and the decision that came back, redacted: a key in the goal and in the
/// model's answer keeps its shape, never its value; the model got the real one.
#[tokio::test]
async fn chat_content_is_opt_in_and_redacted() -> Result<(), TestError> {
    let receiver = Receiver::start()?;
    let (_subscriber, guard) = export_to(&receiver.url)?;
    let answer = json!({ "answer": SECRET }).to_string();
    let server =
        MockServer::start(vec![Reply::sse(one_call("fin", "task_finish", &answer))]).await?;
    let runtime = runtime_with(Vec::new())?;
    let task = TestTask::new(&format!("use the key {SECRET}"), &[])?;
    let mut run = task.config();
    run.observe.content = true;
    let outcome = runtime
        .run(run, OpenAiPolicy::new(config(&server.base_url))?)
        .await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let spans = collect(&receiver, &guard, |s| {
        s.iter().any(|s| s.name == "chat test-model")
    })
    .await?;
    let chat = one(&spans, "chat test-model")?;
    for field in ["gen_ai.input.messages", "gen_ai.output.messages"] {
        let text = attr(chat, field).ok_or(field)?.to_string();
        assert!(text.contains("[redacted:openai_key]"), "{field}: {text}");
        assert!(!text.contains(&SECRET[8..]), "{field}: {text}");
    }
    let sent = server.received();
    assert!(
        sent[0].body.to_string().contains(SECRET),
        "the model gets the real value"
    );
    Ok(())
}
