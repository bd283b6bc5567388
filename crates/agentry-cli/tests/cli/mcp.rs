//! `agentry mcp`: the real binary as an MCP server, driven by rmcp's client
//! over stdio (the binary as a child process) and over streamable HTTP on
//! 127.0.0.1. Every wait is bounded; events are awaited, never slept for.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, NumberOrString, ProgressNotificationParam,
    ProgressToken, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::*;

/// Bound on one tool call: the example runs take well under a second.
const CALL_BOUND: Duration = Duration::from_secs(60);

/// A client that forwards every progress notification to the test.
struct Progressed {
    tx: mpsc::UnboundedSender<ProgressNotificationParam>,
}

impl ClientHandler for Progressed {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.tx.send(params);
    }
}

type Client = RunningService<RoleClient, Progressed>;

/// `agentry mcp ARGS` as a child process with TMP as its temp directory (its
/// working and inline task directories go there), its stdio the transport.
pub(super) fn mcp_over_stdio(tmp: &Path, args: &[&std::ffi::OsStr]) -> TokioChildProcess {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.arg("mcp")
        .args(args)
        .env("TMPDIR", tmp)
        .current_dir(root())
        .env_remove("RUST_LOG");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    transport
}

/// `agentry mcp --store TMP/runs.db` as a child process with TMP as its temp
/// directory (its working and inline task directories go there), and the
/// session with it.
async fn stdio_client(tmp: &Path) -> (Client, mpsc::UnboundedReceiver<ProgressNotificationParam>) {
    let store = tmp.join("runs.db");
    let transport = mcp_over_stdio(tmp, &["--store".as_ref(), store.as_os_str()]);
    let (tx, rx) = mpsc::unbounded_channel();
    let client = tokio::time::timeout(CALL_BOUND, Progressed { tx }.serve(transport))
        .await
        .expect("initialize within the bound")
        .unwrap();
    (client, rx)
}

fn args(value: Value) -> serde_json::Map<String, Value> {
    let Value::Object(map) = value else {
        panic!("{value}")
    };
    map
}

/// Calls a tool, within the bound, and returns its result.
async fn call(client: &Client, name: &'static str, arguments: Value) -> CallToolResult {
    call_with(
        client,
        CallToolRequestParams::new(name).with_arguments(args(arguments)),
    )
    .await
}

async fn call_with(client: &Client, params: CallToolRequestParams) -> CallToolResult {
    tokio::time::timeout(CALL_BOUND, client.call_tool(params))
        .await
        .expect("the tool answers within the bound")
        .unwrap()
}

fn structured(result: &CallToolResult) -> &Value {
    assert_eq!(result.is_error, Some(false), "{result:?}");
    result
        .structured_content
        .as_ref()
        .expect("structured content")
}

