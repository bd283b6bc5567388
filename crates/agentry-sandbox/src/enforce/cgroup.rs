//! Running as root, the kernel never applies `RLIMIT_NPROC` (uid 0 is exempt),
//! so each call gets a pids cgroup of its own: joined by the command (its
//! tree only, so it is empty once init has reaped it). An empty one is kept
//! for the sandbox's next call (making and removing a cgroup costs more than
//! the rest of a call's set-up); a busy one, or one past the pool's size, is
//! removed.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::error::SandboxError;

/// This process's pids cgroup directory, when it is writable: cgroup v1's
/// `pids` hierarchy, or v2 where `pids` is enabled for children.
pub(super) fn pids_parent() -> Option<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    let membership = fs::read_to_string("/proc/self/cgroup").ok()?;
    let dir = v1_dir(&mounts, &membership).or_else(|| v2_dir(&mounts, &membership))?;
    // A name no earlier process can have left behind: a host killed between
    // making and removing its probe leaves it, and pids are reused.
    let probe = dir.join(format!(
        "{PROBE_PREFIX}{}-{}",
        std::process::id(),
        random_suffix()
    ));
    fs::create_dir(&probe).ok()?;
    let usable = probe.join("pids.max").exists() && probe.join("cgroup.procs").exists();
    let _ = fs::remove_dir(&probe);
    if usable {
        static SWEPT: std::sync::Once = std::sync::Once::new();
        SWEPT.call_once(|| sweep_dead_hosts(&dir));
    }
    usable.then_some(dir)
}

/// Removes the empty call and probe cgroups left by host processes that are
/// gone (a cgroup still busy when its host exited, or a probe made just before
/// its host was killed, is removed by no one else). Each name carries its
/// host's pid; a live host's, or a reused pid's, is left.
fn sweep_dead_hosts(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(host_pid) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the pid exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// Call cgroups are named `agentry-call-<host pid>-<random>`.
const CALL_PREFIX: &str = "agentry-call-";
/// Probes are named `agentry-probe-<host pid>-<random>` (`agentry-probe-<host
/// pid>` before the suffix was added; those are swept too).
const PROBE_PREFIX: &str = "agentry-probe-";

/// The host pid in a call or probe cgroup's name.
fn host_pid(name: &str) -> Option<libc::pid_t> {
    let rest = name
        .strip_prefix(CALL_PREFIX)
        .or_else(|| name.strip_prefix(PROBE_PREFIX))?;
    let pid = rest.split_once('-').map_or(rest, |(pid, _)| pid);
    pid.parse().ok()
}

fn random_suffix() -> String {
    (0..12).map(|_| fastrand::alphanumeric()).collect()
}

fn v1_dir(mounts: &str, membership: &str) -> Option<PathBuf> {
    let mount_point = mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, point, "cgroup", options, ..] if options.split(',').any(|o| o == "pids") => {
                Some(*point)
            }
            _ => None,
        }
    })?;
    let relative = membership.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers.split(',').any(|c| c == "pids").then_some(path)
    })?;
    Some(Path::new(mount_point).join(relative.trim_start_matches('/')))
}

fn v2_dir(mounts: &str, membership: &str) -> Option<PathBuf> {
    let mount_point = mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, point, "cgroup2", ..] => Some(*point),
            _ => None,
        }
    })?;
    let relative = membership
        .lines()
        .find_map(|line| line.strip_prefix("0::"))?;
    let dir = Path::new(mount_point).join(relative.trim_start_matches('/'));
    let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).ok()?;
    enabled
        .split_whitespace()
        .any(|c| c == "pids")
        .then_some(dir)
}

/// Most empty call cgroups one sandbox keeps (about as many as calls run at once).
const MAX_IDLE: usize = 32;

/// One sandbox's call cgroups, each with room for `processes`.
#[derive(Debug)]
pub(super) struct CgroupPool {
    parent: PathBuf,
    processes: u64,
    /// Empty cgroups, `pids.max` set, no process in them.
    idle: Mutex<Vec<PathBuf>>,
}

