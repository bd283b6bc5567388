//! The child side, between fork and exec: only async-signal-safe syscalls on
//! data prepared in the parent ([`ChildPlan`]). Nothing here allocates.
//!
//! Three processes per call. The **leader** (the process std spawned, so
//! the one the host waits for and signals) makes the user and PID namespaces
//! and forks the call's **init** (pid 1 of the new PID namespace), which
//! makes the mount namespace and the mounts and forks the **command** (pid
//! 2): the pids cgroup (root only), rlimits, `no_new_privs`, capabilities
//! dropped, Landlock, seccomp last, then std execs it. The command is not
//! pid 1, so its signals behave as usual (`kill -TERM $$` kills it). Init
//! reaps; when the command exits it kills and reaps everything left in the
//! namespace (`setsid` or not), passes the command's wait status to the
//! leader and exits. The leader exits the same way as the command (dies of
//! the same signal) without waiting for the namespaces' teardown. If the
//! leader dies first (killed by the host), init gets SIGKILL from the
//! parent-death signal and the kernel kills the namespace with it.

mod mounts;
mod sys;
mod trial;

use std::io;
use std::os::fd::AsRawFd;

use crate::plan::ChildPlan;

pub(crate) use trial::{NamespaceTrial, try_namespaces};

use sys::{
    SysResult, block_signals, check, close, empty_sigset, errno, mount, peer_gone, pipe,
    restore_signals, write_file,
};

/// The pipes between the leader and init.
#[derive(Clone, Copy)]
struct Pipes {
    /// Init polls it: closed means the leader is gone.
    alive: (libc::c_int, libc::c_int),
    /// Init writes the command's wait status; the leader reads it.
    status: (libc::c_int, libc::c_int),
}

/// The `pre_exec` body. Returns only in the command process (std then execs
/// it); the leader and init never return.
pub(crate) fn enter(plan: &ChildPlan) -> SysResult {
    enter_namespaces(plan)?;
    let pipes = Pipes {
        alive: pipe()?,
        status: pipe()?,
    };
    let saved = block_signals()?;
    match fork() {
        Err(error) => {
            restore_signals(&saved);
            Err(error)
        }
        Ok(0) => init(plan, pipes, &saved),
        Ok(init_pid) => {
            close(pipes.alive.0);
            close(pipes.status.1);
            lead(init_pid, pipes)
        }
    }
}

/// The user and PID namespaces, in the leader. The mount namespace is
/// init's alone, so tearing it down is not on the way to the leader's exit.
fn enter_namespaces(plan: &ChildPlan) -> SysResult {
    // SAFETY: plain syscall, no memory arguments.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) })?;
    write_file(c"/proc/self/setgroups", b"deny")?;
    write_file(c"/proc/self/uid_map", plan.uid_map.to_bytes())?;
    write_file(c"/proc/self/gid_map", plan.gid_map.to_bytes())
}

/// In init: the mount namespace and the call's mounts.
fn make_mounts(plan: &ChildPlan) -> SysResult {
    // SAFETY: plain syscall; init holds every capability in the call's user namespace.
    check(unsafe { libc::unshare(libc::CLONE_NEWNS) })?;
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
    for step in &plan.mounts {
        mounts::mount_step(step)?;
    }
    reenter_cwd()?;
    if plan.fresh_proc {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        mount(Some(c"proc"), c"/proc", Some(c"proc"), flags, None)?;
    }
    Ok(())
}

/// std set the working directory before `pre_exec`: it still points at the
/// directory under the mounts just made (a `.git` bound read-only on top
/// would not apply through it). Resolving its path again lands on top.
fn reenter_cwd() -> SysResult {
    let mut path = [0u8; libc::PATH_MAX as usize];
    // SAFETY: the buffer is valid for its length; the kernel NUL-terminates.
    let length = unsafe { libc::syscall(libc::SYS_getcwd, path.as_mut_ptr(), path.len()) };
    if length <= 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getcwd wrote a NUL-terminated path into `path`.
    check(unsafe { libc::chdir(path.as_ptr().cast()) })
}

/// Pid 1 of the call's namespace: fork the command, reap, report, exit.
fn init(plan: &ChildPlan, pipes: Pipes, saved: &libc::sigset_t) -> SysResult {
    close(pipes.alive.1);
    close(pipes.status.0);
    // SAFETY: plain prctl, integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    // The leader may have died before the parent-death signal was set.
    if peer_gone(pipes.alive.0) {
        exit(1);
    }
    close(pipes.alive.0);
    make_mounts(plan)?;
    match fork()? {
        0 => {
            close(pipes.status.1);
            restore_signals(saved);
            // Only the command's tree is in the call's cgroup: it is empty
            // once init has reaped it, before the leader exits.
            if let Some(procs) = &plan.cgroup_procs {
                write_file(procs, b"0\n")?;
            }
            confine(plan)
        }
        command => reap(command, pipes.status.1),
    }
}

