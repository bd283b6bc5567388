//! A stdio MCP server is fenced like a tool's processes: `agentry run` is
//! SIGKILLed (its warden first) during a slow MCP call; the server survives
//! it; `agentry resume` kills that server (its group was recorded with the
//! call) before it settles the call, starts the task's servers again, and
//! the run finishes once a human has decided.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentry_test_support::procs::{child_named, descendant_named};
use serde_json::Value;

use super::super::{path_str, task_dir};

const WAIT: Duration = Duration::from_secs(20);

/// agentry-mcp's test server, beside the binary.
fn test_server() -> PathBuf {
    let profile = Path::new(env!("CARGO_BIN_EXE_agentry")).parent().unwrap();
    agentry_test_support::peers::mcp_test_server(profile).unwrap()
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next())
        })
        .flatten()
        .is_some_and(|state| state != 'Z')
}

/// Process groups the store holds for the run's calls.
fn recorded_groups(store: &Path) -> usize {
    use agentry::Store;
    agentry::SqliteStore::open(store)
        .ok()
        .and_then(|s| s.load("mcp-fenced").ok().flatten())
        .map_or(0, |run| run.ledger.iter().map(|e| e.processes.len()).sum())
}

fn poll(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {WAIT:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn resume(store: &Path, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["resume", "mcp-fenced", "--json", "--store", path_str(store)])
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
    });
    (out.status.code().unwrap(), report)
}

#[test]
fn a_resume_fences_a_surviving_mcp_server_and_starts_the_servers_again() {
    let tmp = tempfile::tempdir().unwrap();
    // The server writes its marks outside the run's working directory: the
    // sandbox grants it exactly that directory.
    let marks_dir = tmp.path().join("marks");
    std::fs::create_dir(&marks_dir).unwrap();
    let marks = marks_dir.join("slow.txt");
    let server = test_server();
    let toml = format!(
        "goal = \"wait\"\n[budget]\nmax_steps = 10\n[tools]\ngrant = [\"srv.*\"]\n\
         [[tools.mcp]]\nname = \"srv\"\ncommand = [{:?}]\nenv = {{ TEST_CANCEL_FILE = {:?} }}\n\
         sandbox = {{ write = [{:?}] }}\n",
        server.display().to_string(),
        marks.display().to_string(),
        marks_dir.display().to_string()
    );
    let script = r#"{"turns":[
        {"tool_calls":[{"id":"s","name":"srv.slow","arguments":{"seconds":600}}]},
        {"tool_calls":[{"id":"r","name":"srv.read","arguments":{"text":"after the fence"}}]},
        {"tool_calls":[{"id":"f","name":"task.finish","arguments":{"answer":"ok"}}]}]}"#;
    let task = task_dir(&toml, script);
    let store = tmp.path().join("s.db");
    let mut run = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args([
            "run",
            path_str(task.path()),
            "--json",
            "--run-id",
            "mcp-fenced",
        ])
        .args(["--store", path_str(&store), "--approve", "srv.slow"])
        .args(["--workdir", path_str(&tmp.path().join("w"))])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    poll("the slow call starts", || {
        std::fs::read_to_string(&marks).is_ok_and(|t| t.contains("started"))
    });
    // Its group reaches the store beside the call, not before it: killed in
    // between (warden and agentry both), nothing would name the survivor.
    poll("the server's group is recorded", || {
        recorded_groups(&store) > 0
    });
    let server_pid = descendant_named(run.id(), path_str(&server)).expect("the MCP server");
    let warden = child_named(run.id(), agentry::tools::proc::WARDEN_NAME).expect("the warden");
    // The warden first, so the server outlives agentry: only the fence can stop it.
    assert!(
        Command::new("kill")
            .args(["-KILL", &warden.to_string()])
            .status()
            .unwrap()
            .success()
    );
    run.kill().unwrap();
    run.wait().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        alive(server_pid),
        "without the warden the server outlives agentry"
    );

    // The unannotated call may have taken effect: it waits for a human, and
    // the server that was running it is gone first.
    let (code, report) = resume(&store, &[]);
    assert_eq!(code, 3, "{report}");
    assert_eq!(report["status"], "awaiting_decision", "{report}");
    // Killed by the resume's fence, before it settled the call (not later).
    assert!(!alive(server_pid), "the surviving server was fenced");

    // Decided, the run goes on (another MCP call, on the servers the resume
    // started) and ends done.
    let (code, report) = resume(&store, &["--decide", "s=skip"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["stop_reason"], "done", "{report}");
}
