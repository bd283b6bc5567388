//! The run's kernel sandbox: where things are ([`SandboxHost`], the places
//! the host knows), and [`prepare_sandboxes`], which every start (a root, a
//! child, a resume) and a host starting MCP servers for a run go through.
//!
//! A run's places: its working directory (writable under workspace-write);
//! a temp parent `<agentry's private temp dir>/sandbox/<uuid>` (each call's
//! private `TMPDIR` is made in it; removed with the run's sandboxes); and the
//! denied places: the operator's secrets ([`default_read_deny`] of the home
//! directory), what the host names (its store's directory, its state
//! directory), and the runs root `<private temp dir>/runs`, where the CLI
//! makes every run's working directory (this run's stays visible).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry_sandbox::{SandboxPlaces, SandboxSpec, default_read_deny};
use agentry_tools::proc::RunSandboxes;
use serde::{Deserialize, Serialize};

use crate::error::RuntimeError;
use crate::registry::ToolRegistry;

/// What the host knows that a sandboxed process must not read, besides the
/// spec's `read_deny` and the runs root.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxHost {
    /// The operator's home directory, whose secrets ([`default_read_deny`]:
    /// `~/.ssh`, `~/.aws`, ...) are hidden. `None`: `$HOME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<PathBuf>,
    /// Host-known places: the store file's directory, agentry's state
    /// directory (the CLI sets both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<PathBuf>,
}

/// The runs root: `<private temp dir>/runs`, where default working
/// directories are made (by `agentry-task`), one per run.
pub fn runs_root() -> Result<PathBuf, RuntimeError> {
    Ok(crate::tempdir::private_temp_dir()?.join("runs"))
}

/// A run's places (see the module docs). Makes the temp parent's directory.
pub fn sandbox_places(workdir: &Path, host: &SandboxHost) -> Result<SandboxPlaces, RuntimeError> {
    let private = crate::tempdir::private_temp_dir()?;
    let home = host
        .home
        .clone()
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .filter(|h| h.is_absolute());
    let mut deny: Vec<PathBuf> = home.as_deref().map(default_read_deny).unwrap_or_default();
    deny.extend(host.deny.iter().cloned());
    deny.push(private.join("runs"));
    deny.dedup();
    Ok(SandboxPlaces {
        workdir: workdir.to_path_buf(),
        temp_parent: private
            .join("sandbox")
            .join(uuid::Uuid::now_v7().to_string()),
        deny,
    })
}

/// The run's sandboxes: `spec` prepared for `workdir` (a kernel that cannot
/// enforce it is [`RuntimeError::Sandbox`] naming what is missing), and
/// every override the tools of `registry` ask for, so that no process starts
/// under a spec the kernel cannot enforce.
pub fn prepare_sandboxes(
    spec: &SandboxSpec,
    workdir: &Path,
    host: &SandboxHost,
    registry: Option<&ToolRegistry>,
) -> Result<Arc<RunSandboxes>, RuntimeError> {
    let places = sandbox_places(workdir, host)?;
    let sandboxes = RunSandboxes::prepare(spec.clone(), places)
        .map_err(|source| RuntimeError::Sandbox { tool: None, source })?;
    for tool in registry.iter().flat_map(|r| r.tools()) {
        if let Some(over) = tool.tool.sandbox() {
            sandboxes
                .check(&over)
                .map_err(|source| RuntimeError::Sandbox {
                    tool: Some(tool.contract.name.clone()),
                    source,
                })?;
        }
    }
    Ok(Arc::new(sandboxes))
}
