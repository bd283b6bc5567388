//! Processes a call left behind *outside* its process group (`setsid`,
//! `setpgid`), found and killed with the call.
//!
//! The group kill cannot reach such a process. What still ties it to the call:
//!
//! - **Lineage.** This process is a child subreaper ([`reap_orphans_here`]), so
//!   when the leader exits, whatever it left running is re-parented *here*: a
//!   stray is always one of our own children by then (or a descendant of one,
//!   re-parented here in turn when its parent is killed).
//! - **The mark.** Every process tool's child starts with `AGENTRY_SPAWN_ID`, an
//!   id unique to that spawn, in its environment, and descendants inherit it
//!   through `setsid` and `exec`. `/proc/<pid>/environ` shows a process's initial
//!   environment, so our children carrying the spawn's mark are its strays. (The
//!   run and call ids are not enough: a retry has the same two, and a sweep still
//!   finishing for one attempt must not kill the next.)
//!
//! A sweep SIGKILLs every child of ours with the mark (never the leader, which
//! tokio reaps), reaps them (`waitpid(pid)`; they are our children, so their pids
//! cannot be recycled before that), and repeats, so the strays' own children —
//! re-parented here as their parents die — go the same way. It ends only after
//! a round that found nothing to kill *and* reaped nothing: a stray reaped
//! after the round listed our children may have handed us children of its own.
//!
//! A live child shows *no* environment while it is inside `exec` (the kernel has
//! swapped in the new memory map but not yet laid out its environment), which
//! under load can be the very moment the sweep looks at a stray on its way from
//! `setsid` to `sleep`. Such a child is neither ours nor another's yet: the sweep
//! keeps looking until it can tell (bounded by [`UNSURE_LIMIT`]).
//!
//! Not covered: a process that clears its environment (`env -i setsid ...`)
//! *and* outlives its leader, and any stray when this process is not a subreaper
//! (its orphans go to init instead). Linux only; elsewhere sweeps find nothing.
//!
//! [`reap_orphans_here`]: super::reap_orphans_here

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::env::ENV_SPAWN_ID;
use super::exits::ChildExits;

/// Largest environment read per process; the host's ids come first (`Command`
/// sorts the variables it sets), so a cut never hides the mark for our children.
const MAX_ENVIRON: u64 = 1 << 20;

/// How long a sweep keeps looking at children whose environment it cannot read
/// yet. An `exec` ends in microseconds; this covers a loaded machine's
/// scheduling delays, and ends the wait on a process that cleared its own.
const UNSURE_LIMIT: Duration = Duration::from_millis(250);

/// The `AGENTRY_SPAWN_ID=<id>` entry that marks one spawn's processes.
#[derive(Debug, Clone)]
pub(super) struct Mark(Vec<u8>);

impl Mark {
    pub(super) fn new(spawn_id: &str) -> Self {
        Mark(format!("{ENV_SPAWN_ID}={spawn_id}").into_bytes())
    }

    /// Whether `environ` (NUL-separated) holds the mark as a whole entry.
    fn found_in(&self, environ: &[u8]) -> bool {
        environ
            .split(|b| *b == 0)
            .any(|entry| entry == self.0.as_slice())
    }
}

/// What one pass over our children did.
#[derive(Debug, Default)]
pub(super) struct Pass {
    /// The marked children signalled.
    pub(super) killed: Vec<i32>,
    /// Some live child showed no environment (mid-`exec`): look again.
    pub(super) unsure: bool,
}

/// SIGKILLs every live child of this process that carries `mark`, except
/// `leader`.
pub(super) fn kill_marked(mark: &Mark, leader: i32) -> Pass {
    kill_marked_in(own_children(), mark, leader)
}

/// [`kill_marked`] over a full `/proc` scan: the per-thread `children` lists
/// can miss a child re-parented while threads come and go, so a sweep that
/// found nothing there looks once more the slow way before it ends.
fn kill_marked_by_scan(mark: &Mark, leader: i32) -> Pass {
    kill_marked_in(children_by_scan(), mark, leader)
}

fn kill_marked_in(children: Vec<i32>, mark: &Mark, leader: i32) -> Pass {
    let mut pass = Pass::default();
    for pid in children {
        if pid == leader {
            continue;
        }
        match carries(pid, mark) {
            Carries::Mark => {
                if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                    pass.killed.push(pid);
                }
            }
            Carries::Unknown => pass.unsure = true,
            Carries::Other => {}
        }
    }
    pass
}

/// Reaps those of `pids` that have exited, without blocking; returns the rest
/// (still running). A pid that is not our child (any more) is dropped.
pub(super) fn reap(pids: Vec<i32>) -> Vec<i32> {
    pids.into_iter()
        .filter(|pid| {
            loop {
                match waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => break true,
                    Err(Errno::EINTR) => continue,
                    Ok(_) | Err(_) => break false,
                }
            }
        })
        .collect()
}

