//! The child side, between fork and exec: only async-signal-safe syscalls on
//! data prepared in the parent ([`ChildPlan`], [`ExecPlan`]). Nothing here
//! allocates.
//!
//! Three processes per call, one copy of the host's address space (std's
//! fork). The **leader** (the process std spawned, so the one the host waits
//! for and signals) makes the user and PID namespaces, resets every signal
//! handler it copied from the host, and starts the call's **init** (pid 1 of
//! the new PID namespace) as a `vfork`-style clone on a stack of its own
//! (`vfork.rs`): init runs in the leader's memory and descriptor table while
//! the leader sleeps in the kernel. Init makes the mount namespace and the
//! mounts and starts the **command** (pid 2) the same way, in init's memory
//! until it execs: the pids cgroup (root only), rlimits, `no_new_privs`,
//! capabilities dropped, Landlock, seccomp last, then `execve` along the
//! command's `PATH`. The command is not pid 1, so its signals behave as usual
//! (`kill -TERM $$` kills it). Init wakes at the exec, closes every
//! descriptor of the table it shares with the leader (std's spawn pipe, the
//! stdio copies) and reaps; when the command exits it kills and reaps
//! everything left in the namespace (`setsid` or not), leaves the command's
//! wait status in memory the leader reads, and exits; the leader wakes and
//! exits the same way as the command (dies of the same signal), without
//! waiting for the namespaces' teardown. A command that could not be set up
//! or exec'd leaves its errno instead: the leader returns it to std, whose
//! `spawn` fails with it. If the leader dies first (killed by the host: the
//! vfork sleep is killable), init gets SIGKILL from the parent-death signal
//! and the kernel kills the namespace with it.

mod connect;
mod mounts;
mod sys;
mod trial;
mod vfork;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::plan::{ChildPlan, ExecPlan};

pub(crate) use trial::{NamespaceTrial, try_namespaces};

use sys::{
    SysResult, block_signals, check, close, errno, mount, peer_gone, restore_signals, write_file,
};
use vfork::Stack;

/// What init and the command leave for the leader, in the memory the three
/// share (on the leader's stack: init and the command run on stacks of their own).
struct Report {
    /// The command's wait status, [`NO_STATUS`] until init has one.
    status: AtomicI32,
    /// The errno of a failed set-up or exec (0: none); the leader returns it to std.
    error: AtomicI32,
    /// Signals the host ignored (bit `n - 1` for signal `n`): the command
    /// keeps them ignored, as it would without the sandbox.
    ignored: AtomicU64,
    /// With `host:port` grants: the command's seccomp listener (-1: none), in
    /// the descriptor table it shares with init until it execs.
    listener: AtomicI32,
}

/// A wait status is 16 bits: never this.
const NO_STATUS: i32 = i32::MIN;

/// What init works with.
struct Call<'a> {
    plan: &'a ChildPlan,
    exec: &'a ExecPlan,
    report: &'a Report,
    /// The command's stack, mapped by the leader.
    stack: &'a Stack,
}

/// The `pre_exec` body. Returns only with the set-up's error, in the
/// leader (std reports it as the spawn's); the leader otherwise exits as the
/// command did, and init and the command never return.
pub(crate) fn enter(plan: &ChildPlan, exec: &ExecPlan) -> SysResult {
    enter_namespaces(plan)?;
    // SAFETY: pidfd_open of this process, no memory arguments.
    let leader = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if leader < 0 {
        return Err(io::Error::last_os_error());
    }
    let report = Report {
        status: AtomicI32::new(NO_STATUS),
        error: AtomicI32::new(0),
        ignored: AtomicU64::new(0),
        listener: AtomicI32::new(-1),
    };
    let saved = block_signals()?;
    report
        .ignored
        .store(default_dispositions(), Ordering::SeqCst);
    restore_signals(&saved);
    name_self(c"sandbox-leader");
    let init_stack = Stack::map()?;
    let call = Call {
        plan,
        exec,
        report: &report,
        stack: &Stack::map()?,
    };
    let leader = leader as libc::c_int;
    vfork::spawn(&init_stack, libc::CLONE_FILES, &mut || init(&call, leader))?;
    lead(&report)
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

/// Every handler copied from the host back to the default (a copy of the
/// host's handler must not run here, and the leader must die of the host's
/// SIGTERM), with signals blocked. The signals the host ignored, as a mask.
fn default_dispositions() -> u64 {
    let mut ignored = 0u64;
    for signal in 1..libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: setting the default disposition; no handler pointer.
        if unsafe { libc::signal(signal, libc::SIG_DFL) } == libc::SIG_IGN {
            ignored |= 1 << (signal - 1);
        }
    }
    ignored
}