/// The text of an `isError: true` result.
fn error_text(result: &CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// Polls `get_run` until the run has stopped; returns the last result.
async fn until_stopped(client: &Client, run_id: &str) -> Value {
    let deadline = Instant::now() + CALL_BOUND;
    loop {
        let got = call(client, "get_run", json!({"run_id": run_id})).await;
        let value = structured(&got).clone();
        if !value["stop_reason"].is_null() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "run {run_id} still going: {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// initialize and tools/list: the four tools with their schemas and hints;
/// run_task on examples/sum waits for the outcome (`agentry run --json`'s
/// fields) and sends one progress notification per step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serves_four_tools_and_runs_the_sum_example_with_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, mut progress) = stdio_client(tmp.path()).await;
    let info = client.peer_info().expect("initialized");
    assert_eq!(info.server_info.as_ref().unwrap().name, "agentry");

    let mut tools = client.list_all_tools().await.unwrap();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["cancel_run", "get_run", "list_runs", "run_task"]);
    let hints = |i: usize| tools[i].annotations.clone().expect("annotations");
    assert_eq!(hints(0).destructive_hint, Some(true), "cancel_run");
    assert_eq!(hints(1).read_only_hint, Some(true), "get_run");
    assert_eq!(hints(2).read_only_hint, Some(true), "list_runs");
    assert_eq!(hints(3).read_only_hint, Some(false), "run_task");
    assert_plain_field_types(&tools[3]);
    assert_eq!(tools[1].input_schema["required"], json!(["run_id"]));

    // rmcp's client puts a progress token of its own on every request; the
    // one set here is replaced, so the test checks they are all one token.
    let mut meta = RequestMetaObject::new();
    meta.set_progress_token(ProgressToken(NumberOrString::Number(7)));
    let mut params = CallToolRequestParams::new("run_task")
        .with_arguments(args(json!({"task_dir": "examples/sum"})));
    params.meta = Some(meta);
    let result = call_with(&client, params).await;
    let report = structured(&result);
    assert_eq!(report["stop_reason"], "done", "{report}");
    assert_eq!(report["answer"], "sum=23");
    assert_eq!(report["steps"], 3);
    assert_eq!(report["task_id"], "sum");
    assert_eq!(report["checks"].as_array().unwrap().len(), 2);
    assert!(report["budget"]["spent"].is_object(), "{report}");
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("stopped done"), "{text}");

    // One notification per step, each naming what the step did. The server
    // sends them in order, but rmcp's client handles each notification on a
    // task of its own, so they may reach this test in any order: compare the
    // set, sorted by step.
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let p = tokio::time::timeout(CALL_BOUND, progress.recv())
            .await
            .expect("a progress notification per step")
            .unwrap();
        seen.push(p);
    }
    seen.sort_by(|a, b| a.progress.total_cmp(&b.progress));
    let steps: Vec<f64> = seen.iter().map(|p| p.progress).collect();
    assert_eq!(steps, [1.0, 2.0, 3.0]);
    assert!(seen.iter().all(|p| p.total == Some(8.0)), "{seen:?}");
    assert!(
        seen.iter()
            .all(|p| p.progress_token == seen[0].progress_token),
        "{seen:?}"
    );
    let messages: Vec<&str> = seen.iter().filter_map(|p| p.message.as_deref()).collect();
    assert_eq!(
        messages,
        [
            "step 1: called fs.read",
            "step 2: called fs.write",
            "step 3: called task.finish"
        ]
    );
    client.cancel().await.unwrap();
}

/// Each of run_task's fields has its one plain type: "integer or null" made
/// the MCP Inspector send a typed number as a string.
fn assert_plain_field_types(tool: &rmcp::model::Tool) {
    let run_task = Value::Object((*tool.input_schema).clone());
    let types: Vec<(&str, &Value)> = run_task["properties"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, p)| (name.as_str(), &p["type"]))
        .collect();
    assert_eq!(
        types,
        [
            ("deadline", &json!("string")),
            ("files", &json!("object")),
            ("max_steps", &json!("integer")),
            ("policy", &json!("string")),
            ("script", &json!("object")),
            ("task", &json!("object")),
            ("task_dir", &json!("string")),
            ("wait", &json!("boolean")),
        ],
        "{run_task}"
    );
}

/// wait=false returns the run id at once; get_run follows it to its outcome,
/// list_runs lists it, and another server on the same store finds it there
/// (but cannot cancel it: not its run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_run_without_waiting_is_followed_by_get_run_and_list_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, _progress) = stdio_client(tmp.path()).await;
    let started = call(
        &client,
        "run_task",
        json!({"task_dir": "examples/sum", "wait": false}),
    )
    .await;
    let run_id = structured(&started)["run_id"].as_str().unwrap().to_string();
    assert_eq!(structured(&started)["status"], "running");

    let ended = until_stopped(&client, &run_id).await;
    assert_eq!(ended["stop_reason"], "done", "{ended}");
    assert_eq!(ended["outcome"]["answer"], "sum=23");
    assert_eq!(ended["started_here"], true);

    let listed = call(&client, "list_runs", json!({"all": true})).await;
    let runs = structured(&listed)["runs"].as_array().unwrap().clone();
    let ours: Vec<&Value> = runs
        .iter()
        .filter(|r| r["run_id"] == run_id.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{runs:?}");
    assert_eq!(ours[0]["stop_reason"], "done");
    // Unfinished only by default: the finished run is not listed.
    let unfinished = call(&client, "list_runs", json!({})).await;
    assert!(
        !structured(&unfinished)["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["run_id"] == run_id.as_str()),
        "{unfinished:?}"
    );
    client.cancel().await.unwrap();

    let (other, _progress) = stdio_client(tmp.path()).await;
    let got = call(&other, "get_run", json!({"run_id": run_id})).await;
    let stored = structured(&got);
    assert_eq!(stored["stop_reason"], "done", "{stored}");
    assert_eq!(stored["answer"], "sum=23");
    assert_eq!(stored["started_here"], false);
    let refused = call(&other, "cancel_run", json!({"run_id": run_id})).await;
    assert!(
        error_text(&refused).contains("was not started by this server"),
        "{refused:?}"
    );
    other.cancel().await.unwrap();
}

/// An inline task whose command runs a long while: cancel_run aborts it
/// (user_abort) and its process is gone.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_cancel_run_aborts_a_long_running_inline_task() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, _progress) = stdio_client(tmp.path()).await;
    let started = call(&client, "run_task", long_task("317")).await;
    let run_id = structured(&started)["run_id"].as_str().unwrap().to_string();
    tokio::task::spawn_blocking(|| wait_for_sleepers("317", true))
        .await
        .unwrap();
    let live = call(&client, "get_run", json!({"run_id": run_id})).await;
    assert!(structured(&live)["stop_reason"].is_null(), "{live:?}");

    let cancelled = call(&client, "cancel_run", json!({"run_id": run_id})).await;
    let report = structured(&cancelled);
    assert_eq!(report["stop_reason"], "user_abort", "{report}");
    assert_eq!(report["task_id"], "inline");
    tokio::task::spawn_blocking(|| wait_for_sleepers("317", false))
        .await
        .unwrap();
    client.cancel().await.unwrap();
}

