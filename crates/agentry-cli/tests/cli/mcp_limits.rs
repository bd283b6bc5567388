//! What an `agentry mcp` server holds is bounded: sessions left idle are
//! closed (`--session-idle-timeout`), at most `--max-runs` runs go at once,
//! and every inline task directory goes with its run. The real binary, driven
//! by rmcp's client and by plain HTTP requests.

use std::time::{Duration, Instant};

use futures::StreamExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use super::mcp::{inline_dirs, long_task, mcp_over_stdio, until_no_inline_dirs};
use super::mcp_http::{TOKEN, start_http_with, token_file, transport};
use crate::*;

/// Bound on each call, and on each wait for the server to act.
const BOUND: Duration = Duration::from_secs(60);

/// Clients that initialize and leave.
const LEAVERS: usize = 200;

/// Long enough after the last request for a 1 s idle timeout to close a
/// session: the timeout, then sweeps every 250 ms, with room to spare.
const IDLE_WAIT: Duration = Duration::from_secs(3);

type Client = RunningService<RoleClient, ()>;

async fn call(client: &Client, name: &'static str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("{arguments}")
    };
    let params = CallToolRequestParams::new(name).with_arguments(arguments);
    tokio::time::timeout(BOUND, client.call_tool(params))
        .await
        .expect("the tool answers within the bound")
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn report(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    result
        .structured_content
        .clone()
        .expect("structured content")
}

/// An inline task that sleeps `secs` seconds, then finishes (`wait` true:
/// the call waits for the outcome, quiet all the while).
fn quiet_task(secs: &str) -> Value {
    json!({
        "task": {
            "goal": "wait quietly",
            "budget": {"max_steps": 3, "deadline": "1m"},
            "tools": {"grant": ["proc.run"]},
        },
        "script": {"turns": [
            {"tool_calls": [{"id": "s", "name": "proc.run", "arguments": {"argv": ["sleep", secs]}}]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "slept"}}]},
        ]},
    })
}

/// One `initialize` POST, the response read whole; the session id it got.
async fn initialize_and_leave(client: &reqwest::Client, url: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "leaver", "version": "1"}}});
    let response = client
        .post(url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let id = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_string();
    response.bytes().await.unwrap();
    id
}

/// A `tools/list` in session `id`: its status (404 once the session is gone).
async fn list_in(client: &reqwest::Client, url: &str, id: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let response = client
        .post(url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", id)
        .header("mcp-protocol-version", "2025-06-18")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    response.status().as_u16()
}

/// 200 clients initialize and leave: once the idle timeout has passed their
/// sessions are gone (each id is answered 404). A session whose `run_task`
/// waits quietly for longer than the timeout is not idle: its run ends
/// `done`, not aborted with its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_http_closes_the_sessions_left_idle() {
    agentry_models::install_crypto_provider();
    let tmp = tempfile::tempdir().unwrap();
    let tokens = token_file(tmp.path(), TOKEN);
    let (_server, url) = start_http_with(
        &[
            "--no-store",
            "--token-file",
            path_str(&tokens),
            "--session-idle-timeout",
            "1s",
        ],
        &[("TMPDIR", path_str(tmp.path()))],
    );
    let waiting = tokio::time::timeout(BOUND, ().serve(transport(&url, TOKEN)))
        .await
        .expect("initialize within the bound")
        .unwrap();
    let waited = tokio::spawn(async move {
        let result = call(&waiting, "run_task", quiet_task("6")).await;
        waiting.cancel().await.unwrap();
        result
    });

    let http = reqwest::Client::new();
    let mut ids: Vec<String> = futures::stream::iter(0..LEAVERS)
        .map(|_| initialize_and_leave(&http, &url))
        .buffer_unordered(8)
        .collect()
        .await;
    // A session made now: the first of the 200 may already have been idle
    // past the timeout on a loaded machine.
    let fresh = initialize_and_leave(&http, &url).await;
    assert_eq!(
        list_in(&http, &url, &fresh).await,
        200,
        "a fresh session is served"
    );
    ids.push(fresh);
    // Every request in a session starts its idle time again, so nothing is
    // polled: the timeout (1 s) and a generous margin for the sweep pass.
    tokio::time::sleep(IDLE_WAIT).await;
    for id in &ids {
        assert_eq!(list_in(&http, &url, id).await, 404, "{id} was kept");
    }

    let result = tokio::time::timeout(BOUND, waited).await.unwrap().unwrap();
    let outcome = report(&result);
    assert_eq!(outcome["stop_reason"], "done", "{outcome}");
    assert_eq!(outcome["answer"], "slept");
}

