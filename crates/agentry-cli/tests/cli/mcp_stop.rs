//! `agentry mcp` stopped by a signal, as systemd and `docker stop` stop it
//! (SIGTERM) and as ctrl-c does (SIGINT): the runs still going are aborted
//! and recorded as stopped, their processes are gone, and the server exits 0.

use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::*;

const BOUND: Duration = Duration::from_secs(60);

/// The run's row in `agentry runs --all --json`.
fn stored_run(store: &Path, run_id: &str) -> Value {
    let out = agentry(&["runs", "--all", "--json", "--store", path_str(store)]);
    let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .find(|r| r["run_id"] == run_id)
        .cloned()
        .unwrap_or_else(|| panic!("no run {run_id} in {runs}"))
}

/// `agentry mcp --store` on pipes, one inline run in flight (its `sleep`
/// running), then `signal`: the server exits 0 on its own, the run is
/// stored as stopped by `user_abort`, its `sleep` is gone.
async fn a_signal_stops_the_server_and_its_runs(signal: rustix::process::Signal, secs: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("runs.db");
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["mcp", "--store", path_str(&store)])
        .env("TMPDIR", tmp.path())
        .current_dir(root())
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pipes = (server.stdout.take().unwrap(), server.stdin.take().unwrap());
    let client = tokio::time::timeout(BOUND, ().serve(pipes))
        .await
        .expect("initialize within the bound")
        .unwrap();
    let arguments = json!({
        "task": {
            "goal": "wait a long while",
            "budget": {"max_steps": 3, "deadline": "10m"},
            "tools": {"grant": ["proc.run"]},
        },
        "script": {"turns": [
            {"tool_calls": [{"id": "s", "name": "proc.run", "arguments": {"argv": ["sleep", secs]}}]},
        ]},
        "wait": false,
    });
    let Value::Object(arguments) = arguments else {
        unreachable!()
    };
    let started = tokio::time::timeout(
        BOUND,
        client.call_tool(CallToolRequestParams::new("run_task").with_arguments(arguments)),
    )
    .await
    .unwrap()
    .unwrap();
    let run_id = started.structured_content.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let sleeping = secs.to_string();
    tokio::task::spawn_blocking(move || wait_for_sleepers(&sleeping, true))
        .await
        .unwrap();
    assert_eq!(stored_run(&store, &run_id)["status"], "running");

    let pid = rustix::process::Pid::from_raw(server.id().unwrap() as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
    let status = tokio::time::timeout(BOUND, server.wait())
        .await
        .expect("the server exits on its own")
        .unwrap();
    assert!(status.success(), "{signal:?}: {status:?}");
    let sleeping = secs.to_string();
    tokio::task::spawn_blocking(move || wait_for_sleepers(&sleeping, false))
        .await
        .unwrap();
    // Recorded before the process exited: no polling.
    let run = stored_run(&store, &run_id);
    assert_eq!(run["stop_reason"], "user_abort", "{run}");
    assert_ne!(run["status"], "running", "{run}");
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sigterm_aborts_the_runs_and_records_their_stop() {
    a_signal_stops_the_server_and_its_runs(rustix::process::Signal::TERM, "331").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sigint_aborts_the_runs_and_records_their_stop() {
    a_signal_stops_the_server_and_its_runs(rustix::process::Signal::INT, "332").await;
}
