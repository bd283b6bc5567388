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
use std::sync::{Arc, OnceLock};

use agentry_sandbox::{
    Mode, Network, Sandbox, SandboxError, SandboxPlaces, SandboxSpec, default_read_deny,
};
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

/// The run's sandboxes: `spec` for `workdir` (a kernel that cannot enforce
/// it is [`RuntimeError::Sandbox`] naming what is missing), and every
/// override the tools of `registry` ask for, so that no process starts under
/// a spec the kernel cannot enforce.
///
/// A spec that asks nothing of the host beyond the default (no network
/// grant, no extra roots) on a kernel known to enforce the default (checked
/// once per process, [`default_enforceable`]) is prepared at its first spawn:
/// a start pays nothing for it (runs that start no process are most runs).
/// Any other is prepared now, so a bad grant or root fails the start.
pub fn prepare_sandboxes(
    spec: &SandboxSpec,
    workdir: &Path,
    host: &SandboxHost,
    registry: Option<&ToolRegistry>,
) -> Result<Arc<RunSandboxes>, RuntimeError> {
    let sandbox_error =
        |tool: Option<String>| move |source: SandboxError| RuntimeError::Sandbox { tool, source };
    let sandboxes = if vouched_for(spec) {
        let (workdir, host) = (workdir.to_path_buf(), host.clone());
        RunSandboxes::lazy(
            spec.clone(),
            Box::new(move || {
                sandbox_places(&workdir, &host).map_err(|e| SandboxError::Path {
                    path: workdir.clone(),
                    source: std::io::Error::other(e.to_string()),
                })
            }),
        )
    } else {
        let places = sandbox_places(workdir, host)?;
        RunSandboxes::prepare(spec.clone(), places).map_err(sandbox_error(None))?
    };
    for tool in registry.iter().flat_map(|r| r.tools()) {
        if let Some(over) = tool.tool.sandbox()
            && !vouched_for(&sandboxes.effective(&over))
        {
            let name = tool.contract.name.clone();
            sandboxes.check(&over).map_err(sandbox_error(Some(name)))?;
        }
    }
    Ok(Arc::new(sandboxes))
}

/// Whether `spec` can be left to its first spawn: it is off, or it asks no
/// more than the default of the host (no network grant, no extra roots) and
/// the kernel enforces the default.
fn vouched_for(spec: &SandboxSpec) -> bool {
    match spec.mode {
        Mode::Off => true,
        Mode::WorkspaceWrite | Mode::ReadOnly => {
            matches!(spec.network, Network::Off)
                && spec.write.is_empty()
                && spec.read_deny.is_empty()
                && default_enforceable()
        }
    }
}

/// Whether this kernel enforces the default sandbox: the default prepared
/// for real in a scratch directory, once per process (the answer does not
/// change while it runs).
pub fn default_enforceable() -> bool {
    static ENFORCEABLE: OnceLock<bool> = OnceLock::new();
    *ENFORCEABLE.get_or_init(|| {
        let Ok(scratch) = tempfile::tempdir() else {
            return false;
        };
        let places = SandboxPlaces {
            workdir: scratch.path().to_path_buf(),
            temp_parent: scratch.path().join("tmp"),
            deny: Vec::new(),
        };
        Sandbox::prepare(&SandboxSpec::default(), &places)
            .and_then(|sandbox| sandbox.call())
            .is_ok()
    })
}