/// `--max-runs 2`: a third run is refused with a tool error naming the flag
/// (nothing written for it), and starts once one of the two has ended.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_max_runs_refuses_a_run_past_the_cap() {
    let tmp = tempfile::tempdir().unwrap();
    let transport = mcp_over_stdio(
        tmp.path(),
        &["--no-store".as_ref(), "--max-runs".as_ref(), "2".as_ref()],
    );
    let client = tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize within the bound")
        .unwrap();
    let first = report(&call(&client, "run_task", long_task("331")).await);
    report(&call(&client, "run_task", long_task("331")).await);
    let refused = call(&client, "run_task", long_task("332")).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let why = text(&refused);
    assert!(
        why.contains("2 runs already running") && why.contains("--max-runs 2"),
        "{why}"
    );
    assert!(!why.contains("Too many open files"), "{why}");
    // Also a task directory's run: the cap is on runs, not inline tasks.
    let refused = call(&client, "run_task", json!({"task_dir": "examples/sum"})).await;
    assert!(
        text(&refused).contains("2 runs already running"),
        "{refused:?}"
    );
    assert_eq!(inline_dirs(tmp.path()).len(), 2);

    let cancelled = call(&client, "cancel_run", json!({"run_id": first["run_id"]})).await;
    assert_eq!(report(&cancelled)["stop_reason"], "user_abort");
    // Its slot is given back once its ending is done (bounded).
    let deadline = Instant::now() + BOUND;
    let third = loop {
        let result = call(&client, "run_task", long_task("332")).await;
        if result.is_error != Some(true) {
            break report(&result);
        }
        assert!(text(&result).contains("already running"), "{result:?}");
        assert!(Instant::now() < deadline, "the slot was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(third["status"], "running");
    client.cancel().await.unwrap();
    tokio::task::spawn_blocking(|| {
        wait_for_sleepers("331", false);
        wait_for_sleepers("332", false);
    })
    .await
    .unwrap();
}

/// Without --max-runs the cap comes from the open-file limit: under
/// `ulimit -n 128`, (128 - 64) / 16 = 4 runs go, each with its process, and
/// the fifth is refused with the clear error, not "Too many open files".
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_max_runs_defaults_from_the_open_file_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new("prlimit");
    command
        .args(["--nofile=128:128", "--"])
        .arg(env!("CARGO_BIN_EXE_agentry"))
        .args(["mcp", "--no-store"])
        .env("TMPDIR", tmp.path())
        .current_dir(root())
        .env_remove("RUST_LOG");
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let client = tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize within the bound")
        .unwrap();
    for _ in 0..4 {
        report(&call(&client, "run_task", long_task("333")).await);
    }
    let refused = call(&client, "run_task", long_task("333")).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let why = text(&refused);
    assert!(why.contains("4 runs already running"), "{why}");
    assert!(why.contains("--max-runs 4"), "{why}");
    let listed = call(&client, "list_runs", json!({"all": true})).await;
    let runs = report(&listed)["runs"].clone();
    assert_eq!(runs.as_array().unwrap().len(), 4, "{runs}");
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "running"),
        "{runs}"
    );
    client.cancel().await.unwrap();
    tokio::task::spawn_blocking(|| wait_for_sleepers("333", false))
        .await
        .unwrap();
}

/// Inline runs by the dozen leave no task directory behind: ones that
/// finish, fail, do not start, are cancelled with cancel_run, or are given
/// up by their client (issue 33: 1,400 directories after as many calls).
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_inline_task_directories_do_not_pile_up() {
    let tmp = tempfile::tempdir().unwrap();
    let transport = mcp_over_stdio(tmp.path(), &["--no-store".as_ref()]);
    let client = std::sync::Arc::new(
        tokio::time::timeout(BOUND, ().serve(transport))
            .await
            .expect("initialize within the bound")
            .unwrap(),
    );
    let finishing = json!({
        "task": {"goal": "answer at once"},
        "script": {"turns": [
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "ok"}}]},
        ]},
    });
    let failing = json!({
        "task": {"goal": "fail its check", "accept": [{"file": "missing.txt", "equals": "x"}]},
        "script": {"turns": [
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "no"}}]},
        ]},
    });
    let unstartable = json!({
        "task": {"goal": "no such policy"},
        "policy": "script:no-such-script.json",
    });
    for round in 0..6 {
        let done = report(&call(&client, "run_task", finishing.clone()).await);
        assert_eq!(done["stop_reason"], "done", "{done}");
        let failed = report(&call(&client, "run_task", failing.clone()).await);
        assert_ne!(failed["stop_reason"], "done", "{failed}");
        let refused = call(&client, "run_task", unstartable.clone()).await;
        assert_eq!(refused.is_error, Some(true), "{refused:?}");

        let secs = format!("{}", 340 + round);
        let started = report(&call(&client, "run_task", long_task(&secs)).await);
        let cancelled = call(&client, "cancel_run", json!({"run_id": started["run_id"]})).await;
        assert_eq!(report(&cancelled)["stop_reason"], "user_abort");

        // A waiting call its client gives up on.
        let secs = format!("{}", 360 + round);
        let mut waiting = long_task(&secs);
        waiting["wait"] = json!(true);
        let caller = client.clone();
        let pending = tokio::spawn(async move { call(&caller, "run_task", waiting).await });
        let alive = secs.clone();
        tokio::task::spawn_blocking(move || wait_for_sleepers(&alive, true))
            .await
            .unwrap();
        pending.abort();
        let _ = pending.await;
        tokio::task::spawn_blocking(move || wait_for_sleepers(&secs, false))
            .await
            .unwrap();
    }
    until_no_inline_dirs(tmp.path()).await;
    // The holder of them all is left, empty.
    let holder = tmp.path().join("agentry/inline");
    assert!(holder.is_dir() && inline_dirs(tmp.path()).is_empty());
}
