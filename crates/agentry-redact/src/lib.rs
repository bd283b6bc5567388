//! Redaction before every write.
//!
//! One [`Redactor`] per run replaces secrets in everything agentry writes (the
//! JSONL trace, the store, the event stream, span attributes, logs): built-in
//! detectors for common provider keys and tokens, the values of secret-looking
//! environment variables, task-declared patterns, and values registered at run
//! time (per-tool `redact` fields). Replacement keeps the shape: the anchor stays,
//! the rest becomes a marker (`sk-…[redacted:openai_key]`). Redacting twice
//! changes nothing. Text without any anchor or literal costs one scan and no
//! allocation.
//!
//! JSON escaping hides nothing: a text is searched also with its escapes
//! decoded, level by level (JSON inside a JSON string writes the newline
//! before a secret as `\n`, a quote inside it as `\"`), and each match found
//! there replaces the escaped text it came from. A literal value is also
//! found in any ASCII case and in the cheap encodings a tool may apply to
//! what it reads: base64 (any alignment, either alphabet, lines wrapped or
//! not), hex and percent-encoding, each computed once per value.
//!
//! Building a redactor compiles nothing twice in a process: the built-in
//! detectors are compiled once, and the env values' automata and the task
//! patterns once per distinct set, shared by every redactor built from the
//! same ones. The process environment is read once, by the first redactor
//! built without [`RedactorBuilder::env`]; every later one redacts the values
//! read then.
//!
//! # Layout
//! - `redactor.rs`: [`Redactor`] and [`RedactorBuilder`], the entry points.
//! - `builtin.rs`: the built-in detectors (provider keys, tokens, JWTs,
//!   Authorization values, PEM keys).
//! - `literals.rs`: values redacted wherever they appear (environment secrets,
//!   secret tool fields; [`LiteralKind`]) and the prefilter over them.
//! - `forms.rs`: the forms a literal value is searched in (any case,
//!   base64 at each alignment, hex, percent-encoding), computed once.
//! - `task.rs`: the task's `[redact] patterns`, compiled as one alternation.
//! - `views.rs`: the text with its JSON escapes decoded (level by level) and
//!   its line breaks removed, each mapped back to the original.
//! - `scan.rs`: finding what to replace in one string (and in its views),
//!   and the replacement.
//! - `json.rs`: redaction inside the string literals of serialized JSON.
//! - `stream.rs`: [`StreamHoldback`], streamed deltas (a secret split across
//!   two deltas is still caught).
//! - `writer.rs`: [`RedactingMakeWriter`], the backstop for log lines.
//! - `shared.rs`: what is compiled once per process and shared by every
//!   redactor built from the same values or patterns.
//! - `error.rs`: [`RedactError`], the crate's one error.

mod builtin;
mod error;
mod forms;
mod json;
mod literals;
mod redactor;
mod scan;
mod shared;
mod stream;
mod task;
mod views;
mod writer;

#[cfg(test)]
mod tests;

pub use error::RedactError;
pub use literals::LiteralKind;
pub use redactor::{Redactor, RedactorBuilder};
pub use stream::StreamHoldback;
pub use writer::{RedactingMakeWriter, RedactingWriter};
