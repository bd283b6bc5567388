//! Finding what to replace in one string and building the replacement.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

use crate::builtin::DETECTORS;
use crate::literals::Literals;
use crate::task::TaskPatterns;

/// Markers already in the text are kept as they are, so redacting twice
/// changes nothing even when a literal or task pattern would match inside one.
static MARKER: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\[redacted:[^\[\]\s]{1,120}\]").ok());

/// One region to replace (or, for an existing marker, to keep).
#[derive(Debug)]
pub(crate) struct Hit {
    pub(crate) start: usize,
    pub(crate) end: usize,
    /// Lower wins on equal starts.
    priority: usize,
    replacement: Replacement,
}

#[derive(Debug)]
enum Replacement {
    Keep,
    /// A built-in: keep `text[start..anchor_end]`, then `…[redacted:kind]`.
    Shaped {
        anchor_end: usize,
        kind: &'static str,
    },
    Marker(String),
}

/// All non-overlapping hits in `text`, ordered by start.
pub(crate) fn hits(text: &str, literals: &Literals, task: Option<&TaskPatterns>) -> Vec<Hit> {
    let mut found = Vec::new();
    if let Some(marker) = MARKER.as_ref() {
        found.extend(marker.find_iter(text).map(|m| Hit {
            start: m.start(),
            end: m.end(),
            priority: 0,
            replacement: Replacement::Keep,
        }));
    }
    for (i, det) in DETECTORS.iter().enumerate() {
        for caps in det.regex.captures_iter(text) {
            let (Some(whole), Some(anchor)) = (caps.get(0), caps.iter().skip(1).flatten().next())
            else {
                continue;
            };
            found.push(Hit {
                start: whole.start(),
                end: whole.end(),
                priority: 1 + i,
                replacement: Replacement::Shaped {
                    anchor_end: anchor.end(),
                    kind: det.kind,
                },
            });
        }
    }
    if let Some(task) = task {
        found.extend(task.find(text).into_iter().map(|(start, end, index)| Hit {
            start,
            end,
            priority: 100,
            replacement: Replacement::Marker(format!("[redacted:pattern:{index}]")),
        }));
    }
    literal_hits(text, literals, &mut found);
    resolve(found)
}

fn literal_hits(text: &str, literals: &Literals, found: &mut Vec<Hit>) {
    let Some(exact) = literals.exact.as_ref() else {
        return;
    };
    let bytes = text.as_bytes();
    // Overlapping search: a value rejected for its neighbours must not hide a
    // shorter value at the same place.
    for m in exact.find_overlapping_iter(text) {
        let before = m.start().checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(m.end()).copied();
        let boundary = |b: Option<u8>| b.is_none_or(|b| !b.is_ascii_alphanumeric());
        if boundary(before) && boundary(after) {
            found.push(Hit {
                start: m.start(),
                end: m.end(),
                priority: 200,
                replacement: Replacement::Marker(
                    literals.entries[m.pattern().as_usize()].marker.clone(),
                ),
            });
        }
    }
}

/// Sorts by (start, priority, longest) and merges overlaps: a hit starting inside
/// an accepted one extends it, so no tail of a secret escapes.
fn resolve(mut found: Vec<Hit>) -> Vec<Hit> {
    found.sort_by(|a, b| {
        (a.start, a.priority, std::cmp::Reverse(a.end)).cmp(&(
            b.start,
            b.priority,
            std::cmp::Reverse(b.end),
        ))
    });
    let mut out: Vec<Hit> = Vec::with_capacity(found.len());
    for hit in found {
        match out.last_mut() {
            Some(last) if hit.start < last.end => {
                let keeps = matches!(last.replacement, Replacement::Keep);
                if hit.end > last.end && !keeps {
                    last.end = hit.end;
                }
            }
            _ => out.push(hit),
        }
    }
    out
}

/// Applies `hits` (from [`hits`]); `Borrowed` when nothing is replaced.
pub(crate) fn apply<'a>(text: &'a str, hits: &[Hit]) -> Cow<'a, str> {
    if hits
        .iter()
        .all(|h| matches!(h.replacement, Replacement::Keep))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    for hit in hits {
        out.push_str(&text[pos..hit.start]);
        match &hit.replacement {
            Replacement::Keep => out.push_str(&text[hit.start..hit.end]),
            Replacement::Shaped { anchor_end, kind } => {
                out.push_str(&text[hit.start..*anchor_end]);
                out.push('…');
                out.push_str("[redacted:");
                out.push_str(kind);
                out.push(']');
            }
            Replacement::Marker(marker) => out.push_str(marker),
        }
        pos = hit.end;
    }
    out.push_str(&text[pos..]);
    Cow::Owned(out)
}
