//! Values redacted wherever they appear: env secrets and per-tool field values,
//! plus the prefilter over them and the built-in anchors.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder};

use crate::builtin::ANCHORS;
use crate::error::RedactError;
use crate::forms::{self, Form, FormKind};

/// Where a literal value came from; it names the marker that replaces it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LiteralKind {
    /// The value of an environment variable (`[redacted:env:NAME]`).
    Env(String),
    /// A per-tool field declared `redact = [..]` (`[redacted:field:NAME]`).
    Field(String),
}

impl LiteralKind {
    pub(crate) fn marker(&self) -> String {
        match self {
            LiteralKind::Env(name) => format!("[redacted:env:{name}]"),
            LiteralKind::Field(name) => format!("[redacted:field:{name}]"),
        }
    }
}

/// One immutable snapshot; `add_literal` swaps in a new one.
pub(crate) struct Literals {
    /// Values and their markers.
    pub(crate) entries: Vec<Entry>,
    /// Every form of every value (see `forms.rs`), in the order of `exact`'s
    /// pattern ids.
    pub(crate) forms: Vec<Form>,
    /// Matcher over the forms, ASCII case ignored (standard semantics,
    /// searched overlapping so a form rejected for its neighbours cannot hide
    /// another), `None` when empty.
    pub(crate) exact: Option<AhoCorasick>,
    /// One scan for "could anything match": anchors, and what every form
    /// keeps however JSON escapes or lines wrap it.
    pub(crate) prefilter: AhoCorasick,
    /// Some value has an encoded form (worth a view without line breaks).
    pub(crate) encoded: bool,
}

#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) value: String,
    pub(crate) marker: String,
}

impl Literals {
    /// Computes every form of every value and compiles the matchers: done
    /// once per distinct set (see `shared.rs`), never per write.
    pub(crate) fn build(entries: Vec<Entry>) -> Result<Self, RedactError> {
        let forms: Vec<Form> = entries
            .iter()
            .enumerate()
            .flat_map(|(entry, e)| forms::forms(&e.value, entry))
            .collect();
        let exact = if forms.is_empty() {
            None
        } else {
            Some(
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .build(forms.iter().map(|f| f.text.as_str()))
                    .map_err(RedactError::Literals)?,
            )
        };
        let mut needles: Vec<String> = ANCHORS.iter().map(|a| (*a).to_owned()).collect();
        for form in &forms {
            for needle in forms::needles(&form.text, form.kind) {
                if !needles.contains(&needle) {
                    needles.push(needle);
                }
            }
        }
        let prefilter = AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .build(&needles)
            .map_err(RedactError::Literals)?;
        let encoded = forms.iter().any(|f| f.kind == FormKind::Encoded);
        Ok(Literals {
            entries,
            forms,
            exact,
            prefilter,
            encoded,
        })
    }

    pub(crate) fn with(&self, value: &str, kind: &LiteralKind) -> Option<Vec<Entry>> {
        if value.is_empty() || self.entries.iter().any(|e| e.value == value) {
            return None;
        }
        let mut entries: Vec<Entry> = self
            .entries
            .iter()
            .map(|e| Entry {
                value: e.value.clone(),
                marker: e.marker.clone(),
            })
            .collect();
        entries.push(Entry {
            value: value.to_owned(),
            marker: kind.marker(),
        });
        Some(entries)
    }
}

/// Env values worth redacting: names containing KEY, TOKEN, SECRET or PASSWORD
/// (any case), values of at least 8 bytes (shorter ones match too much text).
pub(crate) fn env_entries<I: IntoIterator<Item = (String, String)>>(vars: I) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::new();
    for (name, value) in vars {
        let upper = name.to_ascii_uppercase();
        let secret = ["KEY", "TOKEN", "SECRET", "PASSWORD"]
            .iter()
            .any(|w| upper.contains(w));
        if secret && value.len() >= 8 && !entries.iter().any(|e| e.value == value) {
            entries.push(Entry {
                value,
                marker: LiteralKind::Env(name).marker(),
            });
        }
    }
    entries
}
