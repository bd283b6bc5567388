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
//!
//! # Layout
//! - [`stats`]: the figures of a set of runs (`stats/figures.rs`), what one
//!   finished run contributes (`stats/facts.rs`), and where runs are read
//!   from: a store (`stats/store.rs`) or JSONL traces (`stats/trace.rs`).
//! - [`tracefile`]: a trace file as typed lines ([`tracefile::read_trace`]),
//!   shared by `agentry stats`, `agentry view` and `agentry replay`.
//!
//! ```no_run
//! use agentry_insight::stats::{self, GroupBy, StatsOptions};
//! # fn demo(store: &dyn agentry_store::Store) -> Result<(), stats::StatsError> {
//! let options = StatsOptions::new(GroupBy::Task).since(std::time::Duration::from_secs(24 * 3600));
//! let report = stats::from_store(store, &options)?;
//! for group in &report.groups {
//!     let done = group.by_stop_reason.get("done").map_or(0, |f| f.runs);
//!     println!("{}: {} runs, {done} done, p95 steps {}", group.key, group.all.runs, group.all.steps.p95);
//! }
//! let traced = stats::from_traces(&["run.jsonl"], &options)?;
//! println!("{}", serde_json::to_string(&traced).unwrap_or_default());
//! # Ok(()) }
//! ```

pub mod stats;
pub mod tracefile;
