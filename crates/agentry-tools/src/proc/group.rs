//! One call's process group: spawn, terminate, reap, and the drop guard.
//!
//! The leader is spawned with `process_group(0)`, so its pid is the group id and
//! every process it forks stays in the group unless it calls `setpgid`/`setsid`
//! itself. Such a process escapes the group kill; `strays.rs` finds it by its
//! environment mark once it is re-parented here, and every path below (exit,
//! cancel, drop) sweeps for it after the group.
//!
//! Listing. [`ProcessGroup::spawn`], the one way a group starts, tells the
//! warden (`warden.rs`) the spawn's mark before the spawn and the group after
//! it; the group tells it when it is gone (every member reaped).
//!
//! Reaping. The leader is our child and is reaped by tokio (`Child::wait`). The
//! other members are the leader's descendants; once their parents die they are
//! re-parented to the nearest child subreaper, which is this process only after
//! [`reap_orphans_here`](super::reap_orphans_here). We reap them with
//! `waitpid(-pgid, WNOHANG)`, which only ever touches children *in this group*:
//! never `waitpid(-1)`, which would steal other children from tokio. The member
//! loop runs only after tokio has reaped the leader, so it never steals the leader
//! either (except from the drop guard's reaper thread, where tokio's orphan queue
//! tolerates it: a failed `try_wait` just drops the orphan).
//!
//! Pid reuse. A process group id cannot be reused while any process (zombie
//! included) still has it, and the unreaped leader keeps it alive until tokio
//! reaps it. The only window for signalling a recycled id is after the leader is
//! reaped *and* every member is gone; the guard is disarmed as soon as the member
//! loop sees `ECHILD`, so that window is a few microseconds and would need a full
//! pid wrap-around inside it.

use std::process::ExitStatus;
use std::time::Duration;

use agentry_protocol::ProcessGroupRecord;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::exits::ChildExits;
use super::strays::{self, Mark};
use super::warden::{Line, Listing, Tell, start_time};

/// How long the cancel path waits for the leader to die after SIGKILL before
/// leaving it to the drop guard. SIGKILL is not catchable, so this only runs out
/// for a process stuck in uninterruptible sleep.
const KILL_WAIT: Duration = Duration::from_millis(15);

/// How long the cancel path reaps members after SIGKILL before handing the rest
/// to a background reaper. Term grace + [`KILL_WAIT`] + this stays inside the
/// executor's 75 ms `CANCEL_GRACE`, so the cancel path finishes before the
/// executor drops the future.
const CANCEL_REAP_BUDGET: Duration = Duration::from_millis(10);

/// How long the normal path reaps leftover members after the leader exited.
const EXIT_REAP_BUDGET: Duration = Duration::from_millis(100);

/// How long the normal path sweeps for strays (processes that left the group).
const EXIT_SWEEP_BUDGET: Duration = Duration::from_millis(100);

/// How long the cancel path sweeps for strays before leaving the rest to a
/// background thread; keeps the cancel path inside the executor's grace.
const CANCEL_SWEEP_BUDGET: Duration = Duration::from_millis(5);

/// How long a background reaper thread keeps trying.
const BACKGROUND_REAP_LIMIT: Duration = Duration::from_secs(5);

/// A spawned call: the leader and its process group, killed on drop unless the
/// group was cleaned up.
#[derive(Debug)]
pub(super) struct ProcessGroup {
    /// The leader. Owned here so that `Drop::drop` signals the group *before* the
    /// child handle is dropped into tokio's orphan queue.
    pub(super) child: Child,
    pgid: Pid,
    /// What the ledger and a resume's fence know the group by.
    record: ProcessGroupRecord,
    /// The warden the group is listed with, told when it is gone.
    warden: &'static dyn Tell,
    leader_reaped: bool,
    /// Leader reaped and the member loop saw `ECHILD`: nothing left to kill, and
    /// the id may be recycled, so the guard must not signal it any more.
    clean: bool,
    /// This spawn's environment mark, to find strays that left the group.
    mark: Mark,
    /// A sweep for strays ran to its end (or handed off to a thread).
    swept: bool,
}

