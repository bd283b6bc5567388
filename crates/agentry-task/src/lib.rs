//! Task directories for agentry (`task.toml`, `script.json`, `workspace/`).
//!
//! A task directory is the CLI's unit of work:
//!
//! ```text
//! TASK_DIR/
//!   task.toml      goal, budget, grants, command tools, acceptance checks, policy,
//!                  progress window
//!   script.json    the scripted policy (optional: `[policy] script` or --policy)
//!   workspace/     initial files, copied into a fresh working directory per run
//! ```
//!
//! Parsing is two-phase: serde (`deny_unknown_fields`) only checks which keys
//! exist, one table at a time so an unknown key is reported with its table; every
//! value is then validated by hand, so an error names the field and says what was
//! expected and what was found (`budget.max_steps: expected a positive integer,
//! found "ten"`). Every error is [`TaskError::Invalid`] naming the file.
//!
//! This crate sits above the runtime: a [`TaskSpec`] builds what the runtime
//! takes ([`TaskSpec::registry`], [`TaskSpec::runtime`], [`TaskSpec::run_config`]);
//! the runtime never names a task file.
//!
//! # Layout
//! In import order: `values` (single values, `FieldError`), `raw` (the tables'
//! keys), [`command`] (`[[tools.command]]`), `accept` (`[[accept]]`), `mcp`
//! (`[[tools.mcp]]`), [`a2a`] (`[[tools.a2a]]`), `observe` (`[redact]`, `[trace]`), `validate`
//! (every table), [`spec`] ([`TaskSpec`]: load, parse, what it builds), `workdir`
//! ([`TaskSpec::prepare_workdir`]), `client` (what a task a client sends may
//! not say: [`TaskSpec::check_client_supplied`]), [`error`] ([`TaskError`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use agentry_runtime::policy::Script;
//! use agentry_task::TaskSpec;
//! let task = TaskSpec::load("examples/sum".as_ref())?;
//! let workdir = task.prepare_workdir(None)?;
//! let script = Script::load(task.script.as_deref().ok_or("no script")?)?;
//! let outcome = task.runtime()?.run(task.run_config(workdir), script.into_policy()).await?;
//! println!("{}", outcome.stop_reason);
//! # Ok(()) }
//! ```

use std::time::Duration;

pub mod a2a;
mod accept;
mod client;
pub mod command;
pub mod error;
mod json;
mod mcp;
mod observe;
#[cfg(test)]
mod props;
mod raw;
mod sandbox;
pub mod spec;
#[cfg(test)]
mod tests;
mod validate;
mod values;
mod workdir;

pub use a2a::{A2aAgentConfig, CARD_READ_TIMEOUT, DEFAULT_A2A_TIMEOUT};
pub use command::CommandToolDecl;
pub use error::TaskError;
pub use json::{JsonTaskError, budget_from_json, task_toml_from_json};
pub use spec::{ChildModelSpec, Compaction, FallbackSpec, TaskSpec};

/// The task file inside a task directory.
pub const TASK_FILE: &str = "task.toml";
/// The script used when `[policy] script` is absent, if it exists.
pub const DEFAULT_SCRIPT: &str = "script.json";
/// The directory of initial files.
pub const WORKSPACE_DIR: &str = "workspace";
/// Grants when `[tools] grant` is absent: read-only built-ins.
pub const DEFAULT_GRANTS: &[&str] = &["fs.read"];
/// The smallest `[policy] result_cap`, in bytes: a result's head must say something.
pub const MIN_RESULT_CAP: usize = 256;
/// The largest `[policy] result_cap`, in bytes (16 MiB).
pub const MAX_RESULT_CAP: usize = 16 * 1024 * 1024;
/// Timeout of a command acceptance check without `timeout`.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest duration a task file may give (deadlines, timeouts, tick
/// periods): 365 days. Longer is a typo, and near `u64::MAX` seconds adding it
/// to a clock overflows.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The largest count a task file may give (steps, tool calls, tokens, ticks,
/// retries, the progress window): 2^53 - 1, the largest integer every JSON
/// reader keeps exactly.
pub const MAX_COUNT: u64 = (1 << 53) - 1;
/// The largest `budget.max_cost`: money is counted in millionths in a `u64`,
/// and a trillion keeps every amount exact.
pub const MAX_COST: f64 = 1e12;
