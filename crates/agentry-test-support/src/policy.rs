//! Policies for tests: a policy from a closure, and a recorder of what a policy saw.
//!
//! A policy that panics kills its actor and ends the run `unrecoverable_error`, so
//! tests should not assert *inside* a policy: record what it saw with
//! [`Recording`] and assert on the [`ContextLog`] after the run.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use agentry::protocol::budget::BudgetSnapshot;
use agentry::protocol::state::SessionEntry;
use agentry::protocol::tool::ToolSpec;
use agentry::{Decision, Policy, PolicyContext, PolicyOutput, async_trait};

/// A boxed future of a decision, as [`FnPolicy::from_async`] closures return.
pub type DecisionFuture = Pin<Box<dyn Future<Output = Decision> + Send + 'static>>;

type OutputFuture = Pin<Box<dyn Future<Output = PolicyOutput> + Send + 'static>>;

type DecideFn = Box<dyn FnMut(PolicyContext<'_>) -> OutputFuture + Send + 'static>;

/// A [`Policy`] made from a closure over the [`PolicyContext`].
///
/// ```
/// use agentry::{Decision, ToolCall};
/// use agentry_test_support::FnPolicy;
/// use serde_json::json;
/// // Reads with a fresh call id at every step: a model looping without repeating ids.
/// let policy = FnPolicy::new(|ctx| Decision::ToolCalls {
///     calls: vec![ToolCall::new(format!("c{}", ctx.step), "fs.read", json!({"path": "a"}))],
/// });
/// # let _ = policy;
/// ```
pub struct FnPolicy {
    name: String,
    decide: DecideFn,
}

impl std::fmt::Debug for FnPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnPolicy")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl FnPolicy {
    /// A policy that decides synchronously.
    pub fn new<F>(mut decide: F) -> Self
    where
        F: FnMut(PolicyContext<'_>) -> Decision + Send + 'static,
    {
        FnPolicy::from_async(move |ctx| {
            let decision = decide(ctx);
            Box::pin(async move { decision })
        })
    }

    /// A policy that returns a whole [`PolicyOutput`], e.g. to report token usage
    /// or cost for a turn.
    pub fn from_output<F>(mut decide: F) -> Self
    where
        F: FnMut(PolicyContext<'_>) -> PolicyOutput + Send + 'static,
    {
        FnPolicy {
            name: "fn".to_string(),
            decide: Box::new(move |ctx| {
                let out = decide(ctx);
                Box::pin(async move { out })
            }),
        }
    }

    /// A policy whose decision is a future (a slow or hung model). The closure reads
    /// what it needs from the context, which it cannot keep, and returns a `'static`
    /// future.
    pub fn from_async<F>(mut decide: F) -> Self
    where
        F: FnMut(PolicyContext<'_>) -> DecisionFuture + Send + 'static,
    {
        FnPolicy {
            name: "fn".to_string(),
            decide: Box::new(move |ctx| {
                let decision = decide(ctx);
                Box::pin(async move { PolicyOutput::new(decision.await, "") })
            }),
        }
    }

    /// A policy whose model never answers: every decision awaits forever.
    pub fn pending() -> Self {
        FnPolicy::from_async(|_| Box::pin(std::future::pending()))
    }

    /// Sets the name reported in the trace (default `fn`).
    pub fn named(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }
}

#[async_trait]
impl Policy for FnPolicy {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        let mut out = (self.decide)(ctx).await;
        if out.model.is_empty() {
            out.model = self.name.clone();
        }
        out
    }
}

/// What a policy was shown at one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The step being decided.
    pub step: u64,
    /// The whole session as the policy saw it, oldest first.
    pub session: Vec<SessionEntry>,
    /// The tools the policy was shown.
    pub tools: Vec<ToolSpec>,
    /// The budget at the start of the step.
    pub budget: BudgetSnapshot,
}

/// A shared log of [`Seen`] contexts, one per decision. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ContextLog {
    entries: Arc<Mutex<Vec<Seen>>>,
}

impl ContextLog {
    fn lock(&self) -> MutexGuard<'_, Vec<Seen>> {
        // A poisoned lock only means another test thread panicked while holding it;
        // the log itself is still consistent (pushes are atomic under the lock).
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every context seen so far, in decision order.
    pub fn all(&self) -> Vec<Seen> {
        self.lock().clone()
    }

    /// The context of step `step`, if the policy was asked to decide it.
    pub fn step(&self, step: u64) -> Option<Seen> {
        self.lock().iter().find(|s| s.step == step).cloned()
    }

    /// How many decisions were asked for.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when no decision was asked for.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Wraps a policy and records every context it is shown into a [`ContextLog`].
#[derive(Debug)]
pub struct Recording<P> {
    inner: P,
    log: ContextLog,
}

impl<P: Policy> Recording<P> {
    /// Wraps `inner`; returns the policy and its log.
    pub fn new(inner: P) -> (Self, ContextLog) {
        let log = ContextLog::default();
        (
            Recording {
                inner,
                log: log.clone(),
            },
            log,
        )
    }
}

#[async_trait]
impl<P: Policy> Policy for Recording<P> {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        self.log.lock().push(Seen {
            step: ctx.step,
            session: ctx.session.to_vec(),
            tools: ctx.tools.to_vec(),
            budget: *ctx.budget,
        });
        self.inner.decide(ctx).await
    }
}
