//! Finding what to replace in one string and building the replacement.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

use crate::builtin::DETECTORS;
use crate::forms::FormKind;
use crate::literals::Literals;
use crate::task::TaskPatterns;
use crate::views::{self, View};

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

/// All non-overlapping hits in `text`, ordered by start: found in the text
/// itself and in its views (see `views.rs`), each mapped back to the text.
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
    patterns(text, task, &mut found);
    literal_hits(text, literals, &mut found);
    // The views cost a copy each: only for a text the prefilter (whose
    // needles survive escaping and wrapping) or a task pattern may match.
    let wrapped = || literals.encoded && text.contains(['\n', '\r']);
    let worth = || task.is_some() || literals.prefilter.is_match(text);
    if (text.contains('\\') || wrapped()) && worth() {
        for view in views::views(text, literals.encoded) {
            let first = found.len();
            // Lines are joined for the encodings; the detectors and task
            // patterns keep their own idea of lines.
            if !view.unwrapped {
                patterns(&view.text, task, &mut found);
            }
            literal_hits(&view.text, literals, &mut found);
            for hit in &mut found[first..] {
                hit.map_back(&view);
            }
        }
    }
    resolve(found)
}

impl Hit {
    /// From a view's offsets to its original text's.
    fn map_back(&mut self, view: &View) {
        self.start = view.source(self.start);
        self.end = view.source(self.end);
        if let Replacement::Shaped { anchor_end, .. } = &mut self.replacement {
            *anchor_end = view.source(*anchor_end);
        }
    }
}

/// The built-in detectors' and the task patterns' hits in `text`.
fn patterns(text: &str, task: Option<&TaskPatterns>, found: &mut Vec<Hit>) {
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
}

fn literal_hits(text: &str, literals: &Literals, found: &mut Vec<Hit>) {
    let Some(exact) = literals.exact.as_ref() else {
        return;
    };
    let bytes = text.as_bytes();
    // Overlapping search: a form rejected for its neighbours must not hide a
    // shorter one at the same place.
    for m in exact.find_overlapping_iter(text) {
        let Some(form) = literals.forms.get(m.pattern().as_usize()) else {
            continue;
        };
        let boundary = |b: Option<u8>| b.is_none_or(|b| !b.is_ascii_alphanumeric());
        let placed = match form.kind {
            FormKind::Encoded => true,
            FormKind::Text => {
                (boundary(m.start().checked_sub(1).map(|i| bytes[i]))
                    || after_percent_escape(bytes, m.start()))
                    && boundary(bytes.get(m.end()).copied())
            }
        };
        if placed {
            found.push(Hit {
                start: m.start(),
                end: m.end(),
                priority: 200,
                replacement: Replacement::Marker(literals.entries[form.entry].marker.clone()),
            });
        }
    }
}

/// Whether `bytes[..at]` ends with a percent escape (`NAME%3Dvalue`): the
/// byte it stands for, not its last hex digit, is the neighbour.
fn after_percent_escape(bytes: &[u8], at: usize) -> bool {
    at >= 3
        && bytes[at - 3] == b'%'
        && bytes[at - 2].is_ascii_hexdigit()
        && bytes[at - 1].is_ascii_hexdigit()
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
