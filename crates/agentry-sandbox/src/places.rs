//! Where things are: what the host knows and the spec cannot.

use std::path::{Path, PathBuf};

/// What the host knows about where things are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlaces {
    /// The working directory: writable under workspace-write, minus `.git/` and
    /// `.agentry/` (read-only when they exist at the call).
    pub workdir: PathBuf,
    /// Each call gets a private directory under it, set as `TMPDIR` and removed
    /// with the call. Made if missing.
    pub temp_parent: PathBuf,
    /// Host-known unreadable places: the store file and its directory, agentry's
    /// state directory, the runs root (other runs' working directories). A
    /// denied directory that holds the workdir, the call's TMPDIR or a `write`
    /// root is hidden except for those.
    pub deny: Vec<PathBuf>,
}

/// The operator's secrets under `home` that no sandboxed process may read:
/// `~/.ssh`, `~/.aws`, `~/.config/gcloud`, `~/.netrc`, `~/.docker/config.json`.
pub fn default_read_deny(home: &Path) -> Vec<PathBuf> {
    [
        ".ssh",
        ".aws",
        ".config/gcloud",
        ".netrc",
        ".docker/config.json",
    ]
    .iter()
    .map(|rel| home.join(rel))
    .collect()
}
