//! Processes a call left behind *outside* its process group (`setsid`,
//! `setpgid`), found and killed with the call.
//!
//! The group kill cannot reach such a process. What still ties it to the call:
//!
//! - **Lineage.** This process is a child subreaper ([`reap_orphans_here`]), so
//!   when the leader exits, whatever it left running is re-parented *here*: a
//!   stray is always one of our own children by then (or a descendant of one,
//!   re-parented here in turn when its parent is killed).
//! - **Marks.** Every process tool's child starts with `AGENTRY_RUN_ID` and
//!   `AGENTRY_CALL_ID` in its environment, and descendants inherit them through
//!   `setsid` and `exec`. `/proc/<pid>/environ` shows a process's initial
//!   environment, so our children carrying this call's two marks are its strays.
//!
//! A sweep SIGKILLs every child of ours with the marks (never the leader, which
//! tokio reaps), reaps them (`waitpid(pid)`; they are our children, so their pids
//! cannot be recycled before that), and repeats, so the strays' own children —
//! re-parented here as their parents die — go the same way.
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

use super::env::{ENV_CALL_ID, ENV_RUN_ID};
use super::exits::ChildExits;

/// Largest environment read per process; the marks come first (`Command`
/// sorts the variables it sets), so a cut never hides them for our children.
const MAX_ENVIRON: u64 = 1 << 20;

/// The two `NAME=value` entries that mark a call's processes.
#[derive(Debug, Clone)]
pub(super) struct Marks {
    run: Vec<u8>,
    call: Vec<u8>,
}

impl Marks {
    pub(super) fn new(run_id: &str, call_id: &str) -> Self {
        Marks {
            run: format!("{ENV_RUN_ID}={run_id}").into_bytes(),
            call: format!("{ENV_CALL_ID}={call_id}").into_bytes(),
        }
    }

    /// Whether `environ` (NUL-separated) holds both marks.
    fn found_in(&self, environ: &[u8]) -> bool {
        let mut entries = environ.split(|b| *b == 0);
        let (mut run, mut call) = (false, false);
        for entry in entries.by_ref() {
            run |= entry == self.run.as_slice();
            call |= entry == self.call.as_slice();
            if run && call {
                return true;
            }
        }
        false
    }
}

/// SIGKILLs every live child of this process that carries `marks`, except
/// `leader`; returns the pids signalled.
pub(super) fn kill_marked(marks: &Marks, leader: i32) -> Vec<i32> {
    kill_marked_in(own_children(), marks, leader)
}

/// [`kill_marked`] over a full `/proc` scan: the per-thread `children` lists
/// can miss a child re-parented while threads come and go, so a sweep that
/// found nothing there looks once more the slow way before it ends.
fn kill_marked_by_scan(marks: &Marks, leader: i32) -> Vec<i32> {
    kill_marked_in(children_by_scan(), marks, leader)
}

fn kill_marked_in(children: Vec<i32>, marks: &Marks, leader: i32) -> Vec<i32> {
    let mut killed = Vec::new();
    for pid in children {
        if pid == leader || !carries(pid, marks) {
            continue;
        }
        if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed.push(pid);
        }
    }
    killed
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

/// Kills and reaps the marked strays until none is left, for at most `budget`
/// (each round waits for the next child exit, or 1 ms); what is still to reap
/// then goes to a background thread.
pub(super) async fn sweep(marks: &Marks, leader: i32, budget: Duration) {
    let deadline = tokio::time::Instant::now() + budget;
    let mut exits = ChildExits::listen();
    let mut pending: Vec<i32> = Vec::new();
    let mut scanned = false;
    loop {
        let mut killed = kill_marked(marks, leader);
        if killed.is_empty() && pending.is_empty() && !scanned {
            scanned = true;
            killed = kill_marked_by_scan(marks, leader);
        }
        let found = !killed.is_empty();
        pending.extend(killed);
        pending.sort_unstable();
        pending.dedup();
        pending = reap(pending);
        if !found && pending.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            sweep_in_background(marks.clone(), leader);
            return;
        }
        exits.next().await;
    }
}

/// How long a background sweep keeps going.
const BACKGROUND_LIMIT: Duration = Duration::from_secs(5);

/// The sweep from a plain thread: for the drop guard, which may run when no
/// tokio runtime is left, and for what an async sweep ran out of budget for.
pub(super) fn sweep_in_background(marks: Marks, leader: i32) {
    let spawned = std::thread::Builder::new()
        .name("agentry-strays".to_string())
        .spawn(move || {
            let start = std::time::Instant::now();
            let mut pause = Duration::from_millis(1);
            let mut pending: Vec<i32> = Vec::new();
            while start.elapsed() < BACKGROUND_LIMIT {
                let killed = kill_marked(&marks, leader);
                let found = !killed.is_empty();
                pending.extend(killed);
                pending.sort_unstable();
                pending.dedup();
                pending = reap(pending);
                if !found && pending.is_empty() {
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

/// Whether process `pid`'s initial environment holds `marks`.
fn carries(pid: i32, marks: &Marks) -> bool {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let mut environ = Vec::new();
    if file.take(MAX_ENVIRON).read_to_end(&mut environ).is_err() {
        return false;
    }
    marks.found_in(&environ)
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
    fn both_marks_are_needed_whole() {
        let marks = Marks::new("run-1", "c1");
        assert!(marks.found_in(b"PATH=/bin\0AGENTRY_CALL_ID=c1\0AGENTRY_RUN_ID=run-1\0"));
        assert!(!marks.found_in(b"AGENTRY_RUN_ID=run-1\0AGENTRY_CALL_ID=c10\0"));
        assert!(!marks.found_in(b"AGENTRY_RUN_ID=run-1\0"));
        assert!(!marks.found_in(b""));
    }
}
