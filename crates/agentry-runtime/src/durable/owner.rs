//! Run ownership: a durable run is run by one process at a time.
//!
//! Starting or resuming a durable run claims it in the store
//! ([`agentry_store::RunOwner`]: host, pid and pid start time, a fresh token,
//! since when, a heartbeat). A resume reads the current owner first and
//! refuses while it is alive ([`RuntimeError::Owned`]); the claim itself is a
//! compare-and-set on the owner it replaced, so of two resumers only one wins.
//!
//! Whether an owner is alive:
//! - this process (same pid space, pid and start time): alive while the run is
//!   in this process's table of runs it is running (claim guards, dropped
//!   when the run's conductor stops), so a run lost in-process can be resumed;
//! - another process in the same pid space (Linux: same boot id and pid
//!   namespace): alive while `/proc/PID` exists, is not a zombie and started
//!   when the owner did (a reused pid is not the owner). A live local owner is
//!   never taken over, even with a stale heartbeat: it could still write;
//! - anything else (another machine or container, no `/proc`): alive while its
//!   heartbeat is younger than [`OWNER_EXPIRY`]. Owners refresh it every
//!   [`HEARTBEAT_EVERY`] from their store's writer thread.
//!
//! In lease mode (`Runtime::with_lease`, for nodes of a cluster sharing one
//! store) an owner is judged by its heartbeat alone: alive while it is
//! younger than the lease, whatever its pid says (a paused node's pid lives
//! on); only a run of this process that it no longer runs is gone at once.
//! Owners then beat every third of the lease.
//!
//! Fencing: a claim's `Lease` is what the run's batches carry to the writer
//! thread, which opens each with a `Write::Fence` on its token. When the store
//! refuses one (`StoreError::Fenced`: another process took the run over),
//! the writer marks the lease lost and cancels the run's token; the run stops
//! working on the run without recording anything (`RuntimeError::TakenOver`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use agentry_store::{RunOwner, StoreError, Write};
use tokio_util::sync::CancellationToken;

use crate::error::RuntimeError;

/// How often an owner refreshes its heartbeat.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// A heartbeat older than this means an owner that cannot be checked by pid
/// (another machine) is gone.
pub const OWNER_EXPIRY: Duration = Duration::from_secs(30);

/// Who this process is, as an owner record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Process {
    pub(crate) host: String,
    pub(crate) machine: String,
    pub(crate) pid: u32,
    pub(crate) pid_start: Option<u64>,
}

/// What `/proc` says about a pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// No such process (or only its zombie).
    NoProcess,
    /// A live process that started at this tick since boot.
    Started(Option<u64>),
    /// This platform cannot tell.
    Unknown,
}

/// Whether a run's recorded owner still runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It may: refuse to take over.
    Alive,
    /// Its process is gone (exited, killed, a reused pid): take over.
    Gone,
    /// It cannot be checked by pid and its heartbeat expired: take over.
    Expired,
}

/// This process as the store's owner rows name it: `MACHINE#PID`, where
/// MACHINE is [`agentry_store::RunOwner`]'s `machine`. A service that is one node of a
/// cluster registers it, so the others find which node holds a run by its
/// owner row (`format!("{}#{}", owner.machine, owner.pid)`).
pub fn process_key() -> String {
    let me = this_process();
    format!("{}#{}", me.machine, me.pid)
}

/// This process, computed once.
pub(crate) fn this_process() -> &'static Process {
    static ME: OnceLock<Process> = OnceLock::new();
    ME.get_or_init(|| {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
        };
        let host = read("/proc/sys/kernel/hostname")
            .or_else(|| std::env::var("HOSTNAME").ok())
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_string());
        let boot = read("/proc/sys/kernel/random/boot_id");
        let pid_ns = std::fs::read_link("/proc/self/ns/pid")
            .ok()
            .map(|l| l.to_string_lossy().into_owned());
        let machine = match (boot, pid_ns) {
            (Some(boot), Some(ns)) => format!("{boot}/{ns}"),
            // No way to compare pids with another process: only this one.
            _ => format!("host:{host}/pid:{}", std::process::id()),
        };
        let pid = std::process::id();
        let pid_start = match probe(pid) {
            Probe::Started(start) => start,
            Probe::NoProcess | Probe::Unknown => None,
        };
        Process {
            host,
            machine,
            pid,
            pid_start,
        }
    })
}

