//! `host:port` grants, enforced in the call's init: the command's every
//! `connect` stops in the kernel (a seccomp user notification) until init
//! answers. For a TCP socket init reads the address from the caller's
//! memory, refuses one not granted (`EACCES`, as Landlock refuses a port),
//! and otherwise connects the caller's own socket itself (a duplicate of its
//! descriptor: the same socket, options and blocking mode) to the address it
//! checked — never to what the caller's memory holds by then, so a thread
//! that rewrites the address after the check connects nowhere new. Any other
//! socket (`AF_UNIX`) goes on in the caller, under its Landlock domain: an
//! address rewritten to an IP one cannot connect a Unix socket.
//!
//! Init runs this between fork and exec rules: syscalls on the stack only.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::plan::ChildPlan;

use super::sys::{SysResult, check, close, errno};

/// What init answers one notification with.
enum Answer {
    /// The call goes on in the caller.
    Continue,
    /// The call's result: 0, or an errno.
    Result(libc::c_int),
    /// The caller is gone: nothing to answer.
    Gone,
}

/// Installs the connect program with a listener; returns the listener.
pub(super) fn install(plan: &ChildPlan) -> io::Result<Option<libc::c_int>> {
    let Some(guard) = &plan.connect else {
        return Ok(None);
    };
    let program = libc::sock_fprog {
        len: guard.program.len() as libc::c_ushort,
        filter: guard.program.as_ptr().cast_mut().cast(),
    };
    // SAFETY: a valid program the plan owns; the kernel copies it.
    let listener = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &program,
        )
    };
    if listener < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some(listener as libc::c_int))
}

/// Answers one notification waiting on `listener`.
pub(super) fn answer_one(listener: libc::c_int, allowed: &[SocketAddr]) {
    // SAFETY: plain data; the kernel wants it zeroed.
    let mut request: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `request` is a valid seccomp_notif out-pointer.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut request) } != 0 {
        return;
    }
    let answer = decide(listener, &request, allowed);
    // SAFETY: plain data.
    let mut response: libc::seccomp_notif_resp = unsafe { std::mem::zeroed() };
    response.id = request.id;
    match answer {
        Answer::Gone => return,
        Answer::Continue => response.flags = libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
        Answer::Result(0) => {}
        Answer::Result(error) => {
            response.error = -error;
            response.val = -1;
        }
    }
    // SAFETY: `response` is a valid seccomp_notif_resp; a caller gone since is ENOENT.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut response) };
}

fn decide(listener: libc::c_int, request: &libc::seccomp_notif, allowed: &[SocketAddr]) -> Answer {
    let Ok(caller) = open_caller(request.pid) else {
        return Answer::Gone;
    };
    let answer = decide_for(listener, caller, request, allowed);
    close(caller);
    answer
}

fn decide_for(
    listener: libc::c_int,
    caller: libc::c_int,
    request: &libc::seccomp_notif,
    allowed: &[SocketAddr],
) -> Answer {
    let fd = request.data.args[0] as libc::c_int;
    // SAFETY: plain syscall: a duplicate of the caller's descriptor `fd`.
    let socket = unsafe { libc::syscall(libc::SYS_pidfd_getfd, caller, fd, 0) } as libc::c_int;
    if socket < 0 {
        return Answer::Result(errno());
    }
    let answer = match domain(socket) {
        Some(libc::AF_INET | libc::AF_INET6) => connect_checked(listener, socket, request, allowed),
        Some(_) | None => Answer::Continue,
    };
    close(socket);
    answer
}

