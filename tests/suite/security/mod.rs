//! Attacks from the untrusted side — the model, tool output, workspace contents,
//! web pages reaching localhost — each reproduced against the real runtime or
//! the real service over HTTP. Every test here failed before its defence landed.

mod redaction;
mod redaction_escapes;
mod runtime;
mod service;
mod workspace;
