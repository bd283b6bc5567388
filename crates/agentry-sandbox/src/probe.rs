//! What this kernel can enforce (`agentry sandbox-check` prints it).

use std::fmt;

use serde::Serialize;

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
    /// Agentry runs as uid 0, for which the kernel never enforces `RLIMIT_NPROC`.
    pub running_as_root: bool,
}

impl KernelSupport {
    /// Everything the default sandbox needs is present.
    pub fn enforces_default(&self) -> bool {
        self.landlock_abi >= crate::enforce::REQUIRED_LANDLOCK_ABI
            && self.seccomp
            && self.namespaces
    }
}

impl fmt::Display for KernelSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let yes_no = |flag: bool| if flag { "yes" } else { "no" };
        writeln!(f, "landlock ABI: {}", self.landlock_abi)?;
        writeln!(f, "seccomp filters: {}", yes_no(self.seccomp))?;
        writeln!(f, "user+mount+pid namespaces: {}", yes_no(self.namespaces))?;
        writeln!(f, "running as root: {}", yes_no(self.running_as_root))?;
        write!(
            f,
            "default sandbox enforceable: {}",
            yes_no(self.enforces_default())
        )
    }
}

/// Probes this kernel: the Landlock ABI, seccomp, and namespaces (by trying
/// them in a short-lived child process).
pub fn probe() -> KernelSupport {
    crate::enforce::probe()
}