/// The leader, once init is gone: the set-up's error, or exit the way the
/// command did (everything else in the namespace is gone by then); if init
/// died without a report, the way init did.
fn lead(report: &Report) -> SysResult {
    let error = report.error.load(Ordering::SeqCst);
    if error != 0 {
        return Err(io::Error::from_raw_os_error(error));
    }
    match report.status.load(Ordering::SeqCst) {
        NO_STATUS => exit_like(wait_for_init()),
        status => exit_like(status),
    }
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
    if let Some(shm) = &plan.shm {
        mounts::private_shm(shm, plan.landlock.as_raw_fd())?;
    }
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

/// Pid 1 of the call's namespace, in the leader's memory: the mounts, then
/// start the command, reap, report, exit.
fn init(call: &Call, leader: libc::c_int) -> libc::c_int {
    if let Err(error) = set_up_init(call.plan, leader) {
        fail(call.report, &error)
    }
    // With grants, init answers the command's connects: their listener is
    // made in the command, in the table they share until it execs.
    let shared = match call.plan.connect {
        Some(_) => libc::CLONE_FILES,
        None => 0,
    };
    let started = vfork::spawn(call.stack, shared, &mut || command(call));
    match started {
        Err(error) => fail(call.report, &error),
        // The command could not be confined or exec'd: it left its errno.
        Ok(pid) if call.report.error.load(Ordering::SeqCst) != 0 => {
            wait_for(pid);
            exit(1)
        }
        Ok(pid) => reap(pid, call),
    }
}

/// Init's set-up failed before any command ran: the leader returns `error` to std.
fn fail(report: &Report, error: &io::Error) -> ! {
    let errno = error.raw_os_error().unwrap_or(libc::EIO);
    report.error.store(errno, Ordering::SeqCst);
    exit(1)
}

/// The command, in init's memory until it execs: confined, then exec'd, or
/// its errno left for the leader.
fn command(call: &Call) -> libc::c_int {
    let error = match set_up_command(call) {
        Ok(()) => exec(call.exec),
        Err(error) => error.raw_os_error().unwrap_or(libc::EIO),
    };
    call.report.error.store(error, Ordering::SeqCst);
    exit(127)
}

fn set_up_command(call: &Call) -> SysResult {
    keep_ignored(call.report.ignored.load(Ordering::SeqCst))?;
    if call.plan.connect.is_some() {
        restore_signals(&sys::empty_sigset());
    }
    // Only the command's tree is in the call's cgroup: it is empty once init
    // has reaped it, before the leader exits.
    if let Some(procs) = &call.plan.cgroup_procs {
        write_file(procs, b"0\n")?;
    }
    confine(call.plan, call.report)
}

/// `execvp`'s search over the prepared paths; returns only its errno: a
/// refusal (`EACCES`) wins over a missing file, as with `execvp`.
fn exec(exec: &ExecPlan) -> libc::c_int {
    let mut refused = false;
    let mut last = libc::ENOENT;
    for path in &exec.candidates {
        // SAFETY: NUL-terminated path; null-terminated argv and envp arrays
        // of NUL-terminated strings the plan owns.
        unsafe { libc::execve(path.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr()) };
        last = errno();
        match last {
            libc::EACCES => refused = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return last,
        }
    }
    if refused { libc::EACCES } else { last }
}

/// The parent-death signal (and whether the leader already died), the
/// mount namespace and the mounts.
fn set_up_init(plan: &ChildPlan, leader: libc::c_int) -> SysResult {
    // SAFETY: plain prctl, integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
    // The leader may have been killed before the parent-death signal was set:
    // its pidfd is then readable.
    if peer_gone(leader) {
        exit(1);
    }
    close(leader);
    if plan.connect.is_some() {
        connect::block_child_signals()?;
    }
    make_mounts(plan)
}

/// The host's ignored signals stay ignored in the command (the leader reset them).
fn keep_ignored(ignored: u64) -> SysResult {
    for signal in 1..=64 {
        if ignored & (1 << (signal - 1)) != 0 {
            // SAFETY: setting SIG_IGN; no handler pointer.
            if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

fn confine(plan: &ChildPlan, report: &Report) -> SysResult {
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
    if let Some(listener) = connect::install(plan)? {
        report.listener.store(listener, Ordering::SeqCst);
    }
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
/// exits; then kill and reap everything left in the namespace, leave the
/// command's status for the leader and exit (which wakes the leader).
fn reap(command: libc::pid_t, call: &Call) -> ! {
    let listener = call.report.listener.load(Ordering::SeqCst);
    close_shared(listener);
    name_self(c"sandbox-init");
    let status = match &call.plan.connect {
        Some(guard) if listener >= 0 => {
            let children = connect::child_signals().unwrap_or_else(|_| exit(127));
            connect::supervise(command, listener, children, &guard.allowed)
                .unwrap_or_else(|_| exit(127))
        }
        Some(_) | None => reap_until(command),
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
    call.report.status.store(status, Ordering::SeqCst);
    exit(0)
}

/// Reaps every child (orphans land here) until the command exits; its status.
fn reap_until(command: libc::pid_t) -> libc::c_int {
    loop {
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, 0) };
        if pid == command {
            return status;
        }
        if pid == -1 && errno() != libc::EINTR {
            exit(127);
        }
    }
}

/// Closes the table init shares with the leader (std's spawn pipe and the
/// stdio copies close for both, so the host sees them close when the
/// command's do), but the listener.
fn close_shared(listener: libc::c_int) {
    // SAFETY: closing descriptors neither process uses any more.
    unsafe {
        if listener > 0 {
            libc::close_range(0, listener as libc::c_uint - 1, 0);
            libc::close_range(listener as libc::c_uint + 1, libc::c_uint::MAX, 0);
        } else {
            libc::close_range(0, libc::c_uint::MAX, 0);
        }
    }
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
        let result = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if result == pid {
            return status;
        }
        if result == -1 && errno() != libc::EINTR {
            exit(127);
        }
    }
}

/// Init's own wait status (it died without a report): the leader's only child.
fn wait_for_init() -> libc::c_int {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let result = unsafe { libc::waitpid(-1, &mut status, libc::__WALL) };
        if result > 0 {
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

fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit never returns and runs no destructors or atexit handlers.
    unsafe { libc::_exit(code) }
}
