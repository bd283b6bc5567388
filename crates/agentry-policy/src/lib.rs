//! The policy seam of agentry: the one place a model (or a script) decides anything.
//!
//! A [`Policy`] turns what it is shown ([`PolicyContext`]: the goal, the tools,
//! the session, the budget) into a [`PolicyOutput`](agentry_protocol::PolicyOutput).
//! This crate depends on `agentry-protocol` only, so a model adapter
//! (`agentry-models`) builds without the runtime, its actors or its store; the
//! runtime hosts a policy in its policy actor and implements [`DeltaSink`] over
//! its event stream.
//!
//! # Layout
//! - [`policy`]: [`Policy`], [`PolicyContext`], [`DeltaSink`], [`Redact`], [`ChildPolicyFactory`].
//! - [`script`]: the built-in scripted policy ([`Script`], [`ScriptedPolicy`]),
//!   the default of a task directory and of every test.
//! - [`replay`]: [`ReplayPolicy`], a recorded run's decisions (`agentry replay`).
//! - [`error`]: the crate's one error, [`ScriptError`].
//!
//! ```
//! use std::pin::pin;
//! use std::task::{Context, Poll, Waker};
//! use agentry_policy::{Policy, PolicyContext, Script};
//! use agentry_protocol::{BudgetSnapshot, Decision};
//!
//! let mut policy = Script::parse(r#"{"turns":[{"final":"hello"}]}"#)?.into_policy();
//! let budget = BudgetSnapshot::default();
//! let ctx = PolicyContext {
//!     run_id: "run-1", step: 1, goal: "say hello", tools: &[], session: &[],
//!     budget: &budget, deltas: None, traceparent: None, content: None,
//! };
//! // A script answers at once: one poll decides (a run awaits this in its policy actor).
//! let mut decide = pin!(policy.decide(ctx));
//! let Poll::Ready(out) = decide.as_mut().poll(&mut Context::from_waker(Waker::noop())) else {
//!     unreachable!("a script never waits");
//! };
//! assert_eq!(out.decision, Decision::Final { answer: "hello".into() });
//! # Ok::<(), agentry_policy::ScriptError>(())
//! ```

pub mod error;
pub mod policy;
pub mod replay;
pub mod script;

pub use error::ScriptError;
pub use policy::{ChildPolicyFactory, DeltaSink, Policy, PolicyContext, Redact};
pub use replay::ReplayPolicy;
pub use script::{Script, ScriptEnd, ScriptTurn, ScriptedPolicy};
