//! Insight into recorded runs: what a store or a set of JSONL traces says
//! about how runs went.
//!
//! [`stats`] computes, per task (or per model, or per tool), the figures the
//! design asks for — runs, success rate, steps, tool calls and tool errors by
//! tool and error code, tokens and cost per run, wall time, retries — each
//! also split by stop reason, because "the agent failed" means nothing until
//! you know whether it hit its budget, looped or was denied.
//!
//! Everything here reads what the runtime already wrote (and redacted): the
//! store through the [`agentry_store::Store`] trait, traces as
//! [`agentry_protocol::trace::TraceLine`]s. Nothing is written.

pub mod stats;
