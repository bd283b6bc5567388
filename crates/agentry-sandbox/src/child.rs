//! The child side, between fork and exec: only async-signal-safe syscalls on
//! data prepared in the parent ([`ChildPlan`]). Nothing here allocates.
//!
//! Order: join the pids cgroup (root only) → user+mount+PID namespaces and id
//! maps → mounts → fork. The forked process is pid 1 of the new PID namespace
//! and becomes the command: parent-death signal, fresh `/proc`, rlimits,
//! `no_new_privs`, capabilities dropped, Landlock, seccomp last; then std
//! execs it. The process std spawned (the leader) closes every descriptor,
//! waits for it and exits the same way.

use std::ffi::CStr;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr;

use crate::plan::{ChildPlan, Keep, MAX_KEEPS, MountStep};

type SysResult = io::Result<()>;

/// The `pre_exec` body. Returns in the command process (std then execs it);
/// never returns in the leader.
pub(crate) fn enter(plan: &ChildPlan) -> SysResult {
    if let Some(procs) = &plan.cgroup_procs {
        write_file(procs, b"0\n")?;
    }
    enter_namespaces(plan)?;
    for step in &plan.mounts {
        mount_step(step)?;
    }
    let (alive_read, alive_write) = pipe()?;
    let saved = block_signals()?;
    // SAFETY: fork in a single-threaded child (std's pre_exec runs after its
    // own fork); both sides only make syscalls on prepared data.
    match unsafe { libc::fork() } {
        -1 => {
            let error = io::Error::last_os_error();
            restore_signals(&saved);
            Err(error)
        }
        0 => {
            close(alive_write);
            become_command(plan, alive_read, &saved)
        }
        pid => lead(pid, alive_write),
    }
}

fn enter_namespaces(plan: &ChildPlan) -> SysResult {
    // SAFETY: plain syscall, no memory arguments.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID) })?;
    write_file(c"/proc/self/setgroups", b"deny")?;
    write_file(c"/proc/self/uid_map", plan.uid_map.to_bytes())?;
    write_file(c"/proc/self/gid_map", plan.gid_map.to_bytes())?;
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
}

/// In pid 1 of the call's namespace: confine, then return so std execs.
fn become_command(plan: &ChildPlan, alive_read: libc::c_int, saved: &libc::sigset_t) -> SysResult {
    // SAFETY: plain prctl, integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    // The leader may have died before the parent-death signal was set: its
    // end of the pipe is closed then.
    if leader_gone(alive_read) {
        // SAFETY: _exit never returns and runs no destructors.
        unsafe { libc::_exit(1) };
    }
    close(alive_read);
    restore_signals(saved);
    if plan.fresh_proc {
        let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
        mount(Some(c"proc"), c"/proc", Some(c"proc"), flags, None)?;
    }
    confine(plan)
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

/// The leader: hold nothing, wait for pid 1, exit the way it did.
fn lead(command: libc::pid_t, alive_write: libc::c_int) -> ! {
    reset_signal_handlers();
    let fd = alive_write as libc::c_uint;
    // SAFETY: closing descriptors this process no longer uses (std's spawn
    // pipe and the stdio copies among them); the alive pipe stays open.
    unsafe {
        if fd > 0 {
            libc::close_range(0, fd - 1, 0);
        }
        libc::close_range(fd + 1, libc::c_uint::MAX, 0);
    }
    restore_signals(&empty_sigset());
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let result = unsafe { libc::waitpid(command, &mut status, 0) };
        if result == command {
            break;
        }
        if result == -1 && errno() != libc::EINTR {
            // SAFETY: _exit never returns.
            unsafe { libc::_exit(127) };
        }
    }
    exit_like(status)
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
            libc::_exit(128 + signal)
        }
    }
    // SAFETY: _exit never returns.
    unsafe { libc::_exit(libc::WEXITSTATUS(status)) }
}

fn reset_signal_handlers() {
    for signal in 1..libc::SIGRTMAX() {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // SAFETY: setting the default disposition; no handler pointer.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
    }
}

