//! [`RunSandboxes`]: the kernel sandboxes of one run — its spec, where things
//! are, and one prepared [`Sandbox`] per effective spec (the run's, and each
//! tool override's) — and what a call's refusal is judged against.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_sandbox::{
    CallSandbox, Mode, Network, Sandbox, SandboxError, SandboxOverride, SandboxPlaces, SandboxSpec,
    SandboxSummary,
};

use super::refusal::{Confinement, NetworkAccess};

/// The sandboxes every process of one run starts under: made once per run
/// (by the runtime, or by a host that starts MCP servers for the run) and
/// shared by its calls through [`RunScope::sandbox`](crate::RunScope::sandbox).
///
/// [`RunSandboxes::prepare`] prepares the run's own spec at once, so a kernel
/// that cannot enforce it fails the start; [`RunSandboxes::lazy`] leaves
/// the places and the preparing to the first spawn (a start that runs no
/// process pays nothing; the host checks the kernel first). An override's
/// spec is prepared the first time it is asked for ([`RunSandboxes::check`]
/// does it up front). The temp parent is removed when this is dropped.
pub struct RunSandboxes {
    spec: SandboxSpec,
    places: OnceLock<SandboxPlaces>,
    make_places: Option<Box<PlacesFn>>,
    prepared: Mutex<Vec<Prepared>>,
}

/// Makes a run's places on first use.
pub type PlacesFn = dyn Fn() -> Result<SandboxPlaces, SandboxError> + Send + Sync;

impl std::fmt::Debug for RunSandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunSandboxes")
            .field("spec", &self.spec)
            .field("places", &self.places.get())
            .finish_non_exhaustive()
    }
}

/// One effective spec and its prepared sandbox.
#[derive(Debug)]
struct Prepared {
    spec: SandboxSpec,
    sandbox: Arc<Sandbox>,
}

impl RunSandboxes {
    /// Prepares `spec` with `places` (a kernel that cannot enforce it is
    /// [`SandboxError::Unsupported`], naming what is missing).
    pub fn prepare(spec: SandboxSpec, places: SandboxPlaces) -> Result<RunSandboxes, SandboxError> {
        let sandbox = Arc::new(Sandbox::prepare(&spec, &places)?);
        Ok(RunSandboxes {
            prepared: Mutex::new(vec![Prepared {
                spec: spec.clone(),
                sandbox,
            }]),
            spec,
            places: OnceLock::from(places),
            make_places: None,
        })
    }

    /// `spec`, its places made by `make_places` and the sandbox prepared at
    /// the first spawn (an error then fails that call). For a host that has
    /// checked the kernel can enforce `spec` already.
    pub fn lazy(spec: SandboxSpec, make_places: Box<PlacesFn>) -> RunSandboxes {
        RunSandboxes {
            spec,
            places: OnceLock::new(),
            make_places: Some(make_places),
            prepared: Mutex::new(Vec::new()),
        }
    }

    /// The run's spec (before any tool's override).
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// Where things are (made now if they were not yet).
    pub fn places(&self) -> Result<&SandboxPlaces, SandboxError> {
        if let Some(places) = self.places.get() {
            return Ok(places);
        }
        let made = match &self.make_places {
            Some(make) => make()?,
            None => {
                return Err(SandboxError::Path {
                    path: PathBuf::new(),
                    source: std::io::Error::other("no places"),
                });
            }
        };
        // A racing call may have set them first: theirs are kept.
        let _ = self.places.set(made);
        self.places.get().ok_or_else(|| SandboxError::Path {
            path: PathBuf::new(),
            source: std::io::Error::other("no places"),
        })
    }

    /// The spec a tool with `over` runs under.
    pub fn effective(&self, over: &SandboxOverride) -> SandboxSpec {
        self.spec.with_override(over)
    }

    /// What spans, traces and `agentry tools` show for a tool with `over`.
    pub fn summary(&self, over: &SandboxOverride) -> SandboxSummary {
        self.effective(over).summary()
    }

    /// Prepares the spec of a tool with `over` now, so that a spec the kernel
    /// cannot enforce fails before anything runs.
    pub fn check(&self, over: &SandboxOverride) -> Result<(), SandboxError> {
        self.sandbox(over).map(drop)
    }

    /// The prepared sandbox for a tool with `over` (prepared on first use).
    pub fn sandbox(&self, over: &SandboxOverride) -> Result<Arc<Sandbox>, SandboxError> {
        let spec = self.effective(over);
        let mut prepared = self.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = prepared.iter().find(|p| p.spec == spec) {
            return Ok(Arc::clone(&p.sandbox));
        }
        let sandbox = Arc::new(Sandbox::prepare(&spec, self.places()?)?);
        prepared.push(Prepared {
            spec,
            sandbox: Arc::clone(&sandbox),
        });
        Ok(sandbox)
    }

    /// One call's sandbox for a tool with `over`: its private `TMPDIR`
    /// (removed when it is dropped) and what [`CallSandbox::apply`] enforces.
    pub(crate) fn call(&self, over: &SandboxOverride) -> Result<SandboxedCall, ToolError> {
        let spec = self.effective(over);
        let unusable = |e: SandboxError| {
            ToolError::new(
                ErrorCode::Einternal,
                format!("cannot set up the call's sandbox: {e}"),
            )
        };
        let call = self
            .sandbox(over)
            .and_then(|sandbox| sandbox.call())
            .map_err(unusable)?;
        let places = self.places().map_err(unusable)?;
        Ok(SandboxedCall {
            confinement: (spec.mode != Mode::Off)
                .then(|| confinement(&spec, places, call.tmpdir())),
            call,
        })
    }
}

impl Drop for RunSandboxes {
    fn drop(&mut self) {
        // The calls' directories went with them; what is left is the parent.
        if let Some(places) = self.places.get() {
            let _ = std::fs::remove_dir_all(&places.temp_parent);
        }
    }
}

/// A call's sandbox while its process runs.
pub(crate) struct SandboxedCall {
    /// Applied to the command; its drop removes the call's `TMPDIR`.
    pub(crate) call: CallSandbox,
    /// What a refusal is judged against; `None` when the mode is `off`.
    pub(crate) confinement: Option<Confinement>,
}

fn confinement(spec: &SandboxSpec, places: &SandboxPlaces, tmpdir: &Path) -> Confinement {
    let workspace_writable = spec.mode == Mode::WorkspaceWrite;
    let mut writable: Vec<PathBuf> = vec![tmpdir.to_path_buf()];
    if workspace_writable {
        writable.push(places.workdir.clone());
        writable.extend(spec.write.iter().cloned());
    }
    let mut hidden = places.deny.clone();
    hidden.extend(spec.read_deny.iter().cloned());
    Confinement {
        workdir: places.workdir.clone(),
        workspace_writable,
        writable,
        read_only: vec![places.workdir.join(".git"), places.workdir.join(".agentry")],
        hidden,
        network: match &spec.network {
            Network::Off => NetworkAccess::Off,
            Network::On => NetworkAccess::All,
            Network::Allow(grants) => NetworkAccess::Ports(grants.iter().map(|g| g.port).collect()),
        },
    }
}
