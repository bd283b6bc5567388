//! [`RunSandboxes`]: the kernel sandboxes of one run — its spec, where things
//! are, and one prepared [`Sandbox`] per effective spec (the run's, and each
//! tool override's) — and what a call's refusal is judged against.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_sandbox::{
    CallSandbox, Mode, Network, Sandbox, SandboxError, SandboxOverride, SandboxPlaces, SandboxSpec,
    SandboxSummary,
};

use super::refusal::{Confinement, NetworkAccess};

/// The sandboxes every process of one run starts under: made once per run
/// (by the runtime, or by a host that starts MCP servers for the run) and
/// shared by its calls through [`ToolContext::sandbox`](crate::ToolContext::sandbox).
///
/// [`RunSandboxes::prepare`] prepares the run's own spec at once, so a kernel
/// that cannot enforce it fails the start; an override's spec is prepared
/// the first time it is asked for ([`RunSandboxes::check`] does it up front
/// for the tools a run has). The temp parent is removed when this is dropped.
#[derive(Debug)]
pub struct RunSandboxes {
    spec: SandboxSpec,
    places: SandboxPlaces,
    prepared: Mutex<Vec<Prepared>>,
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
            places,
        })
    }

    /// The run's spec (before any tool's override).
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// Where things are.
    pub fn places(&self) -> &SandboxPlaces {
        &self.places
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
        let sandbox = Arc::new(Sandbox::prepare(&spec, &self.places)?);
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
        let call = self
            .sandbox(over)
            .and_then(|sandbox| sandbox.call())
            .map_err(|e| {
                ToolError::new(
                    ErrorCode::Einternal,
                    format!("cannot set up the call's sandbox: {e}"),
                )
            })?;
        Ok(SandboxedCall {
            confinement: (spec.mode != Mode::Off)
                .then(|| confinement(&spec, &self.places, call.tmpdir())),
            call,
        })
    }
}

impl Drop for RunSandboxes {
    fn drop(&mut self) {
        // The calls' directories went with them; what is left is the parent.
        let _ = std::fs::remove_dir_all(&self.places.temp_parent);
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
