//! The cost of redacting a trace-sized line (~1.8 KB of JSON) that holds no
//! secret (the common case: one prefilter scan, no allocation) against one that
//! holds a key (the walk, unescape, redact, re-escape).
//!
//! `cargo bench -p agentry-redact --bench miss`

use std::hint::black_box;

use agentry_redact::{LiteralKind, Redactor};

fn main() {
    divan::main();
}

fn redactor() -> Redactor {
    let r = Redactor::builder()
        .env([("MY_API_TOKEN", "tok-3f9a8b7c6d")])
        .build()
        .unwrap_or_else(|e| panic!("build: {e}"));
    r.add_literal("open sesame", LiteralKind::Field("password".into()))
        .unwrap_or_else(|e| panic!("literal: {e}"));
    r
}

fn line(secret: &str) -> Vec<u8> {
    let text = format!(
        "{}{secret}",
        "the model read the file and found nothing of note; ".repeat(30)
    );
    serde_json::to_vec(&serde_json::json!({"step": 7, "kind": "tool_result", "text": text}))
        .unwrap_or_default()
}

#[divan::bench]
fn json_miss(bencher: divan::Bencher) {
    let r = redactor();
    let buf = line("");
    bencher.bench_local(|| {
        let mut b = buf.clone();
        black_box(r.redact_json(black_box(&mut b)))
    });
}

#[divan::bench]
fn json_hit(bencher: divan::Bencher) {
    let r = redactor();
    let buf = line(" sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12");
    bencher.bench_local(|| {
        let mut b = buf.clone();
        black_box(r.redact_json(black_box(&mut b)))
    });
}

#[divan::bench]
fn str_miss(bencher: divan::Bencher) {
    let r = redactor();
    let text = String::from_utf8(line("")).unwrap_or_default();
    bencher.bench_local(|| black_box(r.redact_str(black_box(&text)).len()));
}
