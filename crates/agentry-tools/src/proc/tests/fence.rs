//! Fencing a run before a resume: recorded groups whose leader is still the
//! process that was started, and every process carrying the run's marks, are
//! killed; a group id now used by another process, and the processes of a
//! same-named run of another store, are not touched.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use agentry_protocol::ProcessGroupRecord;

use super::super::warden::start_time;
use super::*;

/// `sh -c 'sleep N & sleep N & wait'` in its own group, with `env` set.
fn tree(env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "sleep 60 & sleep 60 & wait"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("sh")
}

fn members(pgid: i32) -> usize {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| {
            std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                let f: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or("", |(_, r)| r)
                    .split_whitespace()
                    .collect();
                f.get(2).and_then(|g| g.parse::<i32>().ok()) == Some(pgid) && f[0] != "Z"
            })
        })
        .count()
}

fn wait_members(pgid: i32, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while members(pgid) != n {
        assert!(
            Instant::now() < deadline,
            "group {pgid}: {} members",
            members(pgid)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_recorded_group_and_processes_marked_with_the_run_are_killed() {
    let run_id = format!("fence-{}-{}", std::process::id(), line!());
    let mut recorded = tree(&[]);
    let mark = format!("mark-{run_id}");
    let mut marked = tree(&[(ENV_RUN_ID, &run_id), (ENV_RUN_MARK, &mark)]);
    let (g1, g2) = (recorded.id() as i32, marked.id() as i32);
    wait_members(g1, 3);
    wait_members(g2, 3);
    let record = ProcessGroupRecord {
        pgid: g1,
        leader_start: start_time(g1),
        spawn_id: "none-such".into(),
    };

    let fenced = fence(&run_id, &mark, &[record], Duration::from_secs(5)).expect("fenced");

    assert_eq!(fenced.groups, [g1]);
    assert_eq!(members(g1), 0);
    // Every process of the marked tree carries the mark (inherited).
    assert_eq!(fenced.processes.len(), 3, "{fenced:?}");
    assert_eq!(members(g2), 0);
    let _ = recorded.wait();
    let _ = marked.wait();
}

#[test]
fn a_group_id_now_held_by_another_process_is_spared() {
    let mut other = tree(&[]);
    let pgid = other.id() as i32;
    wait_members(pgid, 3);
    let record = ProcessGroupRecord {
        pgid,
        // Not this leader: the recorded one started at another time.
        leader_start: start_time(pgid).map(|s| s + 1),
        spawn_id: "none-such".into(),
    };

    let fenced = fence(
        "fence-spare",
        "mark-spare",
        &[record],
        Duration::from_secs(1),
    )
    .expect("fenced");

    assert!(fenced.is_empty(), "{fenced:?}");
    assert_eq!(members(pgid), 3);
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pgid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = other.wait();
}

/// A run id is unique within one store only: a process of another store's run
/// of the same id (its own mark) is spared; one with this run's mark, whatever
/// its run id says, is killed.
#[test]
fn a_same_named_run_of_another_store_is_spared() {
    let run_id = format!("fence-{}-{}", std::process::id(), line!());
    let mut other = tree(&[(ENV_RUN_ID, &run_id), (ENV_RUN_MARK, "mark-of-store-a")]);
    let mut ours = tree(&[(ENV_RUN_MARK, "mark-of-store-b")]);
    let (g1, g2) = (other.id() as i32, ours.id() as i32);
    wait_members(g1, 3);
    wait_members(g2, 3);

    let fenced = fence(&run_id, "mark-of-store-b", &[], Duration::from_secs(5)).expect("fenced");

    assert_eq!(fenced.processes.len(), 3, "{fenced:?}");
    assert_eq!(members(g2), 0);
    assert_eq!(members(g1), 3, "the other store's run keeps its processes");
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(g1),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = other.wait();
    let _ = ours.wait();
}
