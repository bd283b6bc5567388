//! What this kernel can enforce (`agentry sandbox-check` prints it).

use std::fmt;

use serde::Serialize;

/// Landlock ABI the sandbox needs: 6 has the signal and abstract-socket scopes
/// (4 the TCP rules, 3 truncate, 2 link/rename across directories).
pub const REQUIRED_LANDLOCK_ABI: u32 = 6;

/// What this kernel offers the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KernelSupport {
    /// The Landlock ABI version; 0 when Landlock is absent or disabled.
    /// 1: file system; 2: link/rename across directories; 3: truncate;
    /// 4: TCP bind/connect; 5: device ioctl; 6: signal and abstract-socket scopes.
    pub landlock_abi: u32,
    /// Seccomp filters can be installed.
    pub seccomp: bool,
    /// An unprivileged process can make user, mount and PID namespaces (tried in a child).
    pub namespaces: bool,
    /// A `/proc` of the call's own PID namespace can be mounted (hides other processes).
    pub fresh_proc: bool,
    /// Agentry runs as uid 0, for which the kernel never enforces `RLIMIT_NPROC`.
    pub running_as_root: bool,
    /// Running as root: a writable pids cgroup bounds each call's processes instead.
    pub pids_cgroup: bool,
}

impl KernelSupport {
    /// Everything the default sandbox needs is present.
    pub fn enforces_default(&self) -> bool {
        self.landlock_abi >= REQUIRED_LANDLOCK_ABI && self.seccomp && self.namespaces
    }
}

impl fmt::Display for KernelSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes_no = |flag: bool| if flag { "yes" } else { "no" };
        writeln!(f, "landlock ABI: {}", self.landlock_abi)?;
        writeln!(f, "seccomp filters: {}", yes_no(self.seccomp))?;
        writeln!(f, "user+mount+pid namespaces: {}", yes_no(self.namespaces))?;
        writeln!(f, "fresh /proc per call: {}", yes_no(self.fresh_proc))?;
        writeln!(f, "running as root: {}", yes_no(self.running_as_root))?;
        if self.running_as_root {
            writeln!(
                f,
                "pids cgroup for the process limit: {}",
                yes_no(self.pids_cgroup)
            )?;
        }
        write!(
            f,
            "default sandbox enforceable: {}",
            yes_no(self.enforces_default())
        )
    }
}