fn confine(plan: &ChildPlan) -> SysResult {
    for limit in &plan.rlimits {
        let value = libc::rlimit {
            rlim_cur: limit.value,
            rlim_max: limit.value,
        };
        // SAFETY: `value` is a valid rlimit on the stack.
        check(unsafe { libc::setrlimit(limit.resource, &value) })?;
    }
    // SAFETY: plain prctl, integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    drop_capabilities()?;
    // SAFETY: the ruleset fd is open (owned by the plan); flags 0.
    check(unsafe {
        libc::syscall(
            libc::SYS_landlock_restrict_self,
            plan.landlock.as_raw_fd(),
            0,
        ) as libc::c_int
    })?;
    for filter in plan.filters.iter() {
        seccompiler::apply_filter(filter).map_err(|_| io::Error::last_os_error())?;
    }
    Ok(())
}

/// Empties the bounding and ambient sets so the command (uid 0 inside the
/// namespace when agentry runs as root) gets no capabilities at exec.
fn drop_capabilities() -> SysResult {
    for capability in 0..64 {
        // SAFETY: plain prctl; EINVAL past the kernel's last capability is expected.
        let result = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) };
        if result != 0 && errno() != libc::EINVAL {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: plain prctl, integer arguments.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    })
}

/// Init's loop: reap every child (orphans land here) until the command
/// exits; then kill and reap everything left in the namespace, hand the
/// command's status to the leader and exit.
fn reap(command: libc::pid_t, status_write: libc::c_int) -> ! {
    settle(&[status_write]);
    name_self(c"sandbox-init");
    let status = loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == command {
            break status;
        }
        if pid == -1 && errno() != libc::EINTR {
            exit(127);
        }
    };
    // Everything left in the namespace descends from init now (orphans are
    // re-parented here), so no child means nothing left: kill(-1) walks every
    // process of the machine, skip it then.
    // SAFETY: a null status pointer is allowed; WNOHANG never blocks.
    let left = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
    if left >= 0 || errno() != libc::ECHILD {
        // SAFETY: from init, -1 is every other process of the call's namespace.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        // SAFETY: a null status pointer is allowed; ends at ECHILD.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 || errno() == libc::EINTR {}
    }
    let bytes = status.to_ne_bytes();
    // SAFETY: `bytes` is valid for its length; the fd is open.
    unsafe { libc::write(status_write, bytes.as_ptr().cast(), bytes.len()) };
    exit(0)
}

/// The leader: exit the way the command did as soon as init reports it
/// (everything else in the namespace is gone by then); if init died without
/// a report, the way init did.
fn lead(init_pid: libc::pid_t, pipes: Pipes) -> ! {
    settle(&[pipes.alive.1, pipes.status.0]);
    name_self(c"sandbox-leader");
    let mut bytes = [0u8; 4];
    loop {
        // SAFETY: `bytes` is valid for its length; the fd is open.
        let read = unsafe { libc::read(pipes.status.0, bytes.as_mut_ptr().cast(), bytes.len()) };
        match read {
            4 => exit_like(libc::c_int::from_ne_bytes(bytes)),
            -1 if errno() == libc::EINTR => continue,
            _ => exit_like(wait_for(init_pid)),
        }
    }
}

/// Default signal dispositions (the host's handlers are meaningless here),
/// every descriptor closed but `keep` (std's spawn pipe and the stdio copies
/// among them), signals unblocked.
fn settle(keep: &[libc::c_int]) {
    for signal in 1..libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: setting the default disposition; no handler pointer.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
    let mut first: libc::c_uint = 0;
    let mut sorted = [libc::c_int::MAX; 2];
    for (slot, fd) in sorted.iter_mut().zip(keep) {
        *slot = *fd;
    }
    sorted.sort_unstable();
    for fd in sorted.iter().filter(|fd| **fd != libc::c_int::MAX) {
        let fd = *fd as libc::c_uint;
        if fd > first {
            // SAFETY: closing descriptors this process no longer uses.
            unsafe { libc::close_range(first, fd - 1, 0) };
        }
        first = fd + 1;
    }
    // SAFETY: as above.
    unsafe { libc::close_range(first, libc::c_uint::MAX, 0) };
    restore_signals(&empty_sigset());
}

/// A name `ps` shows instead of the host's (both are copies of it).
fn name_self(name: &std::ffi::CStr) {
    // SAFETY: a NUL-terminated name of at most 15 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}

fn wait_for(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let result = unsafe { libc::waitpid(pid, &mut status, 0) };
        if result == pid {
            return status;
        }
        if result == -1 && errno() != libc::EINTR {
            exit(127);
        }
    }
}

fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain syscalls: no core dump of this copy of the host,
        // default action for the signal, then deliver it to ourselves.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
        }
        exit(128 + signal);
    }
    exit(libc::WEXITSTATUS(status))
}

fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: fork in a single-threaded process (std's pre_exec runs after
    // its own fork); both sides only make syscalls on prepared data.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit never returns and runs no destructors or atexit handlers.
    unsafe { libc::_exit(code) }
}
