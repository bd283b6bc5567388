//! The call's mounts, made by the leader in the call's mount namespace.

use std::ffi::CStr;
use std::io;

use crate::plan::{Keep, MAX_KEEPS, MountStep, PrivateShm};

use super::sys::{SysResult, check, close, errno, mount, skip_missing, skip_missing_fd};

/// Makes one planned mount.
pub(super) fn mount_step(step: &MountStep) -> SysResult {
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

/// `struct landlock_path_beneath_attr` (packed, as the kernel's).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;

/// A fresh tmpfs over `/dev/shm`, and a rule in the call's ruleset (not yet
/// enforced: the command restricts itself later) letting the command write
/// beneath it. No `/dev/shm`: nothing to do.
pub(super) fn private_shm(shm: &PrivateShm, ruleset: libc::c_int) -> SysResult {
    let flags = libc::MS_NOSUID | libc::MS_NODEV;
    let mounted = mount(
        Some(c"tmpfs"),
        c"/dev/shm",
        Some(c"tmpfs"),
        flags,
        Some(&shm.options),
    );
    if let Err(error) = &mounted
        && error.raw_os_error() == Some(libc::ENOENT)
    {
        return Ok(());
    }
    mounted?;
    // SAFETY: a NUL-terminated path; O_PATH opens no content.
    let dir = unsafe { libc::open(c"/dev/shm".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    check(dir)?;
    let rule = PathBeneathAttr {
        allowed_access: shm.rights,
        parent_fd: dir,
    };
    // SAFETY: a valid rule for the ruleset descriptor the plan owns; flags 0.
    let added = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            std::ptr::from_ref(&rule),
            0,
        )
    };
    close(dir);
    check(added as libc::c_int)
}