/// A TCP socket's connect: the address copied from the caller, checked,
/// and connected by init.
fn connect_checked(
    listener: libc::c_int,
    socket: libc::c_int,
    request: &libc::seccomp_notif,
    allowed: &[SocketAddr],
) -> Answer {
    // SAFETY: plain data.
    let mut address: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let wanted = (request.data.args[2] as usize).min(std::mem::size_of_val(&address));
    let local = libc::iovec {
        iov_base: std::ptr::from_mut(&mut address).cast(),
        iov_len: wanted,
    };
    let remote = libc::iovec {
        iov_base: request.data.args[1] as *mut libc::c_void,
        iov_len: wanted,
    };
    // SAFETY: one local iovec into `address`, one remote iovec the kernel checks.
    let read =
        unsafe { libc::process_vm_readv(request.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if read < 0 {
        return Answer::Result(libc::EFAULT);
    }
    // The caller still waits for this very notification (its memory was its own).
    let mut id = request.id;
    // SAFETY: a valid u64 in-pointer.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &mut id) } != 0 {
        return Answer::Gone;
    }
    let length = read as libc::socklen_t;
    if let Some(target) = socket_addr(&address, length)
        && !granted(target, allowed)
    {
        return Answer::Result(libc::EACCES);
    }
    // SAFETY: `address` holds `length` bytes read above.
    let result = unsafe { libc::connect(socket, std::ptr::from_ref(&address).cast(), length) };
    Answer::Result(if result == 0 { 0 } else { errno() })
}

/// An IP address and port, when the copy holds one (else the kernel's own
/// connect answers: an unspecified family disconnects, a short one is EINVAL).
fn socket_addr(address: &libc::sockaddr_storage, length: libc::socklen_t) -> Option<SocketAddr> {
    let length = length as usize;
    match libc::c_int::from(address.ss_family) {
        libc::AF_INET if length >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let v4 = unsafe { &*std::ptr::from_ref(address).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(v4.sin_port)))
        }
        libc::AF_INET6 if length >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let v6 = unsafe { &*std::ptr::from_ref(address).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::new(IpAddr::V6(ip), u16::from_be(v6.sin6_port)))
        }
        _ => None,
    }
}

/// Granted: the same port at one of the grant's addresses (an IPv4 address
/// also as IPv6-mapped).
fn granted(target: SocketAddr, allowed: &[SocketAddr]) -> bool {
    let ip = match target.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    };
    allowed
        .iter()
        .any(|grant| grant.port() == target.port() && grant.ip() == ip)
}

/// A pidfd for the calling thread (the notification names a thread).
/// `PIDFD_THREAD` is Linux 6.9; the Landlock ABI the sandbox requires (6)
/// is 6.10, as are user notifications' `CONTINUE` and `pidfd_getfd`.
fn open_caller(tid: u32) -> io::Result<libc::c_int> {
    // SAFETY: plain syscall, no memory arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, tid, PIDFD_THREAD) } as libc::c_int;
    check(fd).map(|()| fd)
}

/// `PIDFD_THREAD` (`O_EXCL`): a pidfd for one thread.
const PIDFD_THREAD: libc::c_int = libc::O_EXCL;

fn domain(socket: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid int out-pointer and its length.
    let result = unsafe {
        libc::getsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            std::ptr::from_mut(&mut value).cast(),
            &mut length,
        )
    };
    (result == 0).then_some(value)
}

/// Init's loop with a listener: answer notifications and reap children
/// until the command exits; its wait status.
pub(super) fn supervise(
    command: libc::pid_t,
    listener: libc::c_int,
    children: libc::c_int,
    allowed: &[SocketAddr],
) -> io::Result<libc::c_int> {
    let mut polled = [
        libc::pollfd {
            fd: children,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: listener,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        if let Some(status) = reap_ready(command)? {
            return Ok(status);
        }
        // SAFETY: two valid pollfds; no timeout.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) };
        if ready < 0 && errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
        if polled[0].revents & libc::POLLIN != 0 {
            drain(children);
        }
        let listened = polled[1].revents;
        if listened & libc::POLLIN != 0 {
            answer_one(listener, allowed);
        } else if listened & (libc::POLLHUP | libc::POLLERR) != 0 {
            // No process holds the filter any more.
            polled[1].fd = -1;
        }
    }
}

/// Reaps what has exited; the command's status once it has.
fn reap_ready(command: libc::pid_t) -> io::Result<Option<libc::c_int>> {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; WNOHANG never blocks.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        match pid {
            0 => return Ok(None),
            pid if pid == command => return Ok(Some(status)),
            pid if pid > 0 => continue,
            _ if errno() == libc::EINTR => continue,
            _ => return Err(io::Error::last_os_error()),
        }
    }
}

/// Empties the signalfd (its content is only a wake-up).
fn drain(children: libc::c_int) {
    let mut buffer = [0u8; 512];
    // SAFETY: `buffer` is valid for its length; the signalfd is non-blocking.
    while unsafe { libc::read(children, buffer.as_mut_ptr().cast(), buffer.len()) } > 0 {}
}

/// A non-blocking signalfd for SIGCHLD, which init has blocked.
pub(super) fn child_signals() -> io::Result<libc::c_int> {
    // SAFETY: plain data; sigemptyset/sigaddset initialise it.
    let fd = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC)
    };
    check(fd).map(|()| fd)
}

/// Blocks SIGCHLD (for the signalfd), before the command is started.
pub(super) fn block_child_signals() -> SysResult {
    // SAFETY: plain data; valid sigset pointers.
    check(unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    })
}
