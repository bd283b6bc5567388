//! The redactor and its builder.

use std::borrow::Cow;
use std::sync::{Arc, PoisonError, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::RedactError;
use crate::json;
use crate::literals::{self, LiteralKind, Literals};
use crate::scan;
use crate::shared;
use crate::task::TaskPatterns;

/// Builds a [`Redactor`]: task patterns and (for tests) the environment.
#[derive(Debug, Default)]
pub struct RedactorBuilder {
    patterns: Vec<String>,
    env: Option<Vec<(String, String)>>,
}

impl RedactorBuilder {
    /// A builder with no task patterns that reads the process environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Task-declared regexes (`[redact] patterns`); match `i` becomes `[redacted:pattern:i]`.
    pub fn patterns<I, S>(mut self, patterns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.patterns = patterns.into_iter().map(Into::into).collect();
        self
    }

    /// Uses these variables instead of the process environment.
    pub fn env<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env = Some(
            vars.into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        );
        self
    }

    /// The redactor; a bad task pattern is [`RedactError::BadPattern`] with
    /// its index. What it compiles (the env values' automata, the task
    /// patterns) is shared with every redactor of the process built from the
    /// same values and patterns, so only the first of them compiles it; the
    /// process environment is read once, by the first build that reads it.
    pub fn build(self) -> Result<Redactor, RedactError> {
        let task = shared::task_patterns(&self.patterns)?;
        let literals = match self.env {
            Some(vars) => shared::literals(&literals::env_entries(vars))?,
            None => shared::literals(shared::process_env())?,
        };
        Ok(Redactor {
            task,
            literals: RwLock::new(literals),
        })
    }
}

/// Replaces secrets in text, JSON and serializable values. Cheap to share (`Arc`).
pub struct Redactor {
    pub(crate) task: Option<Arc<TaskPatterns>>,
    literals: RwLock<Arc<Literals>>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the literal values: they are the secrets.
        f.debug_struct("Redactor")
            .field("literals", &self.snapshot().entries.len())
            .finish_non_exhaustive()
    }
}

impl Redactor {
    /// A builder.
    pub fn builder() -> RedactorBuilder {
        RedactorBuilder::new()
    }

    pub(crate) fn snapshot(&self) -> Arc<Literals> {
        Arc::clone(&self.literals.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces `value` (on token boundaries) from now on, e.g. a tool's
    /// `redact = ["password"]` argument as `LiteralKind::Field("password")`.
    pub fn add_literal(&self, value: &str, kind: LiteralKind) -> Result<(), RedactError> {
        let mut guard = self
            .literals
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entries) = guard.with(value, &kind) {
            *guard = Arc::new(Literals::build(entries)?);
        }
        Ok(())
    }

    /// Whether `text` may hold something to redact (one prefilter scan, no
    /// allocation). A task pattern may match only once escapes are decoded
    /// (its `\b` after a `\n`), so with task patterns an escape says maybe.
    pub(crate) fn may_match(&self, literals: &Literals, text: &str) -> bool {
        literals.prefilter.is_match(text)
            || self
                .task
                .as_deref()
                .is_some_and(|t| text.contains('\\') || t.is_match(text))
    }

    /// `text` with every secret replaced; `Borrowed` when nothing matched.
    pub fn redact_str<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let literals = self.snapshot();
        if !self.may_match(&literals, text) {
            return Cow::Borrowed(text);
        }
        let hits = scan::hits(text, &literals, self.task.as_deref());
        scan::apply(text, &hits)
    }

    /// Redacts inside the JSON string literals of `buf` (keys included), on their
    /// unescaped text; the output stays valid JSON. Returns whether it changed.
    pub fn redact_json(&self, buf: &mut Vec<u8>) -> bool {
        let literals = self.snapshot();
        json::redact(&literals, self.task.as_deref(), buf)
    }

    /// Redacts every string inside `value` by a round trip through JSON.
    /// Returns whether it changed.
    pub fn redact_value<T: Serialize + DeserializeOwned>(
        &self,
        value: &mut T,
    ) -> Result<bool, RedactError> {
        let mut buf = serde_json::to_vec(value).map_err(RedactError::Json)?;
        if !self.redact_json(&mut buf) {
            return Ok(false);
        }
        *value = serde_json::from_slice(&buf).map_err(RedactError::Json)?;
        Ok(true)
    }
}