/// Looks `pid` up in `/proc`.
pub(crate) fn probe(pid: u32) -> Probe {
    if !cfg!(target_os = "linux") {
        return Probe::Unknown;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The command name (field 2) may hold spaces and parentheses: the
            // fields after its last ')' are state (3) ... starttime (22).
            let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            match fields.first() {
                Some(&"Z") | Some(&"X") => Probe::NoProcess,
                _ => Probe::Started(fields.get(19).and_then(|s| s.parse().ok())),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::path::Path::new("/proc/self/stat").exists() {
                Probe::NoProcess
            } else {
                Probe::Unknown
            }
        }
        Err(_) => Probe::Unknown,
    }
}

/// Judges `owner` from `me`'s side at `now_ms`. `live_here` says whether a
/// token belongs to a run this process is running; `probe` looks up a pid.
/// With a `lease` (lease mode) another process is judged by its heartbeat's
/// age alone, against the lease.
pub(crate) fn judge(
    owner: &RunOwner,
    me: &Process,
    now_ms: u64,
    lease: Option<Duration>,
    live_here: impl Fn(&str) -> bool,
    probe: impl Fn(u32) -> Probe,
) -> Verdict {
    if owner.machine == me.machine {
        if owner.pid == me.pid && owner.pid_start == me.pid_start {
            return match (live_here(&owner.token), lease) {
                (false, _) => Verdict::Gone,
                (true, None) => Verdict::Alive,
                // A lease holds only while it is renewed, here too: a run whose
                // beats stopped (its store's writer stalled) may be taken over.
                (true, Some(_)) => by_heartbeat(owner, now_ms, lease),
            };
        }
        if lease.is_some() {
            return by_heartbeat(owner, now_ms, lease);
        }
        match probe(owner.pid) {
            Probe::NoProcess => return Verdict::Gone,
            Probe::Started(start) if owner.pid_start.is_some() && start != owner.pid_start => {
                return Verdict::Gone;
            }
            Probe::Started(_) => return Verdict::Alive,
            Probe::Unknown => {}
        }
    }
    by_heartbeat(owner, now_ms, lease)
}

/// Alive while the heartbeat is younger than the lease ([`OWNER_EXPIRY`]
/// without one).
fn by_heartbeat(owner: &RunOwner, now_ms: u64, lease: Option<Duration>) -> Verdict {
    let age = now_ms.saturating_sub(owner.heartbeat_ms);
    if u128::from(age) > lease.unwrap_or(OWNER_EXPIRY).as_millis() {
        Verdict::Expired
    } else {
        Verdict::Alive
    }
}

/// How often an owner beats: [`HEARTBEAT_EVERY`], or a third of the lease in
/// lease mode (so two beats may be lost before it expires), at least 10 ms.
pub(crate) fn beat_every(lease: Option<Duration>) -> Duration {
    lease.map_or(HEARTBEAT_EVERY, |l| (l / 3).max(Duration::from_millis(10)))
}

/// This process's hold on one run, shared by its [`Claim`], the run's
/// `RunLog` and the store's writer thread: the token every batch of the run
/// is fenced by, and whether the store said another process took it over.
#[derive(Debug)]
pub(crate) struct Lease {
    token: Arc<str>,
    run_id: Arc<str>,
    /// The claim is on disk and the run not released: heartbeats go out.
    beating: AtomicBool,
    /// Set once, by the writer thread, when the store refused a write of the
    /// run (`StoreError::Fenced`): every later batch fails with it at once.
    lost: OnceLock<StoreError>,
    /// Cancelled when the lease is lost: the run's token, so its actors stop
    /// and its tools are cancelled (set as the run launches).
    stops: OnceLock<CancellationToken>,
}

impl Lease {
    /// The claim's token.
    pub(crate) fn token(&self) -> &Arc<str> {
        &self.token
    }

    /// The run.
    pub(crate) fn run_id(&self) -> &Arc<str> {
        &self.run_id
    }

    /// Why the run is no longer this process's, once the store said so.
    pub(crate) fn lost(&self) -> Option<&StoreError> {
        self.lost.get()
    }

    /// The write that opens every batch of the run: it passes only while
    /// this claim owns the run.
    pub(crate) fn fence(&self) -> Write {
        Write::Fence {
            run_id: self.run_id.to_string(),
            token: self.token.to_string(),
        }
    }

