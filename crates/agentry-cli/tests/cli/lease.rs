//! `--lease`: processes sharing a store judge a run's owner by its heartbeat
//! alone. A `run` stopped (SIGSTOP, as a paused or partitioned node) past its
//! lease is taken over by a `resume` on the same file; when it goes on, its
//! next write is refused, it stops the run and says it was taken over.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentry::Store as _;
use agentry_test_support::procs::unique_secs;

use super::super::{path_str, stderr, task_dir, wait_for_sleepers};

const WAIT: Duration = Duration::from_secs(10);

/// One `proc.run` call that sleeps `secs` in a tree of two, then finish.
fn nap_task(secs: &str) -> tempfile::TempDir {
    let turns = serde_json::json!([
        {"tool_calls": [{"id": "nap", "name": "proc.run",
            "arguments": {"argv": ["sh", "-c", format!("sleep {secs} & sleep {secs}")]}}]},
        {"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "ok"}}]},
    ]);
    task_dir(
        "goal = \"nap\"\n[budget]\nmax_steps = 10\ndeadline = \"120s\"\n[tools]\ngrant = [\"proc.run\"]\n",
        &serde_json::json!({ "turns": turns }).to_string(),
    )
}

/// Sends `signal` (`-STOP`, `-CONT`, ...) to process `pid`.
pub(super) fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}");
}

fn resume(store: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["resume", "leased", "--store", path_str(store)])
        .args(["--lease", "1s", "--decide", "nap=skip", "--json"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// `resume --lease` as soon as the owner's lease has expired (exit 2,
/// "is being run by", until then), within 10 s.
/// `resume --lease` until the stopped owner's lease has run out. A SIGSTOP
/// that landed inside the owner's lease renewal leaves SQLite's write lock
/// held by a frozen process ("database is locked": no one can write the file
/// until it runs again): the owner is let run a moment and stopped again.
fn take_over(store: &Path, owner: u32) -> Output {
    let deadline = Instant::now() + WAIT;
    loop {
        let out = resume(store);
        let owned = out.status.code() == Some(2) && stderr(&out).contains("is being run by");
        let locked = stderr(&out).contains("database is locked");
        if !(owned || locked) || Instant::now() >= deadline {
            return out;
        }
        if locked {
            signal(owner, "-CONT");
            std::thread::sleep(Duration::from_millis(30));
            signal(owner, "-STOP");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the stopped run did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A leased `run` SIGSTOPped mid-call is taken over by `resume --lease` (which
/// kills its tools and finishes the run); on SIGCONT the old owner's next
/// write is refused: it exits 1 saying the run was taken over at epoch 2,
/// and the stored run is the new owner's.
#[test]
fn a_stopped_leased_run_is_taken_over_and_the_old_owner_stops() {
    let secs = unique_secs(53);
    let task = nap_task(&secs);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s.db");
    let mut first = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["run", path_str(task.path()), "--run-id", "leased"])
        .args(["--store", path_str(&store), "--lease", "1s"])
        .args(["--workdir", path_str(&tmp.path().join("w"))])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_sleepers(&secs, true);
    signal(first.id(), "-STOP");

    let out = take_over(&store, first.id());
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("fenced"),
        "the new owner killed the old one's tools: {}",
        stderr(&out)
    );
    wait_for_sleepers(&secs, false);

    signal(first.id(), "-CONT");
    let status = wait_exit(&mut first);
    let mut said = String::new();
    std::io::Read::read_to_string(&mut first.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {said}");
    assert!(
        said.contains("run leased was taken over by") && said.contains("(epoch 2)"),
        "{said}"
    );

    let run = agentry::SqliteStore::open(&store)
        .unwrap()
        .load("leased")
        .unwrap()
        .unwrap();
    let checkpoint = run.checkpoint.unwrap();
    assert_eq!(
        checkpoint.snapshot.control.stop_reason,
        Some(agentry::StopReason::Done)
    );
    assert_eq!(run.owner, None, "the new owner released it at its stop");
    let nap = run.ledger.iter().find(|r| r.call_id == "nap").unwrap();
    let outcome = nap.outcome.as_ref().unwrap();
    assert!(
        outcome.error.is_some() && outcome.data.is_none(),
        "the call is the skip the new owner recorded: {outcome:?}"
    );
}
