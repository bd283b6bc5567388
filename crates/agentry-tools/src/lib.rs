//! The [`Tool`] trait and agentry's built-in tools.
//!
//! A tool is an *action interface*: it is registered with a full
//! [`ToolContract`](agentry_protocol::tool::ToolContract), and the executor validates,
//! authorizes and times every call before [`Tool::call`] runs. A tool only does
//! the work and reports a typed [`ToolError`](agentry_protocol::envelope::ToolError)
//! when it cannot.
//!
//! # Layout
//! - `tool.rs`: [`Tool`], [`ToolContext`], [`ToolOutput`] (the interface), and
//!   [`schema_for`], [`parse_args`].
//! - [`fs`]: `fs.read`, `fs.write`, `fs.list`, confined to the run's working directory.
//! - [`finish`][]: `task.finish`.
//! - [`proc`]: `proc.run` and [`proc::CommandTool`].
//! - [`agents`]: `agent.spawn`, `agent.wait`, `agent.cancel`.
//! - [`results`]: results over a run's cap saved whole, and `result.read`.
//! - `builtins.rs`: [`builtins`], all built-ins, ready to register.
//!
//! ```
//! use agentry_tools::{builtins, Tool};
//! let names: Vec<String> = builtins().iter().map(|t| t.contract().name).collect();
//! assert!(names.contains(&"fs.read".to_string()));
//! ```

pub mod agents;
mod artifacts;
mod builtins;
pub mod finish;
pub mod fs;
pub mod proc;
pub mod results;
mod tool;
mod vars;

pub use builtins::builtins;
pub use finish::{FINISH_TOOL, FinishTool};
pub use results::{RESULT_READ_TOOL, ResultReadTool, save_artifact, save_result};
pub use tool::{
    Deadlines, HumanAnswer, HumanDesk, ProcessLog, ProgressSink, RemoteLog, RunScope, Tool,
    ToolContext, ToolOutput, ToolProgress, parse_args, schema_for,
};
pub use vars::expand_vars;
