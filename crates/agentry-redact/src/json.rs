//! Redaction inside the string literals of a serialized JSON document.

use std::borrow::Cow;

use crate::literals::Literals;
use crate::scan;
use crate::task::TaskPatterns;

/// Redacts every string literal of `buf` (unescaped first, re-escaped after), so
/// escaped secrets (a PEM's `\n`) match and no replacement can break the JSON.
pub(crate) fn redact(literals: &Literals, task: Option<&TaskPatterns>, buf: &mut Vec<u8>) -> bool {
    if !may_match(literals, task, buf) {
        return false;
    }
    let mut out: Vec<u8> = Vec::new();
    let mut copied = 0;
    let mut i = 0;
    while i < buf.len() {
        if buf[i] != b'"' {
            i += 1;
            continue;
        }
        let Some(end) = closing_quote(buf, i + 1) else {
            break; // unterminated: not JSON we wrote; leave the rest as is
        };
        let content = unescape(&buf[i..=end]);
        let hits = scan::hits(&content, literals, task);
        if let Cow::Owned(redacted) = scan::apply(&content, &hits) {
            out.extend_from_slice(&buf[copied..i]);
            match serde_json::to_string(&redacted) {
                Ok(quoted) => out.extend_from_slice(quoted.as_bytes()),
                // A String always serializes; keep the JSON valid regardless.
                Err(_) => out.extend_from_slice(b"\"[redacted]\""),
            }
            copied = end + 1;
        }
        i = end + 1;
    }
    if copied == 0 {
        return false;
    }
    out.extend_from_slice(&buf[copied..]);
    *buf = out;
    true
}

/// The fast miss. Anchors and literals are matched on the raw bytes (the JSON
/// escaped forms of literals are in the prefilter too); task patterns only see
/// raw text when nothing is escaped, otherwise the walk decides.
fn may_match(literals: &Literals, task: Option<&TaskPatterns>, buf: &[u8]) -> bool {
    if literals.prefilter.is_match(buf) {
        return true;
    }
    let Some(task) = task else {
        return false;
    };
    match std::str::from_utf8(buf) {
        Ok(text) => text.contains('\\') || task.is_match(text),
        Err(_) => true,
    }
}

/// Index of the quote closing the string that starts before `from`.
fn closing_quote(buf: &[u8], from: usize) -> Option<usize> {
    let mut k = from;
    while k < buf.len() {
        match buf[k] {
            b'\\' => k += 2,
            b'"' => return Some(k),
            _ => k += 1,
        }
    }
    None
}

/// The text of one quoted literal; borrowed when it holds no escape.
fn unescape(literal: &[u8]) -> Cow<'_, str> {
    let inner = &literal[1..literal.len() - 1];
    if !inner.contains(&b'\\')
        && let Ok(text) = std::str::from_utf8(inner)
    {
        return Cow::Borrowed(text);
    }
    match serde_json::from_slice::<String>(literal) {
        Ok(text) => Cow::Owned(text),
        Err(_) => String::from_utf8_lossy(inner),
    }
}
