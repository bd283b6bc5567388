//! agentry's runtime: the actors and the embedding API.
//!
//! The model only proposes; this crate is the host that validates, authorizes,
//! executes, records, budgets and stops. Each run is a conductor plus four actors:
//!
//! | actor | module | message enum |
//! | --- | --- | --- |
//! | Policy | [`policy`] | [`PolicyMsg`] |
//! | Tool executor | [`executor`] | [`ExecutorMsg`] |
//! | State keeper | [`state`] | [`StateMsg`] |
//! | Budget supervisor | [`budget`] | [`BudgetMsg`] |
//! | Conductor | [`conductor`] | [`ConductorMsg`] |
//!
//! # Layout
//! - [`runtime`]: [`Runtime`] and [`RunHandle`], what an embedder uses.
//! - [`config`]: [`RunConfig`] (a task directory builds one in the `agentry-task` crate).
//! - [`registry`]: tools and compiled schemas. [`grants`]: what a run may call.
//!   [`accept`]: acceptance checks.
//! - [`trace`]: the JSONL trace writer.
//! - [`policy`]: the policy actor; the seam it hosts ([`Policy`], [`PolicyContext`])
//!   and the scripted policy live in `agentry-policy` and are re-exported there.
//!
//! ```no_run
//! # async fn demo() -> Result<(), agentry_runtime::RuntimeError> {
//! use agentry_runtime::{Runtime, RunConfig, policy::Script};
//! let runtime = Runtime::with_builtins()?;
//! let script = Script::parse(r#"{"turns":[{"final":"hello"}]}"#)?;
//! let outcome = runtime.run(RunConfig::new("say hello", "/tmp"), script.into_policy()).await?;
//! println!("{}", outcome.stop_reason);
//! # Ok(()) }
//! ```

pub mod accept;
mod ask;
pub mod budget;
mod clock;
pub mod conductor;
pub mod config;
pub mod durable;
pub mod error;
pub mod events;
pub mod executor;
pub mod grants;
pub mod policy;
pub mod registry;
pub mod runtime;
pub mod state;
pub mod tempdir;
pub mod trace;

pub use budget::BudgetMsg;
pub use conductor::{ConductorMsg, RunActors, RunOutcome};
pub use config::{ApprovalConfig, Driver, RunConfig, TreeLimits};
pub use durable::Durability;
// Kept at its old path: run ownership lives with the rest of durability.
pub use durable::owner;
pub use error::{ChildRefusal, RuntimeError};
pub use executor::ExecutorMsg;
pub use grants::Grants;
pub use policy::{Policy, PolicyContext, PolicyMsg};
pub use registry::ToolRegistry;
pub use runtime::{RunHandle, Runtime};
pub use state::StateMsg;
