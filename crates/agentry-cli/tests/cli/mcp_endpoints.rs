//! A client never chooses where `agentry mcp`'s keys go: an inline task that
//! names its own model server, fallback or child model server, or MCP server
//! URL is refused naming the field, and nothing reaches that server, unless
//! the operator started the server with `--allow-client-endpoints`. The real
//! binary over stdio with `OPENAI_API_KEY` in its environment; the "client's
//! server" is a real listener of the test.

use std::io::Read;
use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use crate::*;

/// Bound on the session's start, on each call and on the opted-in request.
const BOUND: Duration = Duration::from_secs(60);

/// The key the server holds, which the client must never get.
const KEY: &str = "sk-host-key-4f1c9a7e2b";

async fn client(tmp: &Path, extra: &[&str]) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.arg("mcp")
        .arg("--no-store")
        .args(extra)
        .env("TMPDIR", tmp)
        .env("OPENAI_API_KEY", KEY)
        .current_dir(root())
        .env_remove("RUST_LOG");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize within the bound")
        .unwrap()
}

async fn run_task(client: &RunningService<RoleClient, ()>, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("{arguments}")
    };
    let params = CallToolRequestParams::new("run_task").with_arguments(arguments);
    tokio::time::timeout(BOUND, client.call_tool(params))
        .await
        .expect("run_task answers within the bound")
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// An inline task whose `policy` (and `tools`) are `policy` (and `tools`).
fn inline(policy: Value, tools: Value) -> Value {
    json!({
        "task": {
            "goal": "say hello",
            "budget": {"max_steps": 2, "deadline": "60s"},
            "policy": policy,
            "tools": tools,
        },
        "wait": false,
    })
}

/// Each way an inline task names an endpoint, and the field the refusal names.
fn attacks(url: &str) -> Vec<(Value, &'static str)> {
    let model = json!({"model": "openai:x"});
    let with = |key: &str, value: Value| {
        let mut policy = model.clone();
        policy[key] = value;
        policy
    };
    vec![
        (
            inline(with("base_url", json!(url)), json!({})),
            "policy.base_url",
        ),
        (
            inline(
                with(
                    "fallback",
                    json!(["anthropic:y", {"model": "openai:z", "base_url": url}]),
                ),
                json!({}),
            ),
            "policy.fallback[1].base_url",
        ),
        (
            inline(
                with(
                    "models",
                    json!({"far": {"model": "openai:x", "base_url": url}}),
                ),
                json!({}),
            ),
            "policy.models.far.base_url",
        ),
        (
            inline(
                model.clone(),
                json!({"mcp": [{
                    "name": "remote",
                    "url": format!("{url}/mcp"),
                    "headers": {"Authorization": "Bearer ${OPENAI_API_KEY}"},
                }]}),
            ),
            "tools.mcp[0].url",
        ),
    ]
}

/// Before: `run_task {"task": {"policy": {"model": "openai:x", "base_url":
/// "http://<client>"}}}` sent `Authorization: Bearer <the server's key>` to
/// the client's URL. Now each such field is refused, naming it, and the
/// listener is never connected to; with `--allow-client-endpoints` the
/// operator lets the client choose, and the request arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_task_cannot_send_the_servers_key_to_a_url_of_its_choosing() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());

    let tmp = tempfile::tempdir().unwrap();
    let refusing = client(tmp.path(), &[]).await;
    for (arguments, field) in attacks(&url) {
        let result = run_task(&refusing, arguments.clone()).await;
        assert_eq!(result.is_error, Some(true), "{arguments}: {result:?}");
        let text = text(&result);
        assert!(
            text.contains(&format!("{field}: not taken from a task a client sends")),
            "{arguments}: {text}"
        );
        assert!(text.contains("--allow-client-endpoints"), "{text}");
        assert!(!text.contains(KEY), "{text}");
    }
    refusing.cancel().await.unwrap();
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the client's server was reached: {other:?}"),
    }

    // Opted in: the operator lets clients choose, and the key goes there.
    let tmp = tempfile::tempdir().unwrap();
    let allowing = client(tmp.path(), &["--allow-client-endpoints"]).await;
    let (arguments, _) = attacks(&url).remove(0);
    let heads = tokio::task::spawn_blocking(move || requests_until_authorized(&listener));
    // The run's start asks the model server about its model first (404
    // here); the model's turn then fails on the listener's 404 too.
    let started = run_task(&allowing, arguments).await;
    assert!(
        !text(&started).contains("not taken from a task a client sends"),
        "{started:?}"
    );
    let heads = heads.await.unwrap();
    let head = heads.last().unwrap();
    assert!(
        head.to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            KEY.to_ascii_lowercase()
        )),
        "{head}"
    );
    allowing.cancel().await.unwrap();
}

/// An inline task's `files` land in its run's working directory, whose path
/// its result names: a `task_dir` there was written by the client too, and
/// is refused the same way (a task directory elsewhere is the operator's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_directory_a_client_wrote_is_refused_like_an_inline_task() {
    let tmp = tempfile::tempdir().unwrap();
    let client = client(tmp.path(), &[]).await;
    let planted =
        "goal = \"say hello\"\n[policy]\nmodel = \"openai:x\"\nbase_url = \"http://127.0.0.1:9\"\n";
    let finished = run_task(
        &client,
        json!({
            "task": {"goal": "leave a task behind"},
            "script": {"turns": [
                {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "ok"}}]},
            ]},
            "files": {"evil/task.toml": planted},
        }),
    )
    .await;
    assert_eq!(finished.is_error, Some(false), "{finished:?}");
    let report = finished.structured_content.unwrap();
    let workdir = report["workdir"].as_str().unwrap();
    let result = run_task(
        &client,
        json!({"task_dir": format!("{workdir}/evil"), "wait": false}),
    )
    .await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = text(&result);
    assert!(
        text.contains("policy.base_url: not taken from a task a client sends"),
        "{text}"
    );
    client.cancel().await.unwrap();
}

/// The heads of the requests `listener` receives, each answered 404, up to
/// the first that carries an `Authorization` header (the start's model probe
/// carries none), within [`BOUND`].
fn requests_until_authorized(listener: &TcpListener) -> Vec<String> {
    let deadline = Instant::now() + BOUND;
    let mut heads = Vec::new();
    loop {
        let mut stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "got only {heads:?}");
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => panic!("{e}"),
        };
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(BOUND)).unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(stream.read(&mut byte).unwrap(), 1, "closed mid-head");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let authorized = head.to_ascii_lowercase().contains("\nauthorization:");
        heads.push(head);
        if authorized {
            return heads;
        }
        let _ = std::io::Write::write_all(
            &mut stream,
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    }
}
