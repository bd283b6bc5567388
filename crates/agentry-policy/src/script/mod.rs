//! The scripted policy: the built-in default, no network needed.
//!
//! `script.json`:
//! `{"turns": [ {"tool_calls": [{"id": "...", "name": "...", "arguments": {...}}]} | {"final": "text"} ], "then": "repeat_last" | "stop"}`.
//! `arguments` may be a raw string, to simulate a model emitting broken JSON.
//!
//! Files, in import order: `format` (the parsed script as data), `parse` (JSON →
//! [`Script`], [`Script::load`]), `scripted` ([`ScriptedPolicy`], which plays it).

mod format;
mod parse;
#[cfg(test)]
mod props;
mod scripted;
#[cfg(test)]
mod tests;

pub use format::{Script, ScriptEnd, ScriptTurn};
pub use scripted::ScriptedPolicy;
