//! How servers are started ([`StartOptions`]): a leaf module, read by the
//! session (spawn, connect) and the server (restart).

use std::path::PathBuf;
use std::sync::Arc;

use crate::handler::{ElicitationHandler, SamplingHandler};

/// Default cap on the stderr kept from a stdio server (the last bytes).
pub const DEFAULT_STDERR_CAP: usize = 8 * 1024;

/// How a server is started.
#[derive(Clone)]
pub struct StartOptions {
    /// The stdio server's working directory (the run's workdir).
    pub workdir: PathBuf,
    /// Variables passed to a stdio server with the host's values (then the
    /// declaration's `env` on top); everything else is cleared. Default: the
    /// process tools' [`agentry_tools::proc::DEFAULT_ENV_ALLOWLIST`].
    pub env_allowlist: Vec<String>,
    /// Bytes of a stdio server's stderr kept (the last ones), for errors.
    pub stderr_cap: usize,
    /// Answers the servers' sampling requests; `None`: refused (see
    /// [`SamplingHandler`]).
    pub sampling: Option<Arc<dyn SamplingHandler>>,
    /// Answers the servers' elicitation requests; `None`: refused (see
    /// [`ElicitationHandler`]).
    pub elicitation: Option<Arc<dyn ElicitationHandler>>,
    /// The run's kernel sandboxes: a stdio server runs under the one for its
    /// declaration's `sandbox` override, for its whole life. `None`: servers
    /// run with the operator's full reach (a host that sandboxes nothing;
    /// `TaskSpec::start_mcp` always gives the run's).
    pub sandbox: Option<Arc<agentry_tools::proc::RunSandboxes>>,
}

impl StartOptions {
    /// Defaults, with stdio servers run in `workdir`.
    pub fn new(workdir: impl Into<PathBuf>) -> Self {
        StartOptions {
            workdir: workdir.into(),
            env_allowlist: agentry_tools::proc::DEFAULT_ENV_ALLOWLIST
                .iter()
                .map(|s| s.to_string())
                .collect(),
            stderr_cap: DEFAULT_STDERR_CAP,
            sampling: None,
            elicitation: None,
            sandbox: None,
        }
    }
}

impl std::fmt::Debug for StartOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartOptions")
            .field("workdir", &self.workdir)
            .field("env_allowlist", &self.env_allowlist)
            .field("stderr_cap", &self.stderr_cap)
            .field("sampling", &self.sampling.is_some())
            .field("elicitation", &self.elicitation.is_some())
            .field(
                "sandbox",
                &self.sandbox.as_ref().map(|s| s.spec().summary()),
            )
            .finish()
    }
}