fn mount_step(step: &MountStep) -> SysResult {
    match step {
        MountStep::Cover { dir, keeps } => cover(dir, keeps),
        MountStep::HideFile { file } => {
            skip_missing(mount(Some(c"/dev/null"), file, None, libc::MS_BIND, None))
        }
        MountStep::ReadOnly { path, locked } => skip_missing(read_only(path, *locked)),
    }
}

fn read_only(path: &CStr, locked: libc::c_ulong) -> SysResult {
    mount(Some(path), path, None, libc::MS_BIND | libc::MS_REC, None)?;
    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | locked;
    mount(None, path, None, flags, None)
}

const COVER_FLAGS: libc::c_ulong = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;

fn cover(dir: &CStr, keeps: &[Keep]) -> SysResult {
    let mut trees: [libc::c_int; MAX_KEEPS] = [-1; MAX_KEEPS];
    for (slot, keep) in trees.iter_mut().zip(keeps) {
        *slot = skip_missing_fd(open_tree(&keep.path))?;
    }
    let covered = mount(
        Some(c"tmpfs"),
        dir,
        Some(c"tmpfs"),
        COVER_FLAGS,
        Some(c"mode=0755,size=16k"),
    );
    let result = match skip_missing(covered) {
        Ok(()) => restore_keeps(dir, keeps, &trees),
        Err(error) => Err(error),
    };
    for tree in trees.iter().filter(|fd| **fd >= 0) {
        close(*tree);
    }
    result
}

fn restore_keeps(dir: &CStr, keeps: &[Keep], trees: &[libc::c_int; MAX_KEEPS]) -> SysResult {
    for (keep, tree) in keeps.iter().zip(trees).filter(|(_, fd)| **fd >= 0) {
        for path in &keep.mkdirs {
            // SAFETY: a prepared NUL-terminated path.
            if unsafe { libc::mkdir(path.as_ptr(), 0o755) } != 0 && errno() != libc::EEXIST {
                return Err(io::Error::last_os_error());
            }
        }
        move_mount(*tree, &keep.path)?;
    }
    let flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | COVER_FLAGS;
    mount(None, dir, None, flags, None)
}

/// A detached copy of the mount tree at `path` (taken before it is covered).
fn open_tree(path: &CStr) -> io::Result<libc::c_int> {
    let flags =
        libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: a prepared NUL-terminated path; flags are constants.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, path.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd as libc::c_int)
}

fn move_mount(tree: libc::c_int, target: &CStr) -> SysResult {
    // SAFETY: `tree` is an open_tree fd; empty path with F_EMPTY_PATH; prepared target.
    let result = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree,
            c"".as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    check(result as libc::c_int)
}

fn mount(
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

fn pipe() -> io::Result<(libc::c_int, libc::c_int)> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` has room for two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    Ok((fds[0], fds[1]))
}

fn leader_gone(alive_read: libc::c_int) -> bool {
    let mut poll = libc::pollfd {
        fd: alive_read,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready != 0
}

fn block_signals() -> io::Result<libc::sigset_t> {
    let mut all = empty_sigset();
    let mut saved = empty_sigset();
    // SAFETY: valid sigset pointers on the stack.
    unsafe {
        libc::sigfillset(&mut all);
        check(libc::sigprocmask(libc::SIG_SETMASK, &all, &mut saved))?;
    }
    Ok(saved)
}

fn restore_signals(saved: &libc::sigset_t) {
    // SAFETY: a valid sigset.
    unsafe { libc::sigprocmask(libc::SIG_SETMASK, saved, ptr::null_mut()) };
}

fn empty_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        set
    }
}

fn close(fd: libc::c_int) {
    // SAFETY: closing a descriptor this process owns.
    unsafe { libc::close(fd) };
}

fn errno() -> libc::c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn check(result: libc::c_int) -> SysResult {
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn skip_missing(result: SysResult) -> SysResult {
    match result {
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        other => other,
    }
}

fn skip_missing_fd(result: io::Result<libc::c_int>) -> io::Result<libc::c_int> {
    match result {
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => Ok(-1),
        other => other,
    }
}

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
