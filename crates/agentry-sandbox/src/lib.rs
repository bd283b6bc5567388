//! A kernel sandbox around every process a model can drive.
//!
//! A task asks for a [`SandboxSpec`] (`[sandbox]` in task.toml); the host says
//! where things are ([`SandboxPlaces`]); [`Sandbox::prepare`] checks that the
//! kernel can enforce it (never a silent downgrade: [`SandboxError::Unsupported`])
//! and builds everything that allocates — the seccomp filter, the path strings
//! — once. [`Sandbox::call`] makes the call's private `TMPDIR` and its Landlock
//! ruleset; [`CallSandbox::apply`] registers the `pre_exec` step that, between
//! fork and exec, only makes syscalls on that prepared data.
//!
//! In the child (Linux), three processes per call: the leader (what the host
//! spawned) makes a user and a PID namespace and forks init (pid 1), which
//! makes a mount namespace — empty read-only mounts over denied directories,
//! `/dev/null` over denied files, the call's own places inside them mounted
//! back, `.git/` and `.agentry/` read-only, a fresh `/proc` — and forks the
//! command (pid 2, so its own signals work): rlimits, `no_new_privs`, no
//! capabilities, the Landlock ruleset, the seccomp filter last. When the
//! command exits, init kills and reaps everything left in the namespace
//! (`setsid` or not) and hands the status to the leader, which exits the same
//! way (dies of the same signal).
//!
//! `mode = "off"` needs nothing from the kernel: the call still gets its
//! private `TMPDIR` (made and removed the same way), and nothing else changes.
//!
//! Layout: `spec` (what a task asks, serde), `duration` (its `"10m"`
//! form), `places`, `probe`
//! (`KernelSupport`), `sandbox` (prepare/call/apply), `enforce/` (the
//! parent-side building: `kernel` probe and limits, `ruleset` Landlock,
//! `filter` seccomp, `mounts` the mount plan, `cgroup` the pids cgroup as
//! root), `plan` (the prepared data) and `child/` (the `unsafe` syscalls
//! after fork: `sys` wrappers, `mounts`, `trial` for the probe). Off Linux,
//! `unsupported.rs` stands in for `enforce/`: every mode but `off` is
//! `Unsupported`.
//!
//! ```
//! use agentry_sandbox::{Mode, SandboxSpec};
//! let spec: SandboxSpec = serde_json::from_str(r#"{"network": ["example.org:443"], "memory": "1GiB"}"#).unwrap();
//! assert_eq!(spec.mode, Mode::WorkspaceWrite);
//! assert_eq!(spec.limits().memory.0, 1 << 30);
//! ```

#[cfg(target_os = "linux")]
mod child;
mod duration;
#[cfg(target_os = "linux")]
mod enforce;
#[cfg(not(target_os = "linux"))]
#[path = "unsupported.rs"]
mod enforce;
mod error;
mod places;
#[cfg(target_os = "linux")]
mod plan;
mod probe;
mod sandbox;
mod spec;

pub use duration::parse_duration;
pub use enforce::probe;
pub use error::SandboxError;
pub use places::{SandboxPlaces, default_read_deny, host_sockets};
pub use probe::{KernelSupport, REQUIRED_LANDLOCK_ABI};
pub use sandbox::{CallSandbox, Sandbox};
pub use spec::{
    ByteSize, DEFAULT_CPU_TIME, DEFAULT_FILE_SIZE, DEFAULT_MEMORY, DEFAULT_PROCESSES, HostPort,
    Limits, Mode, NETWORK_GRANTS_NOTE, Network, SandboxOverride, SandboxSpec, SandboxSummary,
};