/// One sweep's progress: the strays signalled and not yet reaped, and whether
/// the last pass could tell every child apart.
struct Sweep {
    mark: Mark,
    leader: i32,
    pending: Vec<i32>,
    scanned: bool,
    started: std::time::Instant,
}

impl Sweep {
    fn new(mark: Mark, leader: i32) -> Self {
        Sweep {
            mark,
            leader,
            pending: Vec::new(),
            scanned: false,
            started: std::time::Instant::now(),
        }
    }

    /// One round: kill what carries the mark, reap what died; `true` once
    /// nothing is left to kill, reap or make out.
    ///
    /// A stray reaped in this round may have had children, re-parented here
    /// as it died: after this round's list of our children was taken. So a
    /// round that reaped anything is never the last.
    fn round(&mut self) -> bool {
        let mut pass = kill_marked(&self.mark, self.leader);
        if pass.killed.is_empty() && !pass.unsure && self.pending.is_empty() && !self.scanned {
            self.scanned = true;
            pass = kill_marked_by_scan(&self.mark, self.leader);
        }
        let found = !pass.killed.is_empty();
        self.pending.extend(pass.killed);
        self.pending.sort_unstable();
        self.pending.dedup();
        let waiting = self.pending.len();
        self.pending = reap(std::mem::take(&mut self.pending));
        let reaped = self.pending.len() < waiting;
        let settled = !pass.unsure || self.started.elapsed() >= UNSURE_LIMIT;
        !found && !reaped && settled && self.pending.is_empty()
    }
}

/// Kills and reaps the marked strays until none is left, for at most `budget`
/// (each round waits for the next child exit, or 1 ms); what is still to reap
/// or make out then goes to a background thread.
pub(super) async fn sweep(mark: &Mark, leader: i32, budget: Duration) {
    let deadline = tokio::time::Instant::now() + budget;
    let mut exits = ChildExits::listen();
    let mut sweep = Sweep::new(mark.clone(), leader);
    loop {
        if sweep.round() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            sweep_in_background(mark.clone(), leader);
            return;
        }
        exits.next().await;
    }
}

/// How long a background sweep keeps going.
const BACKGROUND_LIMIT: Duration = Duration::from_secs(5);

/// The sweep from a plain thread: for the drop guard, which may run when no
/// tokio runtime is left, and for what an async sweep ran out of budget for.
pub(super) fn sweep_in_background(mark: Mark, leader: i32) {
    let spawned = std::thread::Builder::new()
        .name("agentry-strays".to_string())
        .spawn(move || {
            let mut sweep = Sweep::new(mark, leader);
            let mut pause = Duration::from_millis(1);
            while sweep.started.elapsed() < BACKGROUND_LIMIT {
                if sweep.round() {
                    return;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
        });
    // Without a thread the strays signalled so far are still dead; only their
    // zombies linger until this process exits.
    drop(spawned);
}

/// Whether a child carries a spawn's mark.
enum Carries {
    Mark,
    Other,
    /// A live process with no environment to read right now (mid-`exec`).
    Unknown,
}

/// Whether process `pid`'s initial environment holds `mark`.
fn carries(pid: i32, mark: &Mark) -> Carries {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        // Gone already, or not ours to read.
        return Carries::Other;
    };
    let mut environ = Vec::new();
    // A failed read keeps what was read so far, if anything.
    let _ = file.take(MAX_ENVIRON).read_to_end(&mut environ);
    if mark.found_in(&environ) {
        Carries::Mark
    } else if environ.is_empty() && is_live(pid) {
        Carries::Unknown
    } else {
        Carries::Other
    }
}

/// Whether `pid` still runs: not a zombie waiting to be reaped, which has no
/// environment and never will.
fn is_live(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "pid (comm) state ...": comm may hold spaces and parens.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, None | Some("Z" | "X" | "x"))
}

/// The pids of this process's children: `/proc/self/task/*/children` (each
/// thread lists the children it forked or was handed), or, on a kernel without
/// those files, every process whose parent is this one.
fn own_children() -> Vec<i32> {
    let mut children = Vec::new();
    let mut listed = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                listed = true;
                children.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    }
    if !listed {
        children = children_by_scan();
    }
    children.sort_unstable();
    children.dedup();
    children
}

/// Every process whose parent is this one, from `/proc/<pid>/stat`.
fn children_by_scan() -> Vec<i32> {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<i32>().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // "pid (comm) state ppid ...": comm may hold spaces and parens.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ppid = rest.split_whitespace().nth(1)?;
            (ppid == me).then_some(pid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_is_needed_whole() {
        let mark = Mark::new("7-1");
        assert!(mark.found_in(b"AGENTRY_RUN_ID=r\0AGENTRY_SPAWN_ID=7-1\0PATH=/bin\0"));
        assert!(!mark.found_in(b"AGENTRY_SPAWN_ID=7-10\0"));
        assert!(!mark.found_in(b"AGENTRY_SPAWN_ID=7-\0"));
        assert!(!mark.found_in(b""));
    }
}
