//! The parent-side building: everything that allocates, resolves, opens or
//! compiles happens here, before fork.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::error::SandboxError;
use crate::places::SandboxPlaces;
use crate::probe::KernelSupport;
use crate::spec::SandboxSpec;

/// Landlock ABI the sandbox needs: 6 has the signal and abstract-socket scopes
/// (and 4 the TCP rules, 2 the link/rename rule).
pub(crate) const REQUIRED_LANDLOCK_ABI: u32 = 6;

/// What every call of one sandbox shares.
#[derive(Debug)]
pub(crate) struct Prepared {}

impl Prepared {
    pub(crate) fn new(_spec: &SandboxSpec, _places: &SandboxPlaces) -> Result<Self, SandboxError> {
        Err(SandboxError::Unsupported {
            what: "enforcement (not built yet in this commit)".to_owned(),
        })
    }
}

/// One call's prepared data for the child.
#[derive(Debug)]
pub(crate) struct CallPlan {}

impl CallPlan {
    pub(crate) fn new(_prepared: &Prepared, _tmpdir: &Path) -> Result<Self, SandboxError> {
        Ok(CallPlan {})
    }
}

/// Registers the child's steps on `command`.
pub(crate) fn register(_plan: &Arc<CallPlan>, _command: &mut Command) {}

/// See [`crate::probe`].
pub(crate) fn probe() -> KernelSupport {
    KernelSupport {
        landlock_abi: 0,
        seccomp: false,
        namespaces: false,
        running_as_root: false,
    }
}
