//! Unit tests and proptests of the redactor.

use std::borrow::Cow;

use proptest::prelude::*;

use crate::{LiteralKind, RedactError, Redactor, StreamHoldback};

mod alloc_count;
mod escapes;

const OPENAI: &str = "sk-proj-AbCdEfGhIjKlMnOpQrStUvWx12";
const ANTHROPIC: &str = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv";
const AWS: &str = "AKIAIOSFODNN7EXAMPLE";
const GITHUB: &str = "ghp_0123456789abcdefghijklmnopqrstuvwxyz";
const GITHUB_PAT: &str = "github_pat_11ABCDEFG0123456789_abcdefghijkl";
const SLACK: &str = "xoxb-1234567890-abcdefghij";
const GOOGLE: &str = "AIzaSyA-0123456789abcdefghijklmnopqrstu";
const JWT: &str =
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
const PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA0Z3VS5JJcds3xfn\n/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n-----END RSA PRIVATE KEY-----";

fn redactor() -> Redactor {
    match Redactor::builder()
        .env(Vec::<(String, String)>::new())
        .build()
    {
        Ok(r) => r,
        Err(e) => panic!("build: {e}"),
    }
}

fn full_redactor() -> Redactor {
    let r = Redactor::builder()
        .env([
            ("MY_API_TOKEN", "tok-3f9a8b7c6d"),
            ("HOME", "/home/someone-long"),
        ])
        .patterns([r"\b\d{4}-\d{4}-\d{4}-\d{4}\b"])
        .build()
        .unwrap_or_else(|e| panic!("build: {e}"));
    r.add_literal("open sesame", LiteralKind::Field("password".into()))
        .unwrap_or_else(|e| panic!("literal: {e}"));
    r
}

#[test]
fn every_builtin_compiles() {
    assert_eq!(crate::builtin::DETECTORS.len(), crate::builtin::COUNT);
}

#[test]
fn each_detector_keeps_its_anchor() {
    let r = redactor();
    let cases = [
        (OPENAI, "sk-…[redacted:openai_key]"),
        ("sk-AbCdEfGhIjKlMnOpQrStUvWx", "sk-…[redacted:openai_key]"),
        (ANTHROPIC, "sk-ant-…[redacted:anthropic_key]"),
        (AWS, "AKIA…[redacted:aws_access_key]"),
        ("ASIAIOSFODNN7EXAMPLE", "ASIA…[redacted:aws_access_key]"),
        (GITHUB, "ghp_…[redacted:github_token]"),
        (GITHUB_PAT, "github_pat_…[redacted:github_token]"),
        (SLACK, "xoxb-…[redacted:slack_token]"),
        (GOOGLE, "AIza…[redacted:google_api_key]"),
        (JWT, "eyJ…[redacted:jwt]"),
        (
            "Bearer abcdefghijklmnop.qrstuv",
            "Bearer …[redacted:bearer]",
        ),
        ("basic dXNlcjpwYXNzd29yZDEyMzQ=", "basic …[redacted:bearer]"),
        (
            PEM,
            "-----BEGIN RSA PRIVATE KEY-----…[redacted:private_key]",
        ),
    ];
    for (secret, shape) in cases {
        let text = format!("before {secret} after");
        assert_eq!(
            r.redact_str(&text),
            format!("before {shape} after"),
            "{secret}"
        );
    }
}

#[test]
fn authorization_header_keeps_its_name() {
    let r = redactor();
    let out = r.redact_str("Authorization: Bearer abcdefghijklmnop.qrstuv\r\n");
    assert_eq!(out, "Authorization: Bearer …[redacted:bearer]\r\n");
}

#[test]
fn lookalikes_are_left_alone() {
    let r = redactor();
    for text in [
        "sk-short",
        "AKIAIOSFODNN7EXAMPLEX",
        "the basic idea",
        "eyJ.eyJ.x",
        "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----",
        "a bearer of news",
    ] {
        assert!(matches!(r.redact_str(text), Cow::Borrowed(_)), "{text}");
    }
}

#[test]
fn env_values_of_secret_names_are_redacted() {
    let r = Redactor::builder()
        .env([
            ("MY_API_TOKEN", "tok-3f9a8b7c6d"),
            ("db_password", "correct-horse"),
            ("SHORT_KEY", "1234567"),
            ("PATH", "/usr/local/bin:/usr/bin"),
        ])
        .build()
        .unwrap_or_else(|e| panic!("build: {e}"));
    let text = "t=tok-3f9a8b7c6d p=correct-horse s=1234567 path=/usr/local/bin:/usr/bin";
    assert_eq!(
        r.redact_str(text),
        "t=[redacted:env:MY_API_TOKEN] p=[redacted:env:db_password] s=1234567 path=/usr/local/bin:/usr/bin"
    );
}

