//! The warden, told through the spawn path every process tool takes
//! (`ProcessGroup::spawn`): what it kills when its host dies — a spawn
//! whose group the host never got to list included — and what it has
//! forgotten. Each test has a warden of its own (the host process's is
//! shared by every test) and plays the host's death by closing its pipe,
//! which is what the kernel does for a killed host.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Mutex, PoisonError};

use agentry_sandbox::{CallSandbox, Sandbox, SandboxPlaces, SandboxSpec};
use tokio::process::Command;

use super::super::env::{ENV_SPAWN_ID, next_spawn_id};
use super::super::group::ProcessGroup;
use super::super::warden::{Line, Tell, Warden};
use super::*;

/// How long a killed leader may take to be reaped: only a failing test
/// waits this long.
const DEATH: Duration = Duration::from_secs(20);

/// When the host dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Death {
    /// Just before it would list a spawn's group: between the spawn and
    /// its `+` line, the window a SIGKILL under load can hit.
    BeforeTheGroupIsListed,
    /// When the test says so ([`OwnWarden::host_dies`]).
    Later,
}

#[derive(Debug)]
struct OwnWarden {
    warden: Mutex<Option<Warden>>,
    /// The warden's process once its host has died.
    orphaned: Mutex<Option<std::process::Child>>,
    death: Death,
}

impl OwnWarden {
    fn start(death: Death) -> &'static OwnWarden {
        Box::leak(Box::new(OwnWarden {
            warden: Mutex::new(Some(Warden::start().expect("sh"))),
            orphaned: Mutex::new(None),
            death,
        }))
    }

    /// Closes the pipe, as the kernel does when the host dies.
    fn close(&self) {
        let warden = self
            .warden
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(warden) = warden {
            *self.orphaned.lock().unwrap() = Some(warden.close());
        }
    }

    /// The host dies (if it did not yet); returns once the warden's kill
    /// pass has ended (it exits after it).
    fn host_dies(&self) {
        self.close();
        let mut orphaned = self.orphaned.lock().unwrap();
        let status = orphaned.as_mut().expect("the warden").wait().unwrap();
        assert!(status.success(), "the warden ended with {status}");
    }
}

impl Tell for OwnWarden {
    fn tell(&self, line: Line<'_>) {
        if self.death == Death::BeforeTheGroupIsListed && matches!(line, Line::Group { .. }) {
            return self.close();
        }
        let mut warden = self.warden.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(warden) = warden.as_mut() {
            warden.send(&line.to_string()).unwrap();
        }
    }
}

/// `sleep 600` in its own group, marked with `spawn_id` as every spawn is.
fn sleeper(spawn_id: &str) -> Command {
    let mut command = Command::new("sleep");
    command
        .arg("600")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env(ENV_SPAWN_ID, spawn_id)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// How the group's leader ended, once it has.
async fn leader_end(group: &mut ProcessGroup) -> ExitStatus {
    let status = tokio::time::timeout(DEATH, group.wait_leader())
        .await
        .expect("the leader still runs after the warden's kill pass")
        .unwrap();
    group.kill_leftovers().await;
    status
}

/// Whether `pid` (a child of this process, not reaped) is dead or has a
/// SIGKILL pending: a signal the warden sent before it exited is one or the
/// other by now, whatever the scheduler did since.
fn sigkill_sent(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .to_string()
    };
    let pending = |name: &str| u64::from_str_radix(&field(name), 16).unwrap();
    let sigkill = 1 << (9 - 1);
    field("State:").starts_with(['Z', 'X'])
        || (pending("SigPnd:") | pending("ShdPnd:")) & sigkill != 0
}

/// The race of issue 34: the host is SIGKILLed after the spawn but before
/// the warden learns the group. The mark, told before the spawn, finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_whose_host_dies_before_its_group_is_listed_is_killed_by_its_mark() {
    let warden = OwnWarden::start(Death::BeforeTheGroupIsListed);
    let spawn_id = next_spawn_id();
    let mut group = ProcessGroup::spawn(&mut sleeper(&spawn_id), spawn_id, warden).unwrap();
    warden.host_dies();
    assert_eq!(leader_end(&mut group).await.signal(), Some(9));
}

/// The same under the default kernel sandbox: the spawned leader and the
/// namespace's init carry the host's environment, not the mark; the warden
/// finds the command inside the call's user and PID namespaces by its mark
/// in the host's `/proc`, and the leader then exits the way the command
/// did (see `agentry-sandbox`'s `child/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandboxed_spawn_whose_host_dies_before_its_group_is_listed_is_killed_by_its_mark() {
    let dir = tempfile::tempdir().unwrap();
    let places = SandboxPlaces {
        workdir: dir.path().join("work"),
        temp_parent: dir.path().join("tmp"),
        deny: Vec::new(),
    };
    std::fs::create_dir(&places.workdir).unwrap();
    let sandbox = Sandbox::prepare(&SandboxSpec::default(), &places).unwrap();
    let call: CallSandbox = sandbox.call().unwrap();
    let warden = OwnWarden::start(Death::BeforeTheGroupIsListed);
    let spawn_id = next_spawn_id();
    let mut command = sleeper(&spawn_id);
    command.current_dir(&places.workdir);
    call.apply(command.as_std_mut());
    let mut group = ProcessGroup::spawn(&mut command, spawn_id, warden).unwrap();
    warden.host_dies();
    assert_eq!(leader_end(&mut group).await.signal(), Some(9));
}

/// A group's mark goes with the group (`- pgid`), and a failed spawn's
/// with it (`u`): the warden's list holds only what runs, and a process
/// that still carries a forgotten mark is not killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mark_is_forgotten_with_its_group_and_when_its_spawn_fails() {
    let warden = OwnWarden::start(Death::Later);
    let listed = next_spawn_id();
    let mut group = ProcessGroup::spawn(&mut sleeper(&listed), listed, warden).unwrap();
    warden.tell(Line::Gone { pgid: group.pgid() });
    let failed = next_spawn_id();
    let mut missing = sleeper(&failed);
    missing.as_std_mut().env("PATH", "/nonexistent");
    ProcessGroup::spawn(&mut missing, failed.clone(), warden).unwrap_err();
    let mut carrier = sleeper(&failed).spawn().unwrap();
    warden.host_dies();
    assert!(
        !sigkill_sent(group.child.id().unwrap()),
        "the forgotten group's leader is spared"
    );
    assert!(
        !sigkill_sent(carrier.id().unwrap()),
        "a process carrying the failed spawn's mark is spared"
    );
    carrier.kill().await.unwrap();
    group.terminate(Duration::ZERO).await;
}
