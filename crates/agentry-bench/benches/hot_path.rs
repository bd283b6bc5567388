//! Micro-benchmarks of the per-step hot path: what the executor and the
//! conductor do for every W1 step besides moving messages.
//!
//! `cargo bench -p agentry-bench` (divan). CI only builds them.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use agentry::protocol::budget::{BudgetLimits, BudgetSnapshot, Usage};
use agentry::protocol::fingerprint;
use agentry::protocol::{Decision, RunSnapshot, ToolArguments, TraceLine, TraceStep};
use agentry::{ResultEnvelope, ToolCall, ToolRegistry};
use divan::{Bencher, black_box};
use serde_json::{Value, json};

fn main() {
    // Sub-microsecond bodies: many iterations per sample, so the 30 ns timer
    // precision is not what is measured.
    divan::Divan::from_args()
        .sample_count(200)
        .sample_size(200)
        .main();
}

fn registry() -> ToolRegistry {
    agentry_bench::tools::registry(None).unwrap()
}

fn add_call(i: u64) -> ToolCall {
    ToolCall {
        id: format!("call_{i}"),
        name: "add".to_string(),
        arguments: ToolArguments::Raw(format!("{{\"a\": {}, \"b\": 1}}", i - 1)),
    }
}

fn add_result(i: u64) -> ResultEnvelope {
    ResultEnvelope::success(
        &format!("call_{i}"),
        "add",
        Value::String(i.to_string()),
        Vec::new(),
    )
}

/// Parsing the model's arguments string (`ToolArguments::to_value`).
#[divan::bench]
fn parse_arguments(b: Bencher) {
    let call = add_call(5000);
    b.bench(|| black_box(&call.arguments).to_value());
}

/// Schema validation of a valid `add` call through the registry.
#[divan::bench]
fn validate_add(b: Bencher) {
    let registry = registry();
    let tool = registry.get("add").unwrap();
    let args = json!({"a": 4999, "b": 1});
    b.bench(|| tool.validate(black_box(&args)));
}

/// Schema validation of an invalid call (extra field, wrong type): the error path
/// builds a message per violation.
#[divan::bench]
fn validate_add_invalid(b: Bencher) {
    let registry = registry();
    let tool = registry.get("add").unwrap();
    let args = json!({"a": "x", "b": 1, "c": 2});
    b.bench(|| tool.validate(black_box(&args)));
}

/// The idempotency digest the executor takes per call: sha256 of the canonical
/// `{"name", "arguments"}`.
#[divan::bench]
fn fingerprint_call(b: Bencher) {
    let value = json!({"name": "add", "arguments": {"a": 4999, "b": 1}});
    b.bench(|| fingerprint::digest(black_box(&value)));
}

/// The same call through the streaming `Fingerprinter` (XXH3-128, no JSON value
/// assembled, a number out), which is what the executor's idempotency table
/// and the step fingerprint use on the hot path.
#[divan::bench]
fn fingerprinter_call(b: Bencher) {
    let args = json!({"a": 4999, "b": 1});
    b.bench(|| {
        fingerprint::Fingerprinter::new()
            .str(black_box("add"))
            .value(black_box(&args))
            .finish_u128()
    });
}

/// sha256 of a step fingerprint's input shape (action, observation, world) as
/// one JSON value: what a step cost before the runtime moved to `Fingerprinter`.
#[divan::bench]
fn fingerprint_step(b: Bencher) {
    let value = json!({
        "action": [{"name": "add", "arguments": {"a": 4999, "b": 1}}],
        "observation": [add_result(5000).observation()],
        "world": "44136fa355b3678a",
    });
    b.bench(|| fingerprint::short_digest(black_box(&value)));
}

/// Serializing one result envelope.
#[divan::bench]
fn envelope_to_vec(b: Bencher) {
    let env = add_result(5000);
    b.bench(|| serde_json::to_vec(black_box(&env)).unwrap());
}

fn trace_step() -> TraceLine {
    let limits = BudgetLimits {
        max_steps: Some(10_000),
        ..BudgetLimits::default()
    };
    let spent = Usage {
        steps: 5000,
        tool_calls: 4999,
        ..Usage::default()
    };
    TraceLine::Step(Box::new(TraceStep {
        run_id: "0198f7a2-5c3e-7b1d-9a4f-2e6c8d0b1a39".into(),
        task_id: "bench".into(),
        parent_id: None,
        traceparent: "00-0198f7a25c3e7b1d9a4f2e6c8d0b1a39-44136fa355b3678a-01".into(),
        step: 5000,
        attempt: 1,
        model: "scripted-add".into(),
        prompt_hash: None,
        usage: Default::default(),
        compaction: None,
        decision: Decision::ToolCalls {
            calls: vec![add_call(5000)],
        }
        .into(),
        results: vec![add_result(5000).into()],
        sandboxes: Vec::new(),
        attempts: Vec::new(),
        interrupted: None,
        budget_before: BudgetSnapshot::new(limits, spent, 20),
        budget_after: BudgetSnapshot::new(limits, spent, 20),
        state_version: 5000,
        fingerprint: "44136fa355b3678a".to_string(),
        state: RunSnapshot::default(),
        at: 1_760_000_000_000,
    }))
}

/// Writing one trace record (a step) as a JSONL line into a buffer, as the
/// trace writer thread does.
#[divan::bench]
fn trace_record_write(b: Bencher) {
    let line = trace_step();
    let mut out = Vec::with_capacity(4096);
    b.bench_local(|| {
        out.clear();
        serde_json::to_writer(&mut out, black_box(&line)).unwrap();
        out.push(b'\n');
        out.len()
    });
}
