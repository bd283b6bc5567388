//! Redaction of streamed text deltas: a secret split across two deltas is
//! still replaced, because the tail that could start one is held back.

use crate::literals::Literals;
use crate::redactor::Redactor;
use crate::scan;

/// Beyond this much held text, everything is emitted (redacted) anyway.
const MAX_PENDING: usize = 4096;

/// Holds back the end of a stream that may be the start of a secret.
///
/// `push` each delta and write what it returns; `flush` at the end of the stream.
/// Concatenated, the output equals redacting the whole text at once for secrets
/// that do not span a cut: cuts are only made after a boundary character
/// (whitespace or one of ``"'`,;()[]{}<>``), never inside a match, never after a
/// lone `Bearer`/`Basic` or an unclosed `-----BEGIN`, and never inside a
/// registered literal's prefix.
#[derive(Debug, Default)]
pub struct StreamHoldback {
    pending: String,
}

impl StreamHoldback {
    /// Adds `delta`; returns the redacted text that is now safe to write, if any.
    pub fn push(&mut self, redactor: &Redactor, delta: &str) -> Option<String> {
        self.pending.push_str(delta);
        let literals = redactor.snapshot();
        let cut = if self.pending.len() > MAX_PENDING {
            self.pending.len()
        } else {
            safe_cut(redactor, &literals, &self.pending)
        };
        if cut == 0 {
            return None;
        }
        let rest = self.pending.split_off(cut);
        let head = std::mem::replace(&mut self.pending, rest);
        Some(redactor.redact_str(&head).into_owned())
    }

    /// Ends the stream: the redacted remainder, if any.
    pub fn flush(&mut self, redactor: &Redactor) -> Option<String> {
        if self.pending.is_empty() {
            return None;
        }
        let head = std::mem::take(&mut self.pending);
        Some(redactor.redact_str(&head).into_owned())
    }
}

impl Redactor {
    /// A holdback for one stream of text deltas.
    pub fn stream(&self) -> StreamHoldback {
        StreamHoldback::default()
    }
}

fn is_boundary(c: char) -> bool {
    c.is_whitespace() || "\"'`,;()[]{}<>".contains(c)
}

/// The largest prefix of `pending` that can be redacted on its own.
fn safe_cut(redactor: &Redactor, literals: &Literals, pending: &str) -> usize {
    let mut cut = pending
        .char_indices()
        .rev()
        .find(|(_, c)| is_boundary(*c))
        .map_or(0, |(i, c)| i + c.len_utf8());
    cut = cut.min(auth_word_start(&pending[..cut]));
    if let Some(begin) = pending[..cut].rfind("-----BEGIN") {
        let tail = &pending[begin..];
        let closed = tail
            .find("-----END")
            .is_some_and(|e| tail[e..].contains("KEY-----"));
        if !closed {
            cut = begin;
        }
    }
    for form in &literals.forms {
        cut = cut.min(literal_prefix_start(pending, &form.text));
    }
    if cut > 0 && redactor.may_match(literals, pending) {
        // Never cut inside a match; moving the cut back can only shrink the head.
        for hit in scan::hits(pending, literals, redactor.task.as_deref())
            .iter()
            .rev()
        {
            if hit.start < cut && cut < hit.end {
                cut = hit.start;
            }
        }
    }
    cut
}

/// Where a trailing `Bearer `/`Basic ` (whose token may come next) starts.
fn auth_word_start(head: &str) -> usize {
    let trimmed = head.trim_end();
    if trimmed.len() == head.len() {
        return head.len();
    }
    let lower = trimmed.to_ascii_lowercase();
    for word in ["bearer", "basic"] {
        if lower.ends_with(word) {
            return trimmed.len() - word.len();
        }
    }
    head.len()
}

/// Start of the longest proper prefix of `value` that `pending` ends with
/// (ASCII case ignored, as the matcher does).
fn literal_prefix_start(pending: &str, value: &str) -> usize {
    let (pending_bytes, value_bytes) = (pending.as_bytes(), value.as_bytes());
    let longest = value.len().saturating_sub(1).min(pending.len());
    for k in (1..=longest).rev() {
        let tail = &pending_bytes[pending.len() - k..];
        if value.is_char_boundary(k)
            && pending.is_char_boundary(pending.len() - k)
            && tail.eq_ignore_ascii_case(&value_bytes[..k])
        {
            return pending.len() - k;
        }
    }
    pending.len()
}