    /// `token` is cancelled when the lease is lost (at once if it was).
    pub(crate) fn stops(&self, token: &CancellationToken) {
        let _ = self.stops.set(token.clone());
        // Against `lose` on the writer thread: one of the two sees the other's set.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.lost().is_some() {
            token.cancel();
        }
    }

    /// The claim is on disk: heartbeats from now on. Not before, or a beat
    /// could reach the store ahead of the claim and be refused as a stale
    /// owner's.
    pub(crate) fn claimed(&self) {
        self.beating.store(true, Ordering::Relaxed);
    }

    /// The run lets go of the run (its stop's batch releases it): no more
    /// heartbeats, which the store would refuse.
    pub(crate) fn released(&self) {
        self.beating.store(false, Ordering::Relaxed);
    }

    /// The store refused a write of the run with `error`: no more writes or
    /// heartbeats, and the run is told (its token cancelled). Called by the
    /// writer thread before it answers the refused batch's waiters.
    pub(crate) fn lose(&self, error: StoreError) {
        self.beating.store(false, Ordering::Relaxed);
        if self.lost.set(error).is_ok() {
            tracing::debug!(run_id = %self.run_id, "the store refused a write of the run: its lease is lost");
            std::sync::atomic::fence(Ordering::SeqCst);
            if let Some(token) = self.stops.get() {
                token.cancel();
            }
        }
    }
}

/// A run this process is running now, under the claim's token.
#[derive(Debug)]
struct Held {
    lease: Arc<Lease>,
    /// The store writer the claim was made through ([`StoreWriter::key`](crate::durable::StoreWriter)).
    writer: usize,
    /// Hibernated: no heartbeat (a million sleeping runs would write a
    /// million rows every beat). A local resumer still finds it live here;
    /// an owner judged by heartbeat alone (another machine) sees it expire.
    dormant: bool,
}

/// Runs this process is running now, by claim token.
fn live() -> std::sync::MutexGuard<'static, HashMap<Arc<str>, Held>> {
    static LIVE: OnceLock<Mutex<HashMap<Arc<str>, Held>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        // Plain inserts and removes: a panic elsewhere leaves the map whole.
        .unwrap_or_else(PoisonError::into_inner)
}

/// This process's claim on one run: registered as live for as long as the
/// value lives (the run's conductor holds it), so the same process can tell a
/// run it is running from one it lost. Compact (a hibernated run keeps it):
/// the token and the run id are shared with the live table and the run, and
/// the owner record is built when it is written.
#[derive(Debug)]
pub(crate) struct Claim {
    lease: Arc<Lease>,
    since_ms: u64,
}

impl Claim {
    /// A fresh claim on `run_id`, live from now on. Registered before it is
    /// committed: a resumer in this process that sees the committed claim
    /// must find it live.
    pub(crate) fn new(run_id: &Arc<str>, writer: usize) -> Claim {
        let token: Arc<str> = Arc::from(uuid::Uuid::now_v7().to_string());
        let lease = Arc::new(Lease {
            token: Arc::clone(&token),
            run_id: Arc::clone(run_id),
            beating: AtomicBool::new(false),
            lost: OnceLock::new(),
            stops: OnceLock::new(),
        });
        live().insert(
            token,
            Held {
                lease: Arc::clone(&lease),
                writer,
                dormant: false,
            },
        );
        Claim {
            lease,
            since_ms: agentry_protocol::now_millis(),
        }
    }

    /// What the run's batches carry to the writer.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The owner record this claim writes: this process, since the claim.
    pub(crate) fn owner(&self) -> RunOwner {
        let me = this_process();
        RunOwner {
            token: self.lease.token.to_string(),
            host: me.host.clone(),
            machine: me.machine.clone(),
            pid: me.pid,
            pid_start: me.pid_start,
            since_ms: self.since_ms,
            heartbeat_ms: self.since_ms,
            // The store assigns it.
            epoch: 0,
        }
    }

    /// Marks the run hibernated (no heartbeat) or awake again.
    pub(crate) fn set_dormant(&self, dormant: bool) {
        if let Some(held) = live().get_mut(&self.lease.token) {
            held.dormant = dormant;
        }
    }