#[test]
fn redactors_of_the_same_values_share_what_they_compiled_and_nothing_registered() {
    let build = || {
        Redactor::builder()
            .env([("MY_API_TOKEN", "tok-3f9a8b7c6d")])
            .patterns([r"card-\d{4}"])
            .build()
            .unwrap_or_else(|e| panic!("build: {e}"))
    };
    let (a, b) = (build(), build());
    assert!(std::sync::Arc::ptr_eq(&a.snapshot(), &b.snapshot()));
    let task = |r: &Redactor| r.task.clone().unwrap_or_else(|| panic!("no task patterns"));
    assert!(std::sync::Arc::ptr_eq(&task(&a), &task(&b)));
    // A value registered with one redactor stays with it.
    a.add_literal("open sesame", LiteralKind::Field("password".into()))
        .unwrap_or_else(|e| panic!("{e}"));
    let text = "open sesame tok-3f9a8b7c6d card-1234";
    let both = "[redacted:env:MY_API_TOKEN] [redacted:pattern:0]";
    assert_eq!(
        a.redact_str(text),
        format!("[redacted:field:password] {both}")
    );
    assert_eq!(b.redact_str(text), format!("open sesame {both}"));
    assert_eq!(build().redact_str(text), format!("open sesame {both}"));
    // The process environment is read once and its compiled values shared.
    let env = || {
        Redactor::builder()
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    assert!(std::sync::Arc::ptr_eq(&env().snapshot(), &env().snapshot()));
}

#[test]
fn literals_match_on_token_boundaries_only() {
    let r = redactor();
    r.add_literal("4321", LiteralKind::Field("cvv".into()))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r.redact_str("cvv 4321, not 143210 or x4321"),
        "cvv [redacted:field:cvv], not 143210 or x4321"
    );
}

#[test]
fn task_patterns_are_named_by_index() {
    let r = Redactor::builder()
        .env(Vec::<(String, String)>::new())
        .patterns([r"order-\d+", r"(\d{4})-(\d{4})-\d{4}-\d{4}"])
        .build()
        .unwrap_or_else(|e| panic!("build: {e}"));
    assert_eq!(
        r.redact_str("card 4111-1111-1111-1111 for order-17"),
        "card [redacted:pattern:1] for [redacted:pattern:0]"
    );
}

#[test]
fn bad_task_pattern_is_a_typed_error_naming_its_index() {
    let err = Redactor::builder()
        .patterns([r"ok", r"also(ok)", r"broken("])
        .build()
        .err();
    match err {
        Some(RedactError::BadPattern { index, pattern, .. }) => {
            assert_eq!(index, 2);
            assert_eq!(pattern, "broken(");
        }
        other => panic!("expected BadPattern, got {other:?}"),
    }
}

#[test]
fn a_miss_is_borrowed_and_does_not_allocate() {
    let r = full_redactor();
    let text = "a long ordinary line of model output with numbers 1234 and words; nothing secret.";
    let _ = r.redact_str(text); // warm up lazies
    let (out, allocs) = alloc_count::count(|| matches!(r.redact_str(text), Cow::Borrowed(_)));
    assert!(out);
    assert_eq!(allocs, 0);
    let r = redactor();
    let mut json = br#"{"role":"assistant","text":"nothing to see","n":[1,2]}"#.to_vec();
    let _ = r.redact_json(&mut json);
    let (changed, allocs) = alloc_count::count(|| r.redact_json(&mut json));
    assert!(!changed);
    assert_eq!(allocs, 0);
}

#[test]
fn json_escaped_pem_is_redacted_and_stays_json() {
    let r = redactor();
    let mut buf = serde_json::to_vec(&serde_json::json!({"out": PEM, "k": OPENAI}))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.redact_json(&mut buf));
    let back: serde_json::Value = serde_json::from_slice(&buf).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        back["out"],
        "-----BEGIN RSA PRIVATE KEY-----…[redacted:private_key]"
    );
    assert_eq!(back["k"], "sk-…[redacted:openai_key]");
}

#[test]
fn literal_with_json_escapes_is_found() {
    let r = redactor();
    r.add_literal("pa\"ss\\word", LiteralKind::Field("password".into()))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut buf = serde_json::to_vec(&serde_json::json!({"a": "x pa\"ss\\word y"}))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.redact_json(&mut buf));
    assert_eq!(buf, br#"{"a":"x [redacted:field:password] y"}"#);
}

