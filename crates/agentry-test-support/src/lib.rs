//! Test helpers for agentry, used by every integration test.
//!
//! Tests drive the public API (the `agentry` facade) as an embedding service
//! would; this crate supplies the parts a test needs around it.
//!
//! # Layout
//! - [`script`] has [`ScriptBuilder`], a compact builder for scripted policies.
//! - [`policy`] has [`FnPolicy`] (a policy from a closure, or one that never answers)
//!   and [`Recording`], which logs every context a policy was shown.
//! - [`tools`] has controllable mock tools behind the real `Tool` trait:
//!   [`CountingTool`], [`HangingTool`], [`GateTool`] + [`GateHandle`],
//!   [`PanicTool`], [`SleepTool`], [`BlockingTool`].
//! - [`events`] has [`wait_for_event`], [`collect_until_stopped`], [`run_with_events`].
//! - [`task`] has [`TestTask`] (a temporary working directory and its `RunConfig`),
//!   [`read_trace`], [`runtime_with`].
//!
//! Helpers return `Result`s with descriptive errors rather than panicking, so a
//! test can `?` them and fail with a message saying what was missing.
//!
//! ```
//! use agentry_test_support::{ScriptBuilder, TestTask, runtime_with, CountingTool};
//! use serde_json::json;
//! use std::sync::Arc;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), agentry_test_support::TestError> {
//! let count = CountingTool::new("count");
//! let executions = count.counter();
//! let runtime = runtime_with(vec![Arc::new(count)])?;
//! let task = TestTask::new("count once", &[])?.grant(&["count"]);
//! let policy = ScriptBuilder::new()
//!     .call("c1", "count", json!({"value": 1}))
//!     .finish("counted")
//!     .policy();
//! let outcome = runtime.run(task.config(), policy).await?;
//! assert_eq!(outcome.stop_reason, agentry::StopReason::Done);
//! assert_eq!(executions.get(), 1);
//! # Ok(()) }
//! ```

pub mod events;
pub mod peers;
pub mod policy;
pub mod procs;
pub mod script;
pub mod task;
pub mod tools;

pub use events::{
    COLLECT_TIMEOUT, EventWaitError, collect_until_stopped, collect_until_stopped_within,
    event_name, next_event, run_with_events, tool_results, wait_for_event,
};
pub use policy::{ContextLog, DecisionFuture, FnPolicy, Recording, Seen};
pub use script::{ScriptBuilder, call, raw_call};
pub use task::{NUMBERS_TXT, TestTask, read_trace, runtime_with};
pub use tools::{
    BlockingTool, CompletionLog, Counter, CountingTool, FlakyTool, GateCall, GateError, GateHandle,
    GateTool, HangingTool, PanicTool, SleepTool, WaitTimeout, value_schema,
};

/// The error type test helpers and tests return: anything, with its message.
pub type TestError = Box<dyn std::error::Error + Send + Sync>;
