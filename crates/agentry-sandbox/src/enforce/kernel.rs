//! What the kernel offers, what a spec needs of it, and the limits to set.

use std::ffi::CString;
use std::sync::OnceLock;

use crate::child::{self, NamespaceTrial};
use crate::error::SandboxError;
use crate::plan::Rlimit;
use crate::probe::{KernelSupport, REQUIRED_LANDLOCK_ABI};
use crate::spec::{Limits, Mode, SandboxSpec};

/// Probes this kernel: the Landlock ABI, seccomp, and namespaces and a fresh
/// `/proc` (by trying them in a short-lived child process). Probed once per
/// process: the kernel does not change under us.
pub fn probe() -> KernelSupport {
    static SUPPORT: OnceLock<KernelSupport> = OnceLock::new();
    *SUPPORT.get_or_init(probe_now)
}

fn probe_now() -> KernelSupport {
    let trial = match (
        CString::new(format!("{0} {0} 1\n", euid())),
        CString::new(format!("{0} {0} 1\n", egid())),
    ) {
        (Ok(uid_map), Ok(gid_map)) => child::try_namespaces(&uid_map, &gid_map),
        (Err(_), _) | (_, Err(_)) => NamespaceTrial::Refused,
    };
    let running_as_root = euid() == 0;
    KernelSupport {
        landlock_abi: landlock_abi(),
        seccomp: seccomp_available(),
        namespaces: trial != NamespaceTrial::Refused,
        fresh_proc: trial == NamespaceTrial::Full,
        running_as_root,
        pids_cgroup: running_as_root && super::cgroup::pids_parent().is_some(),
    }
}

/// The kernel's support, or `Unsupported` naming everything `spec` needs that is missing.
pub(super) fn require(spec: &SandboxSpec) -> Result<KernelSupport, SandboxError> {
    let support = probe();
    let mut missing = Vec::new();
    if support.landlock_abi < REQUIRED_LANDLOCK_ABI {
        missing.push(format!(
            "Landlock ABI {REQUIRED_LANDLOCK_ABI} (file system, TCP rules, signal and abstract-socket scopes) — kernel has ABI {}",
            support.landlock_abi
        ));
    }
    if !support.seccomp {
        missing.push("seccomp filters".to_owned());
    }
    if !support.namespaces {
        missing.push("unprivileged user, mount and PID namespaces".to_owned());
    }
    if support.running_as_root && !support.pids_cgroup && spec.mode != Mode::Off {
        missing.push(
            "a process limit for uid 0 (the kernel never applies RLIMIT_NPROC to root, and no pids cgroup is writable)"
                .to_owned(),
        );
    }
    match missing.is_empty() {
        true => Ok(support),
        false => Err(SandboxError::Unsupported {
            what: missing.join("; "),
        }),
    }
}

/// The limits to set in the command: never above the host's own hard limit
/// (raising it would fail). As root the process limit is the pids cgroup's.
pub(super) fn rlimits(limits: &Limits, running_as_root: bool) -> Vec<Rlimit> {
    let mut wanted = vec![
        (libc::RLIMIT_AS, limits.memory.0),
        (libc::RLIMIT_FSIZE, limits.file_size.0),
        (libc::RLIMIT_CPU, limits.cpu_time.as_secs().max(1)),
    ];
    if !running_as_root {
        wanted.push((libc::RLIMIT_NPROC, limits.processes));
    }
    wanted
        .into_iter()
        .map(|(resource, value)| Rlimit {
            resource,
            value: value.min(hard_limit(resource)),
        })
        .collect()
}

fn hard_limit(resource: libc::__rlimit_resource_t) -> libc::rlim_t {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `current` is a valid out-pointer.
    match unsafe { libc::getrlimit(resource, &mut current) } {
        0 => current.rlim_max,
        _ => libc::RLIM_INFINITY,
    }
}

fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version query: null attributes, size 0.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
}

fn seccomp_available() -> bool {
    // SAFETY: plain prctl query.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

pub(super) fn euid() -> u32 {
    // SAFETY: always succeeds.
    unsafe { libc::geteuid() }
}

pub(super) fn egid() -> u32 {
    // SAFETY: always succeeds.
    unsafe { libc::getegid() }
}
