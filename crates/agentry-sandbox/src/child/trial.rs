//! The probe's trial of namespaces and a fresh `/proc`, in a throwaway child.

use std::ffi::CStr;
use std::io;

use super::sys::{check, errno, mount, write_file};

/// What a trial of the namespaces in a throwaway child found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NamespaceTrial {
    /// Namespaces could not be made.
    Refused,
    /// Namespaces work; a fresh `/proc` could not be mounted.
    NoFreshProc,
    /// Namespaces and a fresh `/proc` work.
    Full,
}

/// Tries user+mount+PID namespaces and a fresh `/proc` in a throwaway child.
pub(crate) fn try_namespaces(uid_map: &CStr, gid_map: &CStr) -> NamespaceTrial {
    // SAFETY: the child only makes syscalls on prepared strings, then _exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = trial_child(uid_map, gid_map).unwrap_or(1);
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        return NamespaceTrial::Refused;
    }
    match wait_code(pid) {
        Some(0) => NamespaceTrial::Full,
        Some(2) => NamespaceTrial::NoFreshProc,
        Some(_) | None => NamespaceTrial::Refused,
    }
}

fn trial_child(uid_map: &CStr, gid_map: &CStr) -> io::Result<libc::c_int> {
    // SAFETY: plain syscall.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID) })?;
    write_file(c"/proc/self/setgroups", b"deny")?;
    write_file(c"/proc/self/uid_map", uid_map.to_bytes())?;
    write_file(c"/proc/self/gid_map", gid_map.to_bytes())?;
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
    // SAFETY: as in `try_namespaces`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        let code = match mount(Some(c"proc"), c"/proc", Some(c"proc"), flags, None) {
            Ok(()) => 0,
            Err(_) => 2,
        };
        // SAFETY: _exit never returns.
        unsafe { libc::_exit(code) };
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(wait_code(pid).unwrap_or(1))
}

fn wait_code(pid: libc::pid_t) -> Option<libc::c_int> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let result = unsafe { libc::waitpid(pid, &mut status, 0) };
        if result == pid {
            return libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        }
        if errno() != libc::EINTR {
            return None;
        }
    }
}