impl CgroupPool {
    pub(super) fn new(parent: PathBuf, processes: u64) -> Self {
        CgroupPool {
            parent,
            processes,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// An empty cgroup for one call.
    pub(super) fn take(&self) -> Result<PathBuf, SandboxError> {
        let idle = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        match idle {
            Some(dir) => Ok(dir),
            None => make_call_cgroup(&self.parent, self.processes),
        }
    }

    /// The call is over: keep its cgroup if no process is left in it (none
    /// can join an empty one: only the call's command wrote itself in).
    pub(super) fn give_back(&self, dir: PathBuf) {
        if is_empty(&dir) {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(dir);
                return;
            }
        }
        remove(dir);
    }
}

impl Drop for CgroupPool {
    fn drop(&mut self) {
        let idle = self.idle.get_mut().unwrap_or_else(PoisonError::into_inner);
        for dir in idle.drain(..) {
            remove(dir);
        }
    }
}

fn is_empty(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|procs| procs.trim().is_empty())
}

/// Makes the call's cgroup with room for `processes` (the command's tree).
fn make_call_cgroup(parent: &Path, processes: u64) -> Result<PathBuf, SandboxError> {
    let dir = parent.join(format!(
        "{CALL_PREFIX}{}-{}",
        std::process::id(),
        random_suffix()
    ));
    let path_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SandboxError::Path { path, source }
    };
    fs::create_dir(&dir).map_err(path_error(&dir))?;
    let max = dir.join("pids.max");
    if let Err(error) = fs::write(&max, processes.to_string()) {
        let _ = fs::remove_dir(&dir);
        return Err(path_error(&max)(error));
    }
    Ok(dir)
}

/// How often, and how far apart, removing a cgroup whose last processes are
/// still exiting is tried again.
const REMOVE_TRIES: u32 = 100;
const REMOVE_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// Removes the call's cgroup: at once when it is empty (the usual case: the
/// host reaped the call's group first), else from a short-lived thread that
/// tries again while its last processes finish exiting.
fn remove(dir: PathBuf) {
    if fs::remove_dir(&dir).is_ok() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("agentry-sandbox-cgroup".to_owned())
        .spawn(move || {
            for _ in 0..REMOVE_TRIES {
                std::thread::sleep(REMOVE_PAUSE);
                if fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    return;
                }
            }
        });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_removes_dead_hosts_call_and_probe_dirs_and_keeps_live_and_foreign_ones() {
        let parent = tempfile::tempdir().unwrap();
        let mut exited = std::process::Command::new("true").spawn().unwrap();
        let dead = exited.id();
        exited.wait().unwrap();
        let names = [
            format!("{CALL_PREFIX}{dead}-aaaa"),
            format!("{PROBE_PREFIX}{dead}-dddd"),
            format!("{PROBE_PREFIX}{dead}"),
            format!("{CALL_PREFIX}{}-bbbb", std::process::id()),
            format!("{PROBE_PREFIX}{}-eeee", std::process::id()),
            format!("{CALL_PREFIX}cccc"),
            "other".to_string(),
        ];
        for name in &names {
            fs::create_dir(parent.path().join(name)).unwrap();
        }
        sweep_dead_hosts(parent.path());
        let left: Vec<bool> = names
            .iter()
            .map(|n| parent.path().join(n).exists())
            .collect();
        assert_eq!(left, [false, false, false, true, true, true, true]);
    }

    /// A probe left by a killed host whose pid is ours now does not make the
    /// cgroup look unwritable (it did: the probe's name was the pid alone).
    #[test]
    #[ignore = "needs root and a writable pids cgroup, as .ci/run has; it runs it"]
    fn a_stale_probe_with_our_pid_does_not_hide_a_writable_cgroup() {
        let parent = pids_parent().expect("root with a writable pids cgroup");
        let stale = parent.join(format!("{PROBE_PREFIX}{}", std::process::id()));
        fs::create_dir(&stale).unwrap();
        let seen = pids_parent();
        let _ = fs::remove_dir(&stale);
        assert_eq!(seen, Some(parent));
    }
}
