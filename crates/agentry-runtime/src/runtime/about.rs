//! What a run's handle says about its run: in a tree, and after a resume.

use agentry_tools::proc::Fenced;

/// What a handle says about its run: in a tree, and after a resume.
#[derive(Debug)]
pub(crate) struct RunAbout {
    pub(crate) name: String,
    pub(crate) goal: String,
    pub(crate) model: String,
    /// A child's limits as carved from its parent's (what `agent.spawn`
    /// answers); none for a root run, whose tree reads its supervisor's.
    /// Boxed: ~110 bytes a hibernated root run need not keep.
    pub(crate) carved: Option<Box<agentry_protocol::budget::BudgetLimits>>,
    /// What the resume that started this process's run killed of an earlier
    /// attempt's processes; unset for a run started here.
    /// Boxed: set only on a resume that fenced something.
    pub(crate) fenced: std::sync::OnceLock<Box<Fenced>>,
}

impl RunAbout {
    pub(crate) fn of(
        config: &crate::RunConfig,
        policy: &dyn crate::policy::Policy,
        child: bool,
    ) -> Self {
        RunAbout {
            name: config.task_id.clone(),
            goal: config.goal.clone(),
            model: policy.name(),
            carved: child.then(|| Box::new(config.limits)),
            fenced: std::sync::OnceLock::new(),
        }
    }

    /// A child's limits as carved (a root run's: none, the default).
    pub(crate) fn limits(&self) -> agentry_protocol::budget::BudgetLimits {
        self.carved.as_deref().copied().unwrap_or_default()
    }
}
