//! Prepare once per (run, effective spec); one [`CallSandbox`] per spawn.

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use crate::enforce::{CallPlan, Prepared};
use crate::error::SandboxError;
use crate::places::SandboxPlaces;
use crate::spec::{Mode, SandboxSpec, SandboxSummary};

/// A sandbox prepared for one run and one effective spec: the kernel checked,
/// the seccomp filter compiled, the paths resolved. Cheap to share (`Arc` inside).
#[derive(Debug, Clone)]
pub struct Sandbox {
    spec: SandboxSpec,
    temp_parent: PathBuf,
    /// `None` when the mode is `off`.
    prepared: Option<Arc<Prepared>>,
}

impl Sandbox {
    /// Checks the kernel can enforce `spec` (else [`SandboxError::Unsupported`]
    /// naming what is missing; `mode = "off"` needs nothing), resolves the
    /// places and `host:port` grants, makes `temp_parent`, compiles the filter.
    pub fn prepare(spec: &SandboxSpec, places: &SandboxPlaces) -> Result<Sandbox, SandboxError> {
        fs::create_dir_all(&places.temp_parent).map_err(|source| SandboxError::Path {
            path: places.temp_parent.clone(),
            source,
        })?;
        let prepared = match spec.mode {
            Mode::Off => None,
            Mode::WorkspaceWrite | Mode::ReadOnly => Some(Arc::new(Prepared::new(spec, places)?)),
        };
        Ok(Sandbox {
            spec: spec.clone(),
            temp_parent: places.temp_parent.clone(),
            prepared,
        })
    }

    /// The effective spec.
    pub fn spec(&self) -> &SandboxSpec {
        &self.spec
    }

    /// What spans, traces and `agentry tools` show.
    pub fn summary(&self) -> SandboxSummary {
        self.spec.summary()
    }

    /// Sets up one spawn: makes the call's private TMPDIR (mode 0700, removed
    /// when the [`CallSandbox`] drops) and, unless the mode is `off`, the
    /// call's Landlock ruleset and mount plan.
    pub fn call(&self) -> Result<CallSandbox, SandboxError> {
        let tmpdir = make_private_dir(&self.temp_parent)?;
        let guard = TmpDir(tmpdir);
        let plan = match &self.prepared {
            None => None,
            Some(prepared) => Some(Arc::new(CallPlan::new(prepared, &guard.0)?)),
        };
        Ok(CallSandbox {
            tmpdir: guard,
            plan,
        })
    }
}

/// One spawn's sandbox: its private TMPDIR and what the child will do.
/// Keep it alive until the process has exited: dropping it removes the TMPDIR.
#[derive(Debug)]
pub struct CallSandbox {
    tmpdir: TmpDir,
    plan: Option<Arc<CallPlan>>,
}

impl CallSandbox {
    /// The call's private temporary directory (set as `TMPDIR` by [`apply`](Self::apply)).
    pub fn tmpdir(&self) -> &Path {
        &self.tmpdir.0
    }

    /// Sets `TMPDIR` and, unless the mode is `off`, registers the `pre_exec`
    /// step that confines the process. Call it after the environment is set
    /// (an `env_clear` after it would drop `TMPDIR`). For a
    /// `tokio::process::Command`, pass `command.as_std_mut()`.
    ///
    /// Confined, the process gets exactly the variables set on `command`, as
    /// after `env_clear` (the host's own environment never reaches it
    /// implicitly), and a program without a `/` is looked up on the `PATH`
    /// set there (`/bin:/usr/bin` without one), as `execvp` does, except
    /// that a file without `#!` is not run through `sh`.
    ///
    /// The spawned process is then the sandbox's leader: it waits for the
    /// command (pid 1 of its own PID namespace) and exits with its status, or
    /// dies of the same signal.
    pub fn apply(&self, command: &mut Command) {
        command.env("TMPDIR", self.tmpdir());
        if let Some(plan) = &self.plan {
            crate::enforce::register(plan, command);
        }
    }
}

/// The call's TMPDIR, removed on drop.
#[derive(Debug)]
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        // Best effort: a process that outlived its call (mode off) may still write here.
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn make_private_dir(parent: &Path) -> Result<PathBuf, SandboxError> {
    let mut builder = fs::DirBuilder::new();
    builder.mode(0o700);
    let mut last_error = None;
    for _ in 0..8 {
        let path = parent.join(format!("call-{}", fastrand_name()));
        match builder.create(&path) {
            Ok(()) => return Ok(path),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                last_error = Some(error);
            }
            Err(source) => return Err(SandboxError::Path { path, source }),
        }
    }
    Err(SandboxError::Path {
        path: parent.to_path_buf(),
        source: last_error.unwrap_or_else(|| std::io::Error::other("no free name")),
    })
}

fn fastrand_name() -> String {
    (0..12).map(|_| fastrand::alphanumeric()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared_across_tasks<T: Send + Sync>() {}

    #[test]
    fn a_sandbox_and_a_call_can_cross_threads() {
        shared_across_tasks::<Sandbox>();
        shared_across_tasks::<CallSandbox>();
    }
}