    /// The write that makes this claim the run's owner, replacing `replaces`.
    pub(crate) fn write(&self, replaces: Option<&RunOwner>) -> Write {
        Write::Claim {
            run_id: self.lease.run_id.to_string(),
            owner: self.owner(),
            replaces: replaces.map(|o| o.token.clone()),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        live().remove(&self.lease.token);
    }
}

/// Heartbeats for every run this process runs through store writer `writer`
/// (claimed on disk, awake, not released or lost), and the leases they are for.
pub(crate) fn heartbeats(writer: usize) -> Vec<(Write, Arc<Lease>)> {
    let now = agentry_protocol::now_millis();
    live()
        .values()
        .filter(|held| {
            held.writer == writer && !held.dormant && held.lease.beating.load(Ordering::Relaxed)
        })
        .map(|held| {
            let beat = Write::Heartbeat {
                run_id: held.lease.run_id.to_string(),
                token: held.lease.token.to_string(),
                at_ms: now,
            };
            (beat, Arc::clone(&held.lease))
        })
        .collect()
}

/// Lets go of every claim made through store writer `writer` at once (the
/// runtime abandoned its runs; their conductors may take a moment to stop).
pub(crate) fn forget(writer: usize) {
    live().retain(|_, held| held.writer != writer);
}

/// Refuses to take `run_id` from `owner` while it is alive (judged by its
/// heartbeat against `lease` in lease mode).
pub(crate) fn check_takeover(
    run_id: &str,
    owner: &RunOwner,
    lease: Option<Duration>,
) -> Result<(), RuntimeError> {
    let verdict = judge(
        owner,
        this_process(),
        agentry_protocol::now_millis(),
        lease,
        |token| live().contains_key(token),
        probe,
    );
    match verdict {
        Verdict::Alive => Err(RuntimeError::Owned {
            run_id: run_id.to_string(),
            owner: match lease {
                Some(lease) => format!(
                    "{} and holds its lease of {} ms",
                    describe(owner),
                    lease.as_millis()
                ),
                None => describe(owner),
            },
        }),
        Verdict::Gone | Verdict::Expired => {
            tracing::info!(run_id, pid = owner.pid, host = %owner.host, epoch = owner.epoch, ?verdict, "taking over a run whose owner is gone");
            Ok(())
        }
    }
}

/// "process 1234 on host h since 2026-12-01T11:22:45Z (last heartbeat 1 s ago)".
pub(crate) fn describe(owner: &RunOwner) -> String {
    let at = agentry_protocol::rfc3339_seconds;
    let ago = agentry_protocol::now_millis().saturating_sub(owner.heartbeat_ms) / 1000;
    format!(
        "process {} on host {} since {} (last heartbeat {ago} s ago)",
        owner.pid,
        owner.host,
        at(owner.since_ms)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn me() -> Process {
        Process {
            host: "h".into(),
            machine: "boot/ns".into(),
            pid: 100,
            pid_start: Some(5),
        }
    }

    fn owner(machine: &str, pid: u32, pid_start: Option<u64>, heartbeat_ms: u64) -> RunOwner {
        RunOwner {
            token: "t".into(),
            host: "h".into(),
            machine: machine.into(),
            pid,
            pid_start,
            since_ms: 0,
            heartbeat_ms,
            epoch: 1,
        }
    }

    const NOW: u64 = 1_000_000;
    const FRESH: u64 = NOW - 1_000;
    const STALE: u64 = NOW - 31_000;

    fn verdict(o: &RunOwner, live: bool, probe: Probe) -> Verdict {
        judge(o, &me(), NOW, None, |_| live, |_| probe)
    }

    #[test]
    fn this_process_is_alive_only_while_it_runs_the_run() {
        let o = owner("boot/ns", 100, Some(5), STALE);
        assert_eq!(verdict(&o, true, Probe::Started(Some(5))), Verdict::Alive);
        assert_eq!(verdict(&o, false, Probe::Started(Some(5))), Verdict::Gone);
    }

    #[test]
    fn a_local_process_is_judged_by_its_pid_and_start_time_not_its_heartbeat() {
        let o = owner("boot/ns", 200, Some(9), STALE);
        // Alive, however old its heartbeat: a live local owner could still write.
        assert_eq!(verdict(&o, false, Probe::Started(Some(9))), Verdict::Alive);
        // Killed (SIGKILL leaves a fresh heartbeat behind): gone at once.
        let o = owner("boot/ns", 200, Some(9), FRESH);
        assert_eq!(verdict(&o, false, Probe::NoProcess), Verdict::Gone);
        // The pid now belongs to a process that started later: gone.
        assert_eq!(verdict(&o, false, Probe::Started(Some(10))), Verdict::Gone);
        // Our own pid, an earlier process's record (we reuse its pid): gone.
        let o = owner("boot/ns", 100, Some(1), FRESH);
        assert_eq!(verdict(&o, true, Probe::Started(Some(5))), Verdict::Gone);
    }

    #[test]
    fn an_owner_that_cannot_be_probed_is_judged_by_its_heartbeat() {
        for machine in ["other-boot/ns", "boot/other-ns"] {
            let o = owner(machine, 200, Some(9), FRESH);
            assert_eq!(verdict(&o, false, Probe::NoProcess), Verdict::Alive);
            let o = owner(machine, 200, Some(9), STALE);
            assert_eq!(verdict(&o, false, Probe::NoProcess), Verdict::Expired);
        }
        // Same machine but no /proc: the heartbeat decides.
        let o = owner("boot/ns", 200, Some(9), FRESH);
        assert_eq!(verdict(&o, false, Probe::Unknown), Verdict::Alive);
        let o = owner("boot/ns", 200, Some(9), STALE);
        assert_eq!(verdict(&o, false, Probe::Unknown), Verdict::Expired);
    }

    #[test]
    fn in_lease_mode_another_process_is_judged_by_its_heartbeat_alone() {
        let lease = Some(Duration::from_secs(3));
        let judged = |o: &RunOwner, live: bool, probe: Probe| {
            judge(o, &me(), NOW, lease, |_| live, |_| probe)
        };
        // A live local pid (a paused node) whose heartbeat is older than the
        // lease is expired; a fresh heartbeat is alive even with no process.
        let o = owner("boot/ns", 200, Some(9), NOW - 3_500);
        assert_eq!(judged(&o, false, Probe::Started(Some(9))), Verdict::Expired);
        let o = owner("boot/ns", 200, Some(9), NOW - 2_000);
        assert_eq!(judged(&o, false, Probe::NoProcess), Verdict::Alive);
        let o = owner("other/ns", 200, Some(9), NOW - 3_500);
        assert_eq!(judged(&o, false, Probe::Unknown), Verdict::Expired);
        // A run of this process not running here is gone at once; one
        // running here holds its lease only while it beats.
        let o = owner("boot/ns", 100, Some(5), NOW - 1_000);
        assert_eq!(judged(&o, false, Probe::Unknown), Verdict::Gone);
        assert_eq!(judged(&o, true, Probe::Unknown), Verdict::Alive);
        let o = owner("boot/ns", 100, Some(5), NOW - 60_000);
        assert_eq!(judged(&o, true, Probe::Unknown), Verdict::Expired);
        assert_eq!(beat_every(lease), Duration::from_secs(1));
        assert_eq!(beat_every(None), HEARTBEAT_EVERY);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn proc_tells_this_process_from_a_dead_and_a_reaped_one() {
        let me = this_process();
        assert!(me.pid_start.is_some());
        assert_eq!(probe(me.pid), Probe::Started(me.pid_start));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(probe(pid), Probe::NoProcess);
    }

    #[test]
    fn a_claim_is_live_until_dropped() {
        let claim = Claim::new(&Arc::from("run-x"), 1);
        let token = claim.lease().token().to_string();
        let beats =
            |writer| -> Vec<Write> { heartbeats(writer).into_iter().map(|(w, _)| w).collect() };
        // No beat before the claim is on disk.
        assert!(beats(1).is_empty());
        claim.lease().claimed();
        assert!(beats(2).is_empty());
        assert!(beats(1).iter().any(
            |w| matches!(w, Write::Heartbeat { token: t, run_id, .. } if *t == token && run_id == "run-x")
        ));
        // Released (its stop's batch), or lost: no more beats.
        claim.lease().released();
        assert!(beats(1).is_empty());
        assert!(check_takeover("run-x", &claim.owner(), None).is_err());
        let owner = claim.owner();
        drop(claim);
        assert!(check_takeover("run-x", &owner, None).is_ok());
        let claim = Claim::new(&Arc::from("run-y"), 3);
        forget(3);
        assert!(check_takeover("run-y", &claim.owner(), None).is_ok());
    }
}
