//! Other operating systems: nothing is enforceable, so every mode but `off`
//! is [`SandboxError::Unsupported`] at prepare.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use crate::error::SandboxError;
use crate::places::SandboxPlaces;
use crate::probe::KernelSupport;
use crate::spec::SandboxSpec;

/// What every call of one sandbox shares (never made here).
#[derive(Debug)]
pub(crate) struct Prepared;

impl Prepared {
    pub(crate) fn new(_spec: &SandboxSpec, _places: &SandboxPlaces) -> Result<Self, SandboxError> {
        Err(SandboxError::Unsupported {
            what: "Landlock, seccomp and Linux namespaces (this is not Linux)".to_owned(),
        })
    }
}

/// One call's plan (never made here).
#[derive(Debug)]
pub(crate) struct CallPlan;

impl CallPlan {
    pub(crate) fn new(_prepared: &Prepared, _tmpdir: &Path) -> Result<Self, SandboxError> {
        Ok(CallPlan)
    }
}

/// Nothing to register.
pub(crate) fn register(_plan: &Arc<CallPlan>, _command: &mut Command) {}

/// Probes this system: nothing the sandbox needs exists off Linux.
pub fn probe() -> KernelSupport {
    KernelSupport {
        landlock_abi: 0,
        seccomp: false,
        namespaces: false,
        fresh_proc: false,
        running_as_root: false,
        pids_cgroup: false,
    }
}