impl ProcessGroup {
    /// Spawns `command`, set up with `process_group(0)` and `spawn_id` as its
    /// `AGENTRY_SPAWN_ID`, listed with `warden`: the mark before the spawn,
    /// so that a host dying before the group is listed still has the spawn's
    /// processes killed, and the group once it exists (see `warden.rs`).
    pub(super) fn spawn(
        command: &mut Command,
        spawn_id: String,
        warden: &'static dyn Tell,
    ) -> std::io::Result<ProcessGroup> {
        let listing = Listing::before_spawn(warden, &spawn_id);
        let child = command.spawn()?;
        // No pid only once tokio has reaped the child, never right after
        // `spawn`.
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| std::io::Error::other("spawned but has no pid"))?;
        let leader_start = start_time(pid);
        listing.group_started(pid, leader_start);
        Ok(ProcessGroup {
            child,
            pgid: Pid::from_raw(pid),
            mark: Mark::new(&spawn_id),
            record: ProcessGroupRecord {
                pgid: pid,
                leader_start,
                spawn_id,
            },
            warden,
            leader_reaped: false,
            clean: false,
            swept: false,
        })
    }

    /// The group id (the leader's pid).
    pub(super) fn pgid(&self) -> i32 {
        self.pgid.as_raw()
    }

    /// The group as the ledger records it.
    pub(super) fn record(&self) -> &ProcessGroupRecord {
        &self.record
    }

    /// Waits for the leader to exit; cancel safe (tokio's `Child::wait` is).
    pub(super) async fn wait_leader(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait().await?;
        self.leader_reaped = true;
        Ok(status)
    }

    /// Whether the leader has exited (reaping it if so), without waiting.
    pub(super) fn leader_exited(&mut self) -> bool {
        if !self.leader_reaped && matches!(self.child.try_wait(), Ok(Some(_))) {
            self.leader_reaped = true;
        }
        self.leader_reaped
    }

    /// After the leader exited on its own: a call's processes end with the call,
    /// so SIGKILL whatever it left behind in its group, then reap.
    pub(super) async fn kill_leftovers(&mut self) {
        let mut exits = ChildExits::listen();
        if self.group_exists() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
        self.reap_members(EXIT_REAP_BUDGET, &mut exits).await;
        self.sweep_strays(EXIT_SWEEP_BUDGET).await;
    }

    /// Kills what left the group (see `strays.rs`).
    async fn sweep_strays(&mut self, budget: Duration) {
        strays::sweep(&self.mark, self.pgid.as_raw(), budget).await;
        self.swept = true;
    }

    /// The cancel path: SIGTERM the group, give it `grace` to exit, SIGKILL the
    /// group, reap the leader and the members. Bounded by
    /// `grace + KILL_WAIT + CANCEL_REAP_BUDGET`; whatever is still not reaped
    /// then is left to the drop guard.
    pub(super) async fn terminate(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        // Listening before the signal: no member's exit can slip by unnoticed.
        let mut exits = ChildExits::listen();
        let _ = killpg(self.pgid, Signal::SIGTERM);
        if !self.leader_reaped
            && let Ok(Ok(_)) = tokio::time::timeout_at(deadline, self.child.wait()).await
        {
            self.leader_reaped = true;
        }
        if self.leader_reaped {
            // Members got the same SIGTERM; let them use the rest of the grace.
            while Instant::now() < deadline && self.group_exists() {
                if self.reap_ready_members() == Reaped::All {
                    break;
                }
                exits.next().await;
            }
        }
        if !self.leader_reaped || self.group_exists() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
        }
        if !self.leader_reaped {
            match tokio::time::timeout(KILL_WAIT, self.child.wait()).await {
                Ok(Ok(_)) => self.leader_reaped = true,
                // Stuck in uninterruptible sleep, or wait failed: the guard takes over.
                Ok(Err(_)) | Err(_) => return,
            }
        }
        self.reap_members(CANCEL_REAP_BUDGET, &mut exits).await;
        self.sweep_strays(CANCEL_SWEEP_BUDGET).await;
    }

    /// Whether any process (zombies included) still has this group id. Only
    /// meaningful once the leader is reaped; before that the leader keeps it.
    fn group_exists(&self) -> bool {
        killpg(self.pgid, None::<Signal>) != Err(Errno::ESRCH)
    }

    /// Reaps members until none is left (`ECHILD`) or `budget` runs out; call only
    /// after the leader is reaped.
    async fn reap_members(&mut self, budget: Duration, exits: &mut ChildExits) {
        let deadline = Instant::now() + budget;
        loop {
            if self.reap_ready_members() == Reaped::All {
                self.clean = true;
                self.warden.tell(Line::Gone {
                    pgid: self.pgid.as_raw(),
                });
                return;
            }
            if Instant::now() >= deadline {
                // Still alive (e.g. in uninterruptible sleep): leave them to the
                // guard, which SIGKILLs again and reaps in the background.
                return;
            }
            exits.next().await;
        }
    }

    /// One non-blocking pass of the member loop.
    fn reap_ready_members(&self) -> Reaped {
        reap_ready(self.pgid)
    }
}

impl Drop for ProcessGroup {
    /// The future was dropped before cleanup finished (the executor gave up after
    /// its grace, the actor was killed), or cleanup ran out of budget: SIGKILL the
    /// group synchronously and reap in the background.
    fn drop(&mut self) {
        if !self.swept {
            // The leader is excluded: tokio reaps it.
            strays::kill_marked(&self.mark, self.pgid.as_raw());
            strays::sweep_in_background(self.mark.clone(), self.pgid.as_raw());
        }
        if self.clean {
            return;
        }
        let _ = killpg(self.pgid, Signal::SIGKILL);
        spawn_background_reaper(self.pgid, self.warden);
        // `self.child` is dropped next: tokio reaps the leader from its orphan
        // queue, unless the reaper thread got to it first (harmless, see module docs).
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Reaped {
    /// No child of ours is left in the group.
    All,
    /// Some are still running (or the loop hit an unexpected error and stops).
    Some,
}

/// Reaps every member that has already exited, without blocking.
fn reap_ready(pgid: Pid) -> Reaped {
    let group = Pid::from_raw(-pgid.as_raw());
    loop {
        match waitpid(group, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return Reaped::Some,
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(Errno::ECHILD) => return Reaped::All,
            // EINVAL cannot happen with these flags; treat anything else as "done
            // here" rather than spin.
            Err(_) => return Reaped::All,
        }
    }
}

/// Reaps the group's members from a plain thread, so it works even when no tokio
/// runtime is left (the drop may happen during runtime shutdown).
fn spawn_background_reaper(pgid: Pid, warden: &'static dyn Tell) {
    let spawned = std::thread::Builder::new()
        .name(format!("agentry-reap-{}", pgid.as_raw()))
        .spawn(move || {
            let start = std::time::Instant::now();
            let mut pause = Duration::from_millis(1);
            while reap_ready(pgid) == Reaped::Some && start.elapsed() < BACKGROUND_REAP_LIMIT {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            if reap_ready(pgid) == Reaped::All {
                warden.tell(Line::Gone {
                    pgid: pgid.as_raw(),
                });
            }
        });
    // Without a thread the group is still SIGKILLed; only the zombies of
    // re-parented members linger until this process exits.
    drop(spawned);
}