/// The client going away (stdin closed) aborts the server's runs: their
/// processes are killed and the store records the stop.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_closing_the_session_aborts_the_runs_still_going() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("runs.db");
    let (client, _progress) = stdio_client(tmp.path()).await;
    let started = call(&client, "run_task", long_task("318")).await;
    let run_id = structured(&started)["run_id"].as_str().unwrap().to_string();
    tokio::task::spawn_blocking(|| wait_for_sleepers("318", true))
        .await
        .unwrap();
    client.cancel().await.unwrap();
    tokio::task::spawn_blocking(|| wait_for_sleepers("318", false))
        .await
        .unwrap();

    let deadline = Instant::now() + CALL_BOUND;
    loop {
        let out = agentry(&["runs", "--all", "--json", "--store", path_str(&store)]);
        let runs: Value = serde_json::from_slice(&out.stdout).unwrap();
        let run = runs
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["run_id"] == run_id.as_str())
            .cloned();
        if run
            .as_ref()
            .is_some_and(|r| r["stop_reason"] == "user_abort")
        {
            break;
        }
        assert!(Instant::now() < deadline, "not recorded as aborted: {runs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A client that gives up on a waiting run_task (drops the call: rmcp sends
/// `notifications/cancelled`) aborts the run.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_a_cancelled_request_aborts_its_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, _progress) = stdio_client(tmp.path()).await;
    let client = std::sync::Arc::new(client);
    let mut waiting = long_task("319");
    waiting["wait"] = json!(true);
    let call_client = client.clone();
    let pending = tokio::spawn(async move { call(&call_client, "run_task", waiting).await });
    tokio::task::spawn_blocking(|| wait_for_sleepers("319", true))
        .await
        .unwrap();
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    tokio::task::spawn_blocking(|| wait_for_sleepers("319", false))
        .await
        .unwrap();
    let deadline = Instant::now() + CALL_BOUND;
    loop {
        let listed = call(&client, "list_runs", json!({"all": true})).await;
        let runs = structured(&listed)["runs"].clone();
        if runs[0]["stop_reason"] == "user_abort" {
            break;
        }
        assert!(Instant::now() < deadline, "not aborted: {runs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An inline task (task.toml fields, script, files) whose one call sleeps
/// `secs` seconds, not waited for.
pub(super) fn long_task(secs: &str) -> Value {
    json!({
        "task": {
            "goal": "wait a long while",
            "budget": {"max_steps": 3, "deadline": "10m"},
            "tools": {"grant": ["proc.run", "fs.read"]},
        },
        "script": {"turns": [
            {"tool_calls": [{"id": "s", "name": "proc.run", "arguments": {"argv": ["sleep", secs]}}]},
        ]},
        "files": {"notes/readme.txt": "hello"},
        "wait": false,
    })
}

/// Bad arguments, a task that does not load and unknown run ids are errors
/// naming what is wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_bad_arguments_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, _progress) = stdio_client(tmp.path()).await;
    for (arguments, expected) in bad_run_task_arguments() {
        let result = call(&client, "run_task", arguments.clone()).await;
        let text = error_text(&result);
        assert!(
            text.contains(expected),
            "{arguments}: {text:?} lacks {expected:?}"
        );
    }
    for tool in ["get_run", "cancel_run"] {
        let result = call(&client, tool, json!({"run_id": "nope"})).await;
        let text = error_text(&result);
        assert!(text.contains("no run \"nope\""), "{tool}: {text}");
    }
    // No inline task of a refused call is left behind.
    let inline = tmp.path().join("agentry/inline");
    let left: Vec<_> = std::fs::read_dir(&inline)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    client.cancel().await.unwrap();
}

/// The inline task directories under `tmp`'s `agentry/inline/`.
pub(super) fn inline_dirs(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp.join("agentry/inline"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

/// Polls until no inline task directory is left (bounded).
pub(super) async fn until_no_inline_dirs(tmp: &Path) {
    let deadline = Instant::now() + CALL_BOUND;
    loop {
        let left = inline_dirs(tmp);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An inline task's directory lives as long as its run: there while it
/// runs, gone once it ends, whether it finished or was cancelled.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_an_inline_tasks_directory_goes_with_its_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (client, _progress) = stdio_client(tmp.path()).await;
    let finished = call(
        &client,
        "run_task",
        json!({
            "task": {"goal": "answer at once"},
            "script": {"turns": [
                {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "ok"}}]},
            ]},
        }),
    )
    .await;
    assert_eq!(structured(&finished)["stop_reason"], "done", "{finished:?}");
    until_no_inline_dirs(tmp.path()).await;

    let started = call(&client, "run_task", long_task("321")).await;
    let run_id = structured(&started)["run_id"].as_str().unwrap().to_string();
    tokio::task::spawn_blocking(|| wait_for_sleepers("321", true))
        .await
        .unwrap();
    let going = inline_dirs(tmp.path());
    assert_eq!(going.len(), 1, "{going:?}");
    assert!(going[0].join("inline/task.toml").is_file(), "{going:?}");
    let cancelled = call(&client, "cancel_run", json!({"run_id": run_id})).await;
    assert_eq!(structured(&cancelled)["stop_reason"], "user_abort");
    until_no_inline_dirs(tmp.path()).await;
    client.cancel().await.unwrap();
}

/// run_task arguments that are refused, and what the error says.
fn bad_run_task_arguments() -> Vec<(Value, &'static str)> {
    vec![
        (json!({}), "give exactly one of task_dir"),
        (
            json!({"task_dir": "examples/sum", "task": {"goal": "g"}}),
            "give exactly one of task_dir",
        ),
        (
            json!({"task_dir": "examples/no-such-task"}),
            "examples/no-such-task: task directory does not exist",
        ),
        (
            json!({"task": {"goal": "g", "budget": {"max_steps": "ten"}}, "script": {"turns": []}}),
            "budget.max_steps: expected a positive integer",
        ),
        (
            json!({"task": {"goal": "g", "budget": {"deadline": null}}, "script": {"turns": []}}),
            "task.budget.deadline: null is not allowed",
        ),
        (
            json!({"task": {"goal": "g"}}),
            "script: missing; an inline task needs",
        ),
        (
            json!({"task": {"goal": "g"}, "script": {"turns": []}, "files": {"../x": "y"}}),
            "files[\"../x\"]: expected a relative path",
        ),
        (
            json!({"task_dir": "examples/sum", "script": {"turns": []}}),
            "script: applies to an inline task (task) only",
        ),
        (
            json!({"task_dir": "examples/sum", "policy": "gemini:x"}),
            "policy: \"gemini:x\": expected script:FILE",
        ),
        (
            json!({"task_dir": "examples/sum", "deadline": "soon"}),
            "deadline: \"soon\": expected a duration",
        ),
        (
            json!({"task_dir": "examples/sum", "max_steps": 0}),
            "max_steps: expected 1 to",
        ),
        // What a form-based client (the MCP Inspector) sends for a typed
        // number or a ticked box: named, with what was expected.
        (
            json!({"task_dir": "examples/sum", "max_steps": "10"}),
            "max_steps: expected a non-negative integer, got a string (\"10\")",
        ),
        (
            json!({"task_dir": "examples/sum", "wait": "false"}),
            "wait: expected true or false, got a string (\"false\")",
        ),
        (
            json!({"task_dir": "examples/sum", "bogus": 1}),
            "bogus: not an argument of run_task; its arguments are: task_dir,",
        ),
    ]
}
