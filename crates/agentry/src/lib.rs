//! agentry: an event-driven actor runtime for LLM agents.
//!
//! The model only proposes; agentry validates, authorizes, executes, observes,
//! budgets, records and stops. This crate re-exports what a service embedding
//! agentry needs:
//!
//! - [`Runtime`], [`RunHandle`], [`RunConfig`], [`RunOutcome`]: start runs and get outcomes.
//! - [`Tool`], [`ToolContext`], [`ToolOutput`], [`ToolContract`]: write your own tools.
//! - [`Policy`], [`Script`]: plug in a model adapter, or the built-in scripted policy.
//! - [`protocol`]: every plain data type (envelopes, budgets, stop reasons, trace records).
//! - [`policy`]: the policy seam ([`DeltaSink`], [`ChildPolicyFactory`]) and the scripted policy.
//! - [`insight`]: statistics over recorded runs (a store or traces), split by stop reason.
//!
//! # Layout
//! One file of re-exports; each module is a crate of the workspace:
//! - [`runtime`] (`agentry-runtime`): the actors behind [`Runtime`] and [`RunHandle`].
//! - [`protocol`] (`agentry-protocol`): plain data, serde only.
//! - [`policy`] (`agentry-policy`): the policy seam and the scripted policy.
//!   Model adapters are the `agentry-models` crate, a dependency of its own.
//! - [`tools`] (`agentry-tools`): the [`Tool`] trait and the built-in tools.
//! - [`store`] (`agentry-store`): the [`Store`] trait, and `SqliteStore`.
//! - [`insight`] (`agentry-insight`): statistics over stores and traces.
//! - [`sandbox`] (`agentry-sandbox`): the kernel sandbox around every process
//!   a model can drive (`RunConfig::sandbox`, `[sandbox]` in task.toml).
//! - `task` and `mcp` (`agentry-task`, `agentry-mcp`; feature `task`): task
//!   directories and MCP servers' tools.
//! - `metrics` (`agentry-metrics`; feature `metrics`): Prometheus metrics.
//!
//! # Features
//! - `sqlite` (default): `SqliteStore`, the embedded durable store. Without it,
//!   [`Store`] is there to implement; no SQLite is compiled.
//! - `postgres`: `PostgresStore`, a store in a PostgreSQL database that the
//!   nodes of a cluster share.
//! - `task` (default): task directories, `TaskSpec` and the `task` module
//!   (`task.toml`, command tools; brings toml and humantime) and the `mcp`
//!   module (MCP servers' tools; brings rmcp).
//! - `metrics`: the `metrics` module, Prometheus metrics of runs, model
//!   requests and tool calls (a `tracing` layer; brings prometheus-client).
//!
//! ```no_run
//! use agentry::{Runtime, RunConfig, Script};
//! # async fn demo() -> Result<(), agentry::RuntimeError> {
//! let runtime = Runtime::with_builtins()?;
//! let script = Script::parse(r#"{"turns":[{"final":"hi"}]}"#)?;
//! let outcome = runtime.run(RunConfig::new("greet", "."), script.into_policy()).await?;
//! assert_eq!(outcome.stop_reason, agentry::StopReason::Done);
//! # Ok(()) }
//! ```

pub use agentry_policy::{
    ChildPolicyFactory, DeltaSink, Policy, PolicyContext, Script, ScriptError, ScriptedPolicy,
};
pub use agentry_protocol as protocol;
pub use agentry_protocol::{
    AcceptCheck, BudgetLimits, ChildRequest, Decision, Effect, ErrorCode, Idempotency,
    PolicyOutput, ResultEnvelope, RunStatus, Settlement, StopReason, ToolCall, ToolContract,
    ToolError,
};
pub use agentry_runtime::{
    ApprovalConfig, DEFAULT_INBOX_CAPACITY, Driver, Durability, Grants, ObserveConfig, RunActors,
    RunConfig, RunHandle, RunOutcome, RunTree, Runtime, RuntimeError, ToolRegistry,
};
#[cfg(feature = "task")]
pub use agentry_task::{TaskError, TaskSpec};
pub use agentry_tools::{Tool, ToolContext, ToolOutput};
pub use async_trait::async_trait;

#[cfg(feature = "postgres")]
pub use agentry_store::PostgresStore;
#[cfg(feature = "sqlite")]
pub use agentry_store::SqliteStore;
pub use agentry_store::Store;

/// Insight into recorded runs: `insight::stats` (figures per task, model or
/// tool, split by stop reason) over any [`Store`] or JSONL trace files.
pub use agentry_insight as insight;
/// MCP servers' tools (`[[tools.mcp]]` in a task, or started in code with
/// `mcp::McpServer::start` and registered like any tool).
#[cfg(feature = "task")]
pub use agentry_mcp as mcp;
/// Prometheus metrics: `metrics::Metrics::new()`, its `layer()` in your
/// `tracing` subscriber, then `encode()` for `GET /metrics`.
#[cfg(feature = "metrics")]
pub use agentry_metrics as metrics;
/// The policy seam and the scripted policy.
pub use agentry_policy as policy;
/// The runtime crate: `Runtime`, `RunHandle`, `RunConfig`, the registry and
/// grants. Its actors and their message enums are private; `RunActors` gives
/// their cells, to watch or to stop, never to send to.
pub use agentry_runtime as runtime;
/// The kernel sandbox: `SandboxSpec` (what `RunConfig::sandbox` asks),
/// `probe()` (what this kernel can enforce).
pub use agentry_sandbox as sandbox;
/// The store crate: the `Store` trait, its records, the SQLite store (feature `sqlite`).
pub use agentry_store as store;
/// Task directories: `task.toml`, command tools, the workspace copy.
#[cfg(feature = "task")]
pub use agentry_task as task;
/// The built-in tools crate.
pub use agentry_tools as tools;
