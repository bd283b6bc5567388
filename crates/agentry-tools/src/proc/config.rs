//! [`ProcConfig`]: how process tools run their processes, and its defaults.

use std::time::Duration;

/// Default inline cap per output stream: 16 KiB.
pub const DEFAULT_MAX_INLINE: usize = 16 * 1024;

/// Default time between SIGTERM and SIGKILL on cancel. It must fit, with the
/// reaping after it, inside the executor's 75 ms cancel grace.
pub const DEFAULT_TERM_GRACE: Duration = Duration::from_millis(40);

/// Variables passed to children by default (with the host's values).
pub const DEFAULT_ENV_ALLOWLIST: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// How process tools run their processes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcConfig {
    /// Bytes of each output stream kept inline; the rest goes to an artifact.
    pub max_inline: usize,
    /// Time between SIGTERM and SIGKILL when a call is cancelled.
    pub term_grace: Duration,
    /// Environment variables a child may see; everything else is cleared.
    pub env_allowlist: Vec<String>,
}

impl Default for ProcConfig {
    fn default() -> Self {
        ProcConfig {
            max_inline: DEFAULT_MAX_INLINE,
            term_grace: DEFAULT_TERM_GRACE,
            env_allowlist: DEFAULT_ENV_ALLOWLIST
                .iter()
                .map(|s| s.to_string())
                .collect(),
        }
    }
}
