//! Fencing a run before it is resumed: no call is run again, settled or
//! reported while a process of an earlier attempt still lives.
//!
//! The resumer (which has claimed the run, so no other live process runs it)
//! SIGKILLs each process group recorded in the run's ledger whose leader is
//! still the process that was started (same start time: a reused pid is never
//! signalled), and every process whose environment carries the run's fence
//! mark (`AGENTRY_RUN_MARK`) or a recorded spawn mark (`AGENTRY_SPAWN_ID`),
//! which finds those that left their group and those started just before a
//! crash whose group was never recorded. Then it waits until they are gone.
//!
//! Never by the run's id (`AGENTRY_RUN_ID`): a run id is unique within one
//! store only, and a same-named run of another store (another checkout,
//! test or service of the same user) must keep its processes. The mark is
//! unique to the run across stores and the same for all its attempts.

use std::time::{Duration, Instant};

use agentry_protocol::ProcessGroupRecord;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::env::{ENV_RUN_MARK, ENV_SPAWN_ID};
use super::warden::start_time;

/// What fencing a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fenced {
    /// Groups killed (their leader was still alive).
    pub groups: Vec<i32>,
    /// Processes killed by their environment mark.
    pub processes: Vec<i32>,
}

impl Fenced {
    /// Whether anything of the run was still alive.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.processes.is_empty()
    }
}

/// Processes of the run outlived SIGKILL (for example in uninterruptible sleep).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "processes of run {run_id} are still alive {waited_ms} ms after SIGKILL (pids {pids:?}); \
     its calls cannot be settled while an earlier attempt may still act"
)]
pub struct FenceError {
    /// The run.
    pub run_id: String,
    /// What is still alive.
    pub pids: Vec<i32>,
    /// How long it waited.
    pub waited_ms: u64,
}

/// Kills every process of run `run_id` an earlier process left behind (its
/// recorded `groups`, and the processes carrying its fence mark `run_mark` or a
/// recorded spawn id), and waits up to `wait` until they are gone. Blocking
/// (reads `/proc`, polls): call it off the async threads.
pub fn fence(
    run_id: &str,
    run_mark: &str,
    groups: &[ProcessGroupRecord],
    wait: Duration,
) -> Result<Fenced, FenceError> {
    let mut fenced = Fenced::default();
    for group in groups {
        // Unchecked ids are left to the marks: a reused pid must not be hit.
        if group.leader_start.is_some() && start_time(group.pgid) == group.leader_start {
            let _ = killpg(Pid::from_raw(group.pgid), Signal::SIGKILL);
            fenced.groups.push(group.pgid);
        }
    }
    let marks = Marks::of(run_mark, groups);
    let me = std::process::id();
    for pid in marks.alive() {
        if u32::try_from(pid).ok() != Some(me) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            fenced.processes.push(pid);
        }
    }
    let started = Instant::now();
    loop {
        let left: Vec<i32> = fenced
            .groups
            .iter()
            .copied()
            .filter(|g| group_alive(*g))
            .chain(
                marks
                    .alive()
                    .into_iter()
                    .filter(|p| u32::try_from(*p).ok() != Some(me)),
            )
            .collect();
        if left.is_empty() {
            return Ok(fenced);
        }
        if started.elapsed() >= wait {
            return Err(FenceError {
                run_id: run_id.to_string(),
                pids: left,
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
        }
        for pid in &left {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The environment entries that mark a run's processes.
struct Marks(Vec<Vec<u8>>);

impl Marks {
    fn of(run_mark: &str, groups: &[ProcessGroupRecord]) -> Self {
        let mut marks = vec![format!("{ENV_RUN_MARK}={run_mark}").into_bytes()];
        marks.extend(
            groups
                .iter()
                .map(|g| format!("{ENV_SPAWN_ID}={}", g.spawn_id).into_bytes()),
        );
        Marks(marks)
    }

    /// Live (not zombie) processes carrying one of the marks.
    fn alive(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                    environ
                        .split(|b| *b == 0)
                        .any(|entry| self.0.iter().any(|m| m.as_slice() == entry))
                })
            })
            .filter(|pid| !is_zombie(*pid))
            .collect()
    }
}

/// Whether a live (not zombie) process is in group `pgid`.
fn group_alive(pgid: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or("", |(_, rest)| rest)
                    .split_whitespace()
                    .collect();
                fields.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid)
                    && fields.first().is_some_and(|s| *s != "Z" && *s != "X")
            })
        })
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|s| s == "Z" || s == "X")
    })
}
