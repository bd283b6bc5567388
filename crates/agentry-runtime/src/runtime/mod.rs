//! The embedding API: a [`Runtime`] that starts runs, and a [`RunHandle`] per run.
//!
//! Files, in import order (each names only those above it):
//! - `alarms.rs`: the deadlines of hibernated runs, one sorted list.
//! - `handle.rs`: [`RunHandle`], what an embedder holds on one run; the
//!   children it started (`ChildList`) and what it says about itself (`RunAbout`).
//! - `mod.rs`: [`Runtime`] itself — its tools, its shutdown token, its store.
//! - `tree.rs`: [`RunTree`], a run and its children (from its handle).
//! - `children.rs`: `RunChildren`, what `agent.spawn`/`agent.wait`/`agent.cancel` call.
//! - `record.rs`: a durable run's record, written at its start and read back.
//! - `launch.rs`: starting a run (root or child); every start ends in `launch`.
//! - `regrow.rs`: a resumed run's stored children, resumed with it and recounted.
//! - `resume.rs`: the store side — listing stored runs and resuming one (and its tree).
//! - `hibernate.rs`: waking a hibernated run from the store into its handles.

mod about;
mod alarms;
mod children;
mod handle;
mod hibernate;
mod launch;
mod record;
mod regrow;
mod resume;
mod tree;

use std::sync::Arc;

use agentry_policy::ChildPolicyFactory;
use tokio_util::sync::CancellationToken;

use crate::conductor::RunOutcome;
use crate::config::RunConfig;
use crate::durable::{Durability, StoreWriter};
use crate::error::RuntimeError;
use crate::policy::Policy;
use crate::registry::{LiveRegistry, ToolRegistry};

pub use handle::{InboxUsage, Interrupted, RunHandle};
pub use resume::ResumeOptions;
pub use tree::RunTree;

/// Builds a woken run's policy from its stored configuration (its
/// `policy_spec` says which agent or script): one per runtime, shared by
/// every run it may wake (see [`Runtime::with_wake_policy`]).
pub type WakePolicy = Arc<
    dyn Fn(&RunConfig) -> futures::future::BoxFuture<'static, Result<Box<dyn Policy>, RuntimeError>>
        + Send
        + Sync,
>;

/// Starts runs. Cheap to clone (one pointer); clones share the tool
/// registry and the shutdown token. The builder methods (`with_*`) change
/// only the runtime they are called on.
#[derive(Clone)]
pub struct Runtime(Arc<parts::RuntimeParts>);

impl std::ops::Deref for Runtime {
    type Target = parts::RuntimeParts;

    fn deref(&self) -> &parts::RuntimeParts {
        &self.0
    }
}

impl std::ops::DerefMut for Runtime {
    /// A builder's change: copied first if another clone shares the parts.
    fn deref_mut(&mut self) -> &mut parts::RuntimeParts {
        Arc::make_mut(&mut self.0)
    }
}

mod parts {
    use std::sync::Arc;

    use super::{ChildPolicyFactory, Durability, LiveRegistry, StoreWriter, WakePolicy, alarms};
    use tokio_util::sync::CancellationToken;

    /// What every clone of a [`Runtime`](super::Runtime) shares; a hibernated
    /// run's waker holds a pointer to it. Not nameable outside the crate.
    #[derive(Clone)]
    pub struct RuntimeParts {
        pub(in crate::runtime) registry: LiveRegistry,
        pub(in crate::runtime) root: CancellationToken,
        pub(in crate::runtime) child_policy: Option<ChildPolicyFactory>,
        /// Named models children may ask for (`agent.spawn {"model": NAME}`).
        pub(in crate::runtime) child_models:
            Arc<std::collections::BTreeMap<String, ChildPolicyFactory>>,
        /// The store runs are committed to, if any.
        pub(crate) store: Option<StoreWriter>,
        pub(crate) durability: Durability,
        /// Rebuilds a hibernated run's policy as it wakes (none: nothing hibernates).
        pub(in crate::runtime) wake_policy: Option<WakePolicy>,
        /// Every hibernated run's deadline.
        pub(in crate::runtime) alarms: Arc<alarms::Alarms>,
        /// Lease mode's lease (`Runtime::with_lease`): owners judged by
        /// heartbeat alone.
        pub(in crate::runtime) lease: Option<std::time::Duration>,
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime with these tools.
    pub fn new(registry: ToolRegistry) -> Self {
        Runtime(Arc::new(parts::RuntimeParts {
            registry: LiveRegistry::new(registry),
            root: CancellationToken::new(),
            child_policy: None,
            child_models: Arc::default(),
            store: None,
            durability: Durability::Strict,
            wake_policy: None,
            alarms: Arc::default(),
            lease: None,
        }))
    }

    /// A runtime with only the built-in tools.
    pub fn with_builtins() -> Result<Self, RuntimeError> {
        Ok(Runtime::new(ToolRegistry::with_builtins()?))
    }

    /// Sets how children started by `agent.spawn` without an inline script get
    /// their policy (e.g. the same model adapter as their parent).
    pub fn with_child_policy(mut self, factory: ChildPolicyFactory) -> Self {
        self.child_policy = Some(factory);
        self
    }

    pub(crate) fn child_policy(&self) -> Option<&ChildPolicyFactory> {
        self.child_policy.as_ref()
    }

    /// Adds a named model children may ask for with `agent.spawn {"model":
    /// NAME}` (e.g. a planner on a large model, workers on a small one); a
    /// name given again replaces the earlier factory.
    pub fn with_child_model(
        mut self,
        name: impl Into<String>,
        factory: ChildPolicyFactory,
    ) -> Self {
        Arc::make_mut(&mut self.child_models).insert(name.into(), factory);
        self
    }

    /// The named child models.
    pub(crate) fn child_models(&self) -> &std::collections::BTreeMap<String, ChildPolicyFactory> {
        &self.child_models
    }

    pub(crate) fn root_token(&self) -> CancellationToken {
        self.root.child_token()
    }

    /// The tool registry in place now.
    pub fn registry(&self) -> Arc<ToolRegistry> {
        self.registry.current()
    }

    /// The registry as runs read it: [`LiveRegistry::replace`] puts a new
    /// one in place for every run's next step (a tool source whose tools
    /// changed, e.g. an MCP server's `tools/list_changed`).
    pub fn live_registry(&self) -> &LiveRegistry {
        &self.registry
    }

    /// Starts a run and waits for its outcome.
    pub async fn run(
        &self,
        config: RunConfig,
        policy: impl Policy,
    ) -> Result<RunOutcome, RuntimeError> {
        self.start(config, policy).await?.wait().await
    }

    /// Cancels every run of this runtime: in-flight tools are cancelled and each run
    /// stops with `user_abort`.
    pub fn shutdown(&self) {
        self.root.cancel();
        // A hibernated run wakes to stop (its token is cancelled).
        self.alarms.wake_all();
    }
}
