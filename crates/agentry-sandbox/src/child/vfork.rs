//! `vfork`-style clones onto a stack of their own, the way glibc's
//! `posix_spawn` starts a child: the child runs a function on a fresh stack
//! in the caller's memory (no copy of the page tables, no copy-on-write
//! faults afterwards) while the caller sleeps in the kernel until the child
//! execs or exits. The child never returns into the caller's frames, so
//! nothing the caller keeps on its own stack is overwritten.

use std::io;

/// Bytes of stack for each child (touched pages only; the rest is never backed).
const STACK_BYTES: usize = 256 * 1024;

/// A stack for one clone child, mapped in the calling process and never
/// unmapped: it lives as long as the process that maps it (the call's
/// leader), which is shorter than the call.
pub(super) struct Stack {
    top: *mut libc::c_void,
}

impl Stack {
    pub(super) fn map() -> io::Result<Stack> {
        // SAFETY: an anonymous private mapping; no file, no fixed address.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: one past the end of the mapping; stacks grow down on every
        // architecture this crate builds the child for.
        let top = unsafe { base.cast::<u8>().add(STACK_BYTES) }.cast();
        Ok(Stack { top })
    }
}

/// Starts `run` in a child sharing this process's memory (and, with
/// `CLONE_FILES` in `extra`, its descriptor table) on `stack`, and returns
/// the child's pid once the child has exec'd or exited. `run`'s return value
/// is the child's exit code.
pub(super) fn spawn(
    stack: &Stack,
    extra: libc::c_int,
    run: &mut dyn FnMut() -> libc::c_int,
) -> io::Result<libc::pid_t> {
    let mut run = run;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | extra;
    // SAFETY: `trampoline` gets a pointer to `run`, which outlives the child's
    // use of it (the caller sleeps until the child execs or exits); the child
    // runs on `stack`, never on the caller's.
    let pid = unsafe {
        libc::clone(
            trampoline,
            stack.top,
            flags,
            std::ptr::from_mut(&mut run).cast(),
        )
    };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `spawn` passes a pointer to a live `&mut dyn FnMut`.
    let run = unsafe { &mut *arg.cast::<&mut dyn FnMut() -> libc::c_int>() };
    run()
}
