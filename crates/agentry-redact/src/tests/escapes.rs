//! A secret is found however JSON escapes what is before it, after it or in
//! it, at every nesting of JSON in JSON strings the views decode, and in the
//! cheap encodings a tool may apply (issue 33). The redactor has no task
//! pattern unless a test says so: the prefilter alone decides what is looked
//! at closely.

use crate::forms::{ascii_escape, base64, forms, serde_escape};
use crate::{LiteralKind, Redactor};

/// An env value with nothing JSON escapes.
const PLAIN: &str = "tok-3f9a8b7c6d5e";
const PLAIN_MARKER: &str = "[redacted:env:MY_API_TOKEN]";
/// A field value made mostly of what JSON escapes (its longest plain run is short).
const ODD: &str = "p\"w\\d/é\t\u{1F600}-Zq8x";
const ODD_MARKER: &str = "[redacted:field:password]";
/// A field value with a quote, a slash and a non-ASCII letter in a long plain run.
const LONG: &str = "hunter2-correct\"horse/é";
const LONG_MARKER: &str = "[redacted:field:phrase]";

/// The redactor of the three secrets, with the task pattern `card-NNNN`
/// when `with_pattern` (without, the prefilter alone decides what is looked
/// at closely).
fn redactor_with(with_pattern: bool) -> Redactor {
    let patterns: &[&str] = if with_pattern {
        &[r"\bcard-\d{4}\b"]
    } else {
        &[]
    };
    let r = Redactor::builder()
        .env([("MY_API_TOKEN", PLAIN)])
        .patterns(patterns.iter().copied())
        .build()
        .unwrap_or_else(|e| panic!("build: {e}"));
    for (value, field) in [(ODD, "password"), (LONG, "phrase")] {
        r.add_literal(value, LiteralKind::Field(field.into()))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    r
}

fn redactor() -> Redactor {
    redactor_with(false)
}

/// Every JSON escape, as written and as read.
const ESCAPES: &[(&str, &str)] = &[
    (r"\n", "\n"),
    (r"\t", "\t"),
    (r"\r", "\r"),
    (r#"\""#, "\""),
    (r"\\", "\\"),
    (r"\/", "/"),
    (r"\u00e9", "é"),
    (r"\u000A", "\n"),
    (r"\ud83d\ude00", "\u{1F600}"),
];

/// How an encoder escapes the secret itself.
type Escape = fn(&str) -> String;
const STYLES: [Escape; 2] = [serde_escape, ascii_escape];

/// `text` as read after `levels` levels of JSON string unescaping.
fn unescaped(text: &str, levels: usize) -> String {
    let mut text = text.to_owned();
    for level in 0..levels {
        text = serde_json::from_str::<String>(&format!("\"{text}\""))
            .unwrap_or_else(|e| panic!("level {level} of {text:?} is no JSON string: {e}"));
    }
    text
}

/// Where the escape goes around the secret.
#[derive(Debug, Clone, Copy)]
enum Place {
    Around,
    Before,
    After,
}

impl Place {
    /// (written, read): the secret between "line1"/"x" and the escape.
    fn text(self, escape: &str, secret: &str) -> String {
        match self {
            Place::Around => format!("line1{escape}{secret}{escape}x"),
            Place::Before => format!("line1{escape}{secret}"),
            Place::After => format!("{secret}{escape}x"),
        }
    }
}

#[test]
fn every_json_escape_before_after_and_inside_a_secret_at_every_nesting() {
    let r = redactor();
    let mut failures = Vec::new();
    for (secret, marker) in [
        (PLAIN, PLAIN_MARKER),
        (ODD, ODD_MARKER),
        (LONG, LONG_MARKER),
    ] {
        for style in STYLES {
            for &(written, read) in ESCAPES {
                for place in [Place::Around, Place::Before, Place::After] {
                    // Level 1: a JSON string's content; each further level
                    // puts the one below in a JSON string.
                    let mut text = place.text(written, &style(secret));
                    for levels in 1..=4 {
                        let want = place.text(read, marker);
                        let out = r.redact_str(&text).into_owned();
                        let got = unescaped(&out, levels);
                        if got != want {
                            failures.push(format!("{text:?} (level {levels}) -> {got:?}"));
                        }
                        let mut doc = format!(r#"{{"args":"{text}"}}"#).into_bytes();
                        r.redact_json(&mut doc);
                        let doc: serde_json::Value = serde_json::from_slice(&doc)
                            .unwrap_or_else(|e| panic!("{text:?}: {e}"));
                        let got =
                            unescaped(&serde_escape(doc["args"].as_str().unwrap_or("")), levels);
                        if got != want {
                            failures.push(format!("json {text:?} (level {levels}) -> {got:?}"));
                        }
                        text = serde_escape(&text);
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} missed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn detectors_and_task_patterns_see_past_an_escape_too() {
    let r = redactor_with(true);
    let text =
        r#"{"cmd":"line1\nAKIAIOSFODNN7EXAMPLE\nBearer abcdefghijklmnop.qrstuv\ncard-1234\n"}"#;
    assert_eq!(
        r.redact_str(text),
        r#"{"cmd":"line1\nAKIA…[redacted:aws_access_key]\nBearer …[redacted:bearer]\n[redacted:pattern:0]\n"}"#
    );
}

/// What a tool that reads the environment may print: the secret in `NAME=`
/// … `\0` context, at every offset modulo 3; and whether it follows a letter.
fn contexts(secret: &str) -> Vec<(Vec<u8>, bool)> {
    ["", "a", "ab", "MY_API_TOKEN=", "A=1\0B=22\0TOKEN="]
        .iter()
        .flat_map(|before| {
            let glued = before.ends_with(|c: char| c.is_ascii_alphanumeric());
            ["", "\0", "\0PATH=/usr/bin\0"]
                .iter()
                .map(move |after| (format!("{before}{secret}{after}").into_bytes(), !glued))
        })
        .collect()
}

fn padded(mut b64: String) -> String {
    while !b64.len().is_multiple_of(4) {
        b64.push('=');
    }
    b64
}

fn url_safe(b64: &str) -> String {
    b64.replace('+', "-").replace('/', "_")
}

fn wrapped(text: &str, width: usize, line_break: &str) -> String {
    let lines: Vec<&str> = text
        .as_bytes()
        .chunks(width)
        .filter_map(|c| std::str::from_utf8(c).ok())
        .collect();
    lines.join(line_break)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `bytes` percent-encoded, keeping ASCII letters and digits when `alnum`
/// and the bytes of `keep`.
fn percent_all(bytes: &[u8], alnum: bool, keep: &str) -> String {
    bytes
        .iter()
        .map(|&b| {
            if (alnum && b.is_ascii_alphanumeric()) || keep.as_bytes().contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Each way a tool may print `data` (name, text): the encodings that keep
/// its bytes' alignment, and (`textual`, when the secret does not follow a
/// letter in `data`) those that keep its characters.
fn encodings(data: &[u8], textual: bool) -> Vec<(String, String)> {
    let b64 = base64(data);
    let mut out: Vec<(String, String)> = vec![
        ("base64".into(), padded(b64.clone())),
        ("base64, no padding".into(), b64.clone()),
        ("base64url".into(), padded(url_safe(&b64))),
        ("base64url, no padding".into(), url_safe(&b64)),
        (
            "base64 wrapped at 76".into(),
            wrapped(&padded(b64.clone()), 76, "\n"),
        ),
        (
            "base64 wrapped, CRLF".into(),
            wrapped(&padded(b64.clone()), 76, "\r\n"),
        ),
        ("base64 wrapped, in JSON".into(), wrapped(&b64, 76, r"\n")),
        ("hex".into(), hex(data)),
        ("HEX".into(), hex(data).to_uppercase()),
        ("hex wrapped at 60".into(), wrapped(&hex(data), 60, "\n")),
        ("percent, every byte".into(), percent_all(data, false, "")),
    ];
    if textual {
        let text = String::from_utf8_lossy(data).into_owned();
        out.extend([
            ("percent, RFC 3986".into(), percent_all(data, true, "-._~")),
            (
                "percent, lower-case".into(),
                percent_all(data, true, "-._~").to_lowercase(),
            ),
            (
                "percent, encodeURIComponent".into(),
                percent_all(data, true, "-._~!'()*"),
            ),
            (
                "percent, quote_plus".into(),
                percent_all(data, true, "-._~").replace("%20", "+"),
            ),
            (
                "percent, letters and digits only".into(),
                percent_all(data, true, ""),
            ),
            ("upper-case".into(), text.to_uppercase()),
            ("lower-case".into(), text.to_lowercase()),
        ]);
    }
    out
}

#[test]
fn base64_hex_percent_and_case_forms_of_a_secret_are_redacted() {
    let r = redactor();
    let mut failures = Vec::new();
    for (secret, marker) in [
        (PLAIN, PLAIN_MARKER),
        (ODD, ODD_MARKER),
        (LONG, LONG_MARKER),
    ] {
        let searched = forms(secret, 0);
        for (data, textual) in contexts(secret) {
            for (name, text) in encodings(&data, textual) {
                let out = r.redact_str(&text).into_owned();
                let joined = out.replace(['\n', '\r'], "").replace(r"\n", "");
                let lower = joined.to_lowercase();
                let left: Vec<&str> = searched
                    .iter()
                    .map(|f| f.text.as_str())
                    .filter(|f| lower.contains(&f.to_lowercase()))
                    .collect();
                if !out.contains(marker) || !left.is_empty() {
                    failures.push(format!("{name} of {data:?}: {text:?} -> {out:?}"));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} missed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn encodings_of_short_values_and_of_other_text_are_left_alone() {
    let r = redactor();
    r.add_literal("4321", LiteralKind::Field("cvv".into()))
        .unwrap_or_else(|e| panic!("{e}"));
    for text in [
        base64(b"cvv 4321"),
        hex(b"4321"),
        base64(b"tok-3f9a8b7c6d5"),
        base64(&[7u8; 300]),
        "C:\\new\\dir \\u00zz \\".to_owned(),
    ] {
        assert_eq!(r.redact_str(&text), text);
    }
}

#[test]
fn streamed_encoded_forms_are_held_until_whole() {
    let r = redactor();
    let text = format!(
        "env {} end",
        base64(format!("MY_API_TOKEN={PLAIN}").as_bytes())
    );
    let want = r.redact_str(&text).into_owned();
    assert!(want.contains(PLAIN_MARKER), "{want}");
    for cut in (0..=text.len()).filter(|c| text.is_char_boundary(*c)) {
        let mut hold = r.stream();
        let mut got = String::new();
        got.extend(hold.push(&r, &text[..cut]));
        got.extend(hold.push(&r, &text[cut..]));
        got.extend(hold.flush(&r));
        assert_eq!(got, want, "cut at {cut}");
    }
}
