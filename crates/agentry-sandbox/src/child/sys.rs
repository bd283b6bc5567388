//! Thin wrappers over the syscalls the child makes: no allocation.

use std::ffi::CStr;
use std::io;
use std::ptr;

pub(crate) type SysResult = io::Result<()>;

pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> SysResult {
    let pointer = |text: Option<&CStr>| text.map_or(ptr::null(), CStr::as_ptr);
    // SAFETY: prepared NUL-terminated strings or null, as mount(2) allows.
    check(unsafe {
        libc::mount(
            pointer(source),
            target.as_ptr(),
            pointer(fstype),
            flags,
            pointer(data).cast(),
        )
    })
}

/// Writes `bytes` to `path` in one write.
pub(crate) fn write_file(path: &CStr, bytes: &[u8]) -> SysResult {
    // SAFETY: a prepared NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `bytes` is valid for its length; `fd` is open.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let error = io::Error::last_os_error();
    close(fd);
    if written != bytes.len() as isize {
        return Err(error);
    }
    Ok(())
}

pub(crate) fn peer_gone(alive_read: libc::c_int) -> bool {
    let mut poll = libc::pollfd {
        fd: alive_read,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready != 0
}

pub(crate) fn block_signals() -> io::Result<libc::sigset_t> {
    let mut all = empty_sigset();
    let mut saved = empty_sigset();
    // SAFETY: valid sigset pointers on the stack.
    unsafe {
        libc::sigfillset(&mut all);
        check(libc::sigprocmask(libc::SIG_SETMASK, &all, &mut saved))?;
    }
    Ok(saved)
}

pub(crate) fn restore_signals(saved: &libc::sigset_t) {
    // SAFETY: a valid sigset.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, saved, ptr::null_mut()) };
}

pub(crate) fn empty_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}

pub(crate) fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor this process owns.
    unsafe { libc::close(fd) };
}

pub(crate) fn errno() -> libc::c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn check(result: libc::c_int) -> SysResult {
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub(crate) fn skip_missing(result: SysResult) -> SysResult {
    match result {
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

pub(crate) fn skip_missing_fd(result: io::Result<libc::c_int>) -> io::Result<libc::c_int> {
    match result {
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(-1),
        other => other,
    }
}
