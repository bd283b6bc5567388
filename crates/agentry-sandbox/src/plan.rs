//! The data the child acts on: built (allocated, resolved, opened, compiled)
//! in the parent, only read after fork.

use std::ffi::CString;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use seccompiler::BpfProgram;

use crate::error::SandboxError;

/// Most kept places one covered directory can hold (the workdir, the call's
/// TMPDIR, `write` roots); the child keeps their handles on its stack.
pub(crate) const MAX_KEEPS: usize = 16;

/// Everything one call's child does, in order.
pub(crate) struct ChildPlan {
    /// Running as root: the call's pids cgroup (`…/cgroup.procs`), joined by the command.
    pub(crate) cgroup_procs: Option<CString>,
    /// `/proc/self/uid_map` content: the same id inside as outside.
    pub(crate) uid_map: CString,
    /// `/proc/self/gid_map` content.
    pub(crate) gid_map: CString,
    /// Mounts in the call's mount namespace, in order.
    pub(crate) mounts: Vec<MountStep>,
    /// Mount a `/proc` of the call's own PID namespace (the probe found it possible).
    pub(crate) fresh_proc: bool,
    /// Resource limits for the command.
    pub(crate) rlimits: Vec<Rlimit>,
    /// The call's Landlock ruleset (close-on-exec).
    pub(crate) landlock: OwnedFd,
    /// Seccomp programs, installed in this order, last of all.
    pub(crate) filters: Arc<[BpfProgram]>,
    /// With `host:port` grants: the command's connects are init's to answer.
    pub(crate) connect: Option<ConnectGuard>,
    /// A private tmpfs over `/dev/shm`, writable by the command.
    pub(crate) shm: Option<PrivateShm>,
}

/// The call's own `/dev/shm` (POSIX shared memory and semaphores: Python's
/// `multiprocessing` locks, for one), gone with its mount namespace.
#[derive(Debug, Clone)]
pub(crate) struct PrivateShm {
    /// The tmpfs's mount options (mode, size).
    pub(crate) options: CString,
    /// The Landlock rights beneath it (the writable places' own).
    pub(crate) rights: u64,
}

/// `host:port` grants as init enforces them (`child/connect.rs`).
#[derive(Debug, Clone)]
pub(crate) struct ConnectGuard {
    /// Sends every `connect` to init (a seccomp user notification).
    pub(crate) program: Arc<BpfProgram>,
    /// The granted addresses, resolved when the sandbox was prepared.
    pub(crate) allowed: Arc<[SocketAddr]>,
}

impl std::fmt::Debug for ChildPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildPlan")
            .field("cgroup_procs", &self.cgroup_procs)
            .field("mounts", &self.mounts)
            .field("fresh_proc", &self.fresh_proc)
            .field("rlimits", &self.rlimits)
            .field("landlock", &self.landlock)
            .field("filters", &self.filters.len())
            .field("connect", &self.connect.as_ref().map(|c| &c.allowed))
            .field("shm", &self.shm)
            .finish_non_exhaustive()
    }
}

/// One resource limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rlimit {
    /// `RLIMIT_*`.
    pub(crate) resource: libc::__rlimit_resource_t,
    /// Soft and hard value.
    pub(crate) value: libc::rlim_t,
}

/// One mount made in the call's mount namespace. A missing target is skipped:
/// there is nothing there to read or write.
#[derive(Debug)]
pub(crate) enum MountStep {
    /// An empty read-only tmpfs over a denied directory; the kept places
    /// inside it (grabbed before it is covered) are mounted back.
    Cover {
        /// The denied directory.
        dir: CString,
        /// Places inside it that stay visible.
        keeps: Vec<Keep>,
    },
    /// `/dev/null` bound over a denied file.
    HideFile {
        /// The denied file.
        file: CString,
    },
    /// A path bound read-only onto itself (`.git`, `.agentry`).
    ReadOnly {
        /// The path.
        path: CString,
        /// The flags of the mount it is on, which an unprivileged remount must keep.
        locked: libc::c_ulong,
    },
}

/// A place inside a covered directory that stays visible.
#[derive(Debug)]
pub(crate) struct Keep {
    /// Its path.
    pub(crate) path: CString,
    /// The directories to make inside the cover, shallowest first, ending with `path`.
    pub(crate) mkdirs: Vec<CString>,
}

/// A path as the C string a syscall takes.
pub(crate) fn path_cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::Path {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the path holds a NUL byte",
        ),
    })
}

/// The command's program, arguments and environment, ready for `execve`:
/// the sandbox's command execs itself (std's exec runs in the process std
/// forked, which is the call's leader, not the command).
pub(crate) struct ExecPlan {
    /// The paths to try in order (`PATH`'s entries joined with the program,
    /// or the program alone when it holds a `/`).
    pub(crate) candidates: Vec<CString>,
    /// Owns what `argv` points into.
    _args: Vec<CString>,
    /// Owns what `envp` points into.
    _env: Vec<CString>,
    /// Null-terminated.
    pub(crate) argv: Vec<*const libc::c_char>,
    /// Null-terminated.
    pub(crate) envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into the `CString`s the plan owns, which are
// never changed or moved (their heap buffers stay put) while it lives.
unsafe impl Send for ExecPlan {}
// SAFETY: as above; the plan is only read.
unsafe impl Sync for ExecPlan {}

impl ExecPlan {
    pub(crate) fn new(candidates: Vec<CString>, args: Vec<CString>, env: Vec<CString>) -> Self {
        let pointers = |strings: &[CString]| {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        ExecPlan {
            argv: pointers(&args),
            envp: pointers(&env),
            candidates,
            _args: args,
            _env: env,
        }
    }
}

impl std::fmt::Debug for ExecPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecPlan")
            .field("candidates", &self.candidates)
            .field("args", &self._args)
            .finish_non_exhaustive()
    }
}
