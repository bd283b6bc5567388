//! Typed errors of the redactor.

/// What went wrong while building a redactor or redacting a value.
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    /// A task-declared pattern (`[redact] patterns`) is not a valid regex.
    #[error("redact pattern {index} ({pattern:?}) is not a valid regex: {source}")]
    BadPattern {
        /// Position of the pattern in the task's list (0-based).
        index: usize,
        /// The pattern as written.
        pattern: String,
        /// The regex compiler's complaint.
        #[source]
        source: regex::Error,
    },
    /// The task patterns compile one by one but not as one alternation (size limit).
    #[error("redact patterns are too large together: {0}")]
    PatternsTooLarge(#[source] regex::Error),
    /// The literal set (env values and field values) could not be compiled.
    #[error("redact literals could not be compiled: {0}")]
    Literals(#[source] aho_corasick::BuildError),
    /// A value could not be round-tripped through JSON to redact it.
    #[error("value could not be redacted through JSON: {0}")]
    Json(#[source] serde_json::Error),
}