#[test]
fn redact_value_round_trips_structs() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Msg {
        role: String,
        parts: Vec<String>,
    }
    let r = redactor();
    let mut msg = Msg {
        role: "user".into(),
        parts: vec![format!("my key is {AWS}"), "hi".into()],
    };
    assert_eq!(r.redact_value(&mut msg).ok(), Some(true));
    assert_eq!(msg.parts[0], "my key is AKIA…[redacted:aws_access_key]");
    assert_eq!(r.redact_value(&mut msg).ok(), Some(false));
}

fn stream_all(r: &Redactor, deltas: &[&str]) -> String {
    let mut hold: StreamHoldback = r.stream();
    let mut out = String::new();
    for d in deltas {
        out.extend(hold.push(r, d));
    }
    out.extend(hold.flush(r));
    out
}

#[test]
fn secret_split_across_two_deltas_is_redacted_at_every_cut() {
    let r = full_redactor();
    let text = format!(
        "use {OPENAI} and Bearer abcdefghijklmnop.qrstuv, pw 'open sesame' and\n{PEM}\ncard 4111-1111-1111-1111 done"
    );
    let want = r.redact_str(&text).into_owned();
    for cut in (0..=text.len()).filter(|c| text.is_char_boundary(*c)) {
        let got = stream_all(&r, &[&text[..cut], &text[cut..]]);
        assert_eq!(got, want, "cut at {cut}");
    }
}

#[test]
fn long_streams_are_force_emitted_redacted() {
    let r = redactor();
    let mut hold = r.stream();
    let big = format!("{} {AWS}", "x".repeat(5000));
    let out = hold.push(&r, &big).unwrap_or_default();
    assert!(out.ends_with("AKIA…[redacted:aws_access_key]"));
}

fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 _.:/=,-]{0,12}",
        1 => prop::sample::select(vec![
            OPENAI, ANTHROPIC, AWS, GITHUB, GITHUB_PAT, SLACK, GOOGLE, JWT, PEM,
            "Bearer abcdefghijklmnop.qrstuv", "tok-3f9a8b7c6d", "open sesame",
            "4111-1111-1111-1111", "[redacted:field:password]", "sk-", "…",
        ])
        .prop_map(str::to_owned),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 0..8).prop_map(|v| v.join(" "))
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<i64>().prop_map(serde_json::Value::from),
        text().prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn redact_strings(r: &Redactor, v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(r.redact_str(s).into_owned()),
        Value::Array(a) => Value::Array(a.iter().map(|x| redact_strings(r, x)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (r.redact_str(k).into_owned(), redact_strings(r, x)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => v.clone(),
    }
}

proptest! {
    #[test]
    fn redaction_is_idempotent(s in text()) {
        let r = full_redactor();
        let once = r.redact_str(&s).into_owned();
        let twice = r.redact_str(&once).into_owned();
        prop_assert_eq!(&twice, &once);
        for secret in [OPENAI, AWS, JWT, "tok-3f9a8b7c6d", "open sesame"] {
            prop_assert!(!once.contains(secret));
        }
    }

    #[test]
    fn redact_json_keeps_valid_json(v in json_value()) {
        let r = full_redactor();
        let mut buf = serde_json::to_vec(&v).unwrap_or_default();
        r.redact_json(&mut buf);
        let back: serde_json::Value = serde_json::from_slice(&buf)
            .map_err(|e| TestCaseError::fail(format!("invalid JSON out: {e}")))?;
        prop_assert_eq!(back, redact_strings(&r, &v));
    }

    #[test]
    fn streamed_text_equals_redacting_it_whole(s in text(), a in 0usize..400, b in 0usize..400) {
        let r = full_redactor();
        let mut cuts: Vec<usize> = [a, b].iter().map(|c| c % (s.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.iter_mut().for_each(|c| while !s.is_char_boundary(*c) { *c -= 1 });
        let deltas = [&s[..cuts[0]], &s[cuts[0]..cuts[1]], &s[cuts[1]..]];
        prop_assert_eq!(stream_all(&r, &deltas), r.redact_str(&s).into_owned());
    }
}

#[test]
fn log_lines_are_redacted_by_the_make_writer() {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let make = {
        let sink = sink.clone();
        move || sink.clone()
    };
    let writer = crate::RedactingMakeWriter::new(make, Arc::new(full_redactor()));
    let subscriber = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        tracing::warn!(message = %format!("server said: bad key {OPENAI}"), token = "tok-3f9a8b7c6d");
    });
    let logged = String::from_utf8_lossy(
        &sink
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    )
    .into_owned();
    assert!(
        logged.contains("bad key sk-…[redacted:openai_key]"),
        "{logged}"
    );
    assert!(logged.contains("[redacted:env:MY_API_TOKEN]"), "{logged}");
    assert!(
        !logged.contains(OPENAI) && !logged.contains("tok-3f9a8b7c6d"),
        "{logged}"
    );
}
