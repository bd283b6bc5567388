//! agentry's runtime: the actors and the embedding API.
//!
//! The model only proposes; this crate is the host that validates, authorizes,
//! executes, records, budgets and stops. Each run is a conductor plus four actors;
//! their modules and messages are private to this crate (ARCHITECTURE.md maps
//! them), and an embedder sees [`Runtime`], [`RunHandle`] and [`RunActors`]:
//!
//! | actor | module | message enum |
//! | --- | --- | --- |
//! | Policy | `policy.rs` | `PolicyMsg` |
//! | Tool executor | `executor/` | `ExecutorMsg` |
//! | State keeper | `state/` | `StateMsg` |
//! | Budget supervisor | `budget/` | `BudgetMsg` |
//! | Conductor | `conductor/` | `ConductorMsg` |
//!
//! # Layout
//! - [`runtime`]: [`Runtime`] and [`RunHandle`], what an embedder uses.
//! - [`config`]: [`RunConfig`] (a task directory builds one in the `agentry-task` crate).
//! - [`registry`]: tools and compiled schemas. [`grants`]: what a run may call.
//!   `accept`: acceptance checks.
//! - `trace`: the JSONL trace writer.
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

pub(crate) mod accept;
mod ask;
pub(crate) mod budget;
mod clock;
pub(crate) mod conductor;
pub mod config;
pub(crate) mod durable;
pub mod error;
pub(crate) mod events;
pub(crate) mod executor;
pub mod grants;
pub(crate) mod inbox;
pub(crate) mod interrupt;
pub mod policy;
pub(crate) mod redaction;
pub mod registry;
pub mod runtime;
pub mod sandbox;
pub(crate) mod state;
pub mod tempdir;
pub(crate) mod trace;
mod tree_limits;

pub use ask::AskError;
pub use budget::ReserveRefused;
pub use conductor::{RunActors, RunOutcome};
pub use config::{
    ApprovalConfig, ChildShare, Driver, ObserveConfig, ParentReserve, RunConfig, TreeLimits,
};
pub use durable::{Durability, RESUMED_EVENT_GAP};
pub use inbox::DEFAULT_INBOX_CAPACITY;
// Kept at its old path: run ownership lives with the rest of durability.
pub use durable::owner;
pub use error::{ChildRefusal, RuntimeError};
pub use grants::Grants;
pub use policy::{Policy, PolicyContext};
pub use registry::{LiveRegistry, ToolRegistry, WeakLiveRegistry};
pub use runtime::{
    InboxUsage, Interrupted, ResumeOptions, RunHandle, RunTree, Runtime, WakePolicy,
};
