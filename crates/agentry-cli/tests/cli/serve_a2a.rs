//! `agentry serve` as an A2A 1.0 server: the official Python client
//! (a2a-sdk 1.3.0, tests/cli/peers/a2a_client.py, run by $A2A_PYTHON)
//! discovers the cards (default and per agent), sends, streams, gets, lists
//! and cancels tasks, answers an approval through a data part, continues an
//! event-driven agent's task, and gets push notifications on a receiver on
//! 127.0.0.1; a wrong token and another tenant's task are refused. Without
//! the SDK, raw JSON-RPC: the card needs no token, the endpoint does, the
//! `A2A-Version` header is required, unknown methods and agents are refused.

use std::collections::BTreeMap;

use serde_json::json;

use super::receiver::{Post, Receiver};
use super::serve::{Served, refused, tokens_file};
use super::serve_webhooks::{SECRET, SECRET_ENV};
use crate::*;

pub(super) const ACME: &str = "acme-a2a-token-5d10";
pub(super) const GLOBEX: &str = "globex-a2a-token-93e2";
/// The nap's sleep, unique among the tests' processes.
const NAP: &str = "43.375";

fn task(root: &Path, name: &str, toml: &str, script: &Value) {
    let dir = root.join("tasks").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap();
}

/// Agents `echo` (answers "echoed"), `gated` (an approved fs.write, then
/// "written"), `nap` (a long sleep), `chat` (event-driven, "ok" to every
/// message), all published over A2A with `echo` the default; and `plain`,
/// not published. Tokens of acme and globex; push receivers on 127.0.0.1.
pub(super) fn place() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    tokens_file(root, &[("acme", ACME), ("globex", GLOBEX)]);
    let budget = "[budget]\nmax_steps = 10\ndeadline = \"120s\"\n[progress]\nwindow = 0\n";
    task(
        root,
        "echo",
        &format!("goal = \"echo the user's message\"\n{budget}"),
        &json!({"turns": [{"final": "echoed"}]}),
    );
    task(
        root,
        "gated",
        &format!(
            "goal = \"write a note, approved\"\n{budget}[tools]\ngrant = [\"fs.write\"]\napprove = [\"fs.write\"]\n"
        ),
        &json!({"turns": [
            {"tool_calls": [{"id": "a1", "name": "fs.write",
                "arguments": {"path": "note.txt", "content": "approved\n"}}]},
            {"final": "written"}
        ]}),
    );
    task(
        root,
        "nap",
        &format!("goal = \"nap\"\n{budget}[tools]\ngrant = [\"proc.run\"]\n"),
        &json!({"turns": [
            {"tool_calls": [{"id": "nap1", "name": "proc.run",
                "arguments": {"argv": ["sh", "-c", format!("sleep {NAP}")]}}]},
            {"final": "woke"}
        ]}),
    );
    task(
        root,
        "chat",
        "goal = \"answer every message\"\n[budget]\nmax_steps = 100\ndeadline = \"120s\"\n\
         [driver]\nmode = \"events\"\n[progress]\nwindow = 0\n",
        &json!({"turns": [{"final": "ok"}], "then": "repeat_last"}),
    );
    task(
        root,
        "turns",
        "goal = \"answer every message\"\n[budget]\nmax_steps = 100\ndeadline = \"120s\"\n\
         [driver]\nmode = \"events\"\n[progress]\nwindow = 0\n",
        &json!({"turns": [{"final": "one"}, {"final": "two"}, {"final": "three"}], "then": "repeat_last"}),
    );
    task(
        root,
        "spin",
        "goal = \"spin\"\n[budget]\nmax_steps = 1\n[progress]\nwindow = 0\n[tools]\ngrant = [\"fs.list\"]\n",
        &json!({"turns": [
            {"tool_calls": [{"id": "l1", "name": "fs.list", "arguments": {"path": "."}}]},
            {"tool_calls": [{"id": "l2", "name": "fs.list", "arguments": {"path": "."}}]}
        ]}),
    );
    report_task(root, budget);
    task(
        root,
        "plain",
        &format!("goal = \"not published\"\n{budget}"),
        &json!({"turns": [{"final": "plain"}]}),
    );
    let mut config = String::from(
        "[auth]\ntokens_file = \"tokens\"\n\
         [serve]\nwebhook_hosts = [\"127.0.0.1\"]\na2a_default = \"echo\"\n",
    );
    config.push_str(&format!("webhook_secret_env = \"{SECRET_ENV}\"\n"));
    for name in ["echo", "gated", "nap", "chat", "turns", "spin", "report"] {
        config.push_str(&format!(
            "[agents.{name}]\ntask = \"tasks/{name}\"\na2a = true\n"
        ));
    }
    config.push_str("[agents.plain]\ntask = \"tasks/plain\"\n");
    std::fs::write(root.join("serve.toml"), config).unwrap();
    dir
}

/// Agent `report`: writes out/report.md (fs.write) and blob.bin (bytes,
/// proc.run), answers "reported"; it declares both and a missing file as
/// its artifacts.
fn report_task(root: &Path, budget: &str) {
    task(
        root,
        "report",
        &format!(
            "goal = \"write a report\"\nartifacts = [\"out/report.md\", \"missing.txt\", \"blob.bin\"]\n\
         {budget}[tools]\ngrant = [\"fs.write\", \"proc.run\"]\n"
        ),
        &json!({"turns": [
            {"tool_calls": [{"id": "w1", "name": "fs.write",
                "arguments": {"path": "out/report.md", "content": "# Report\nall good\n"}}]},
            {"tool_calls": [{"id": "b1", "name": "proc.run",
                "arguments": {"argv": ["sh", "-c", "printf '\\377\\000\\001' > blob.bin"]}}]},
            {"final": "reported"}
        ]}),
    );
}

pub(super) fn serve(dir: &Path) -> Served {
    let config = dir.join("serve.toml");
    let store = dir.join("runs.db");
    Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[(SECRET_ENV, SECRET)],
    )
}

/// Runs the Python client; its checks by name.
async fn run_client(config: Value) -> BTreeMap<String, Value> {
    let python = std::env::var("A2A_PYTHON").unwrap_or_else(|_| {
        panic!(
            "A2A_PYTHON is unset: it must name a Python with a2a-sdk[http-server]==1.3.0 \
             (.ci/run makes .ci/a2a-venv and sets it)"
        )
    });
    let script = root().join("crates/agentry-cli/tests/cli/peers/a2a_client.py");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(&script)
            .arg(config.to_string())
            .output()
            .unwrap_or_else(|e| panic!("A2A_PYTHON={python} does not start: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client failed:\n{stdout}\n{stderr}"
    );
    let checks: BTreeMap<String, Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| (v["check"].as_str().unwrap_or_default().to_string(), v))
        .collect();
    eprintln!("the client said:\n{stdout}");
    assert!(checks.contains_key("end"), "{stdout}\n{stderr}");
    for (name, check) in &checks {
        assert!(check.get("trace").is_none(), "{name} failed: {check:#}");
    }
    checks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the a2a-sdk venv (A2A_PYTHON); .ci/run runs it"]
async fn the_official_a2a_client_sends_streams_cancels_approves_and_is_pushed_to() {
    let dir = place();
    let served = serve(dir.path());
    let pushed = Receiver::start(&[200]).await;
    let checks = run_client(json!({
        "base": served.base, "token": ACME, "other_token": GLOBEX, "hook": pushed.url,
    }))
    .await;
    cards_and_sends(&checks, &served.base);
    cancel_and_approval(&checks);
    chat_and_refusals(&checks, &served).await;
    pushed_to(&checks, &pushed).await;
    pushed_by_config(&checks, &pushed).await;
    declared_files(&checks);
}

/// The files a task declares (`artifacts`): a completed task carries the
/// answer, then each file that exists (text, or raw bytes), and a stream
/// tells them before COMPLETED.
fn declared_files(checks: &BTreeMap<String, Value>) {
    let check = &checks["artifacts"];
    assert_eq!(check["state"], "TASK_STATE_COMPLETED", "{check:#}");
    let artifacts = check["artifacts"].as_array().unwrap();
    let names: Vec<&str> = artifacts
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["answer", "out/report.md", "blob.bin"], "{check:#}");
    assert_eq!(artifacts[0]["parts"][0]["text"], "reported");
    assert_eq!(
        artifacts[1]["parts"][0],
        json!({"text": "# Report\nall good\n", "filename": "report.md", "mediaType": "text/markdown"})
    );
    assert_eq!(
        artifacts[2]["parts"][0],
        json!({"raw": "/wAB", "filename": "blob.bin", "mediaType": "application/octet-stream"})
    );
    assert_eq!(
        check["got"], check["artifacts"],
        "GetTask: the same artifacts"
    );
    let events = check["events"].as_array().unwrap();
    let last = events.last().unwrap();
    let completed = &last["statusUpdate"]["status"]["state"];
    if completed == "TASK_STATE_COMPLETED" {
        let report = events
            .iter()
            .position(|e| e["artifactUpdate"]["artifact"]["name"] == "out/report.md");
        assert!(
            report.is_some_and(|at| at + 1 < events.len()),
            "the file streamed before COMPLETED: {events:#?}"
        );
    } else {
        // The run was done before the stream's first look.
        let names = &last["task"]["artifacts"];
        assert_eq!(names[1]["name"], "out/report.md", "{events:#?}");
    }
}

/// Cards: the default agent at the root, the others under /a2a/NAME; a
/// message sent, streamed, got and listed.
fn cards_and_sends(checks: &BTreeMap<String, Value>, base: &str) {
    let cards = &checks["cards"];
    assert_eq!(cards["default"]["name"], "echo", "{cards:#}");
    assert_eq!(cards["default"]["description"], "echo the user's message");
    let iface = &cards["default"]["supportedInterfaces"][0];
    assert_eq!(iface["url"], format!("{base}/a2a/echo"));
    assert_eq!(iface["protocolBinding"], "JSONRPC");
    assert_eq!(iface["protocolVersion"], "1.0");
    assert_eq!(
        cards["default"]["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(cards["gated"]["name"], "gated");
    assert_eq!(cards["gated"]["skills"][0]["id"], "gated");

    // SendMessage waits for the end: COMPLETED with the answer as artifact.
    let send = &checks["send"];
    assert_eq!(send["state"], "TASK_STATE_COMPLETED", "{send:#}");
    assert_eq!(send["answer"], json!(["echoed"]));
    assert_eq!(checks["get"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(checks["get"]["id"], send["id"]);
    let listed = checks["list"]["ids"].as_array().unwrap();
    assert!(listed.contains(&send["id"]), "{:#}", checks["list"]);

    // The stream: a task first, then the answer, then COMPLETED.
    let events = checks["stream"]["events"].as_array().unwrap();
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e.as_object()?.keys().next().map(String::as_str))
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{events:#?}");
    let last = events.last().unwrap();
    let last_state = last["statusUpdate"]["status"]["state"]
        .as_str()
        .or(last["task"]["status"]["state"].as_str());
    assert_eq!(last_state, Some("TASK_STATE_COMPLETED"), "{events:#?}");
    let streamed_answer = events.iter().any(|e| {
        e["artifactUpdate"]["artifact"]["parts"][0]["text"] == "echoed"
            || e["task"]["artifacts"][0]["parts"][0]["text"] == "echoed"
    });
    assert!(streamed_answer, "{events:#?}");
}

fn cancel_and_approval(checks: &BTreeMap<String, Value>) {
    // CancelTask: the run stops user_abort, CANCELED; a subscriber sees it;
    // a second cancel is TaskNotCancelable.
    let cancel = &checks["cancel"];
    assert_eq!(cancel["state"], "TASK_STATE_CANCELED", "{cancel:#}");
    let subscribed = cancel["subscribed"].as_array().unwrap();
    assert!(subscribed[0].get("task").is_some(), "{cancel:#}");
    assert_eq!(
        subscribed.last().unwrap()["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED",
        "{cancel:#}"
    );
    assert_eq!(cancel["again"], "TaskNotCancelableError");

    // A gated call: INPUT_REQUIRED naming the call; approved through a data
    // part, the same task completes.
    let asked = &checks["input_required"];
    assert_eq!(asked["state"], "TASK_STATE_INPUT_REQUIRED", "{asked:#}");
    let calls = &asked["parts"][1]["data"]["calls"];
    assert_eq!(calls[0]["call_id"], "a1", "{asked:#}");
    assert_eq!(calls[0]["tool"], "fs.write");
    let approved = &checks["approved"];
    assert_eq!(approved["state"], "TASK_STATE_COMPLETED", "{approved:#}");
    assert_eq!(approved["id"], asked["id"]);
    assert_eq!(approved["answer"], json!(["written"]));
}

async fn chat_and_refusals(checks: &BTreeMap<String, Value>, served: &Served) {
    // An event-driven agent: INPUT_REQUIRED between messages, same task.
    let chat = &checks["chat"];
    assert_eq!(chat["first"], "TASK_STATE_INPUT_REQUIRED", "{chat:#}");
    assert_eq!(chat["second"], "TASK_STATE_INPUT_REQUIRED", "{chat:#}");
    assert_eq!(chat["same"], true);
    assert_eq!(chat["answer"], json!(["ok"]));
    let id = chat["id"].as_str().unwrap();
    let run = served
        .send("GET", &format!("/runs/{id}"), Some(ACME), None)
        .await;
    assert_eq!(
        run.body["inputs"], 3,
        "each message applied: {:?}",
        run.body
    );

    // Refusals: a wrong token is the client's HTTP 401; another tenant's
    // task is TaskNotFound.
    let wrong = &checks["wrong_token"];
    assert_eq!(wrong["error"], "A2AClientError", "{wrong:#}");
    assert!(
        wrong["message"].as_str().unwrap().contains("401"),
        "{wrong:#}"
    );
    assert_eq!(checks["other_tenant"]["error"], "TaskNotFoundError");
}

async fn pushed_to(checks: &BTreeMap<String, Value>, pushed: &Receiver) {
    // The push receiver got the task's StreamResponses, with the token.
    let push_id = checks["push"]["id"].clone();
    let completed = |p: &Post| {
        let body = p.json();
        let task_done = body["task"]["id"] == push_id
            && body["task"]["status"]["state"] == "TASK_STATE_COMPLETED";
        let update_done = body["statusUpdate"]["taskId"] == push_id
            && body["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED";
        task_done || update_done
    };
    let got = pushed
        .until("no push", |posts| posts.iter().any(completed))
        .await;
    let of_task = |p: &&Post| {
        let body = p.json();
        body["task"]["id"] == push_id || body["statusUpdate"]["taskId"] == push_id
    };
    assert!(
        got.iter()
            .filter(of_task)
            .all(|p| p.header("x-a2a-notification-token") == "push-tok-5"),
        "{got:?}"
    );
    assert!(
        got.iter().all(|p| p.json().get("jsonrpc").is_none()),
        "{got:?}"
    );
    // Signed as serve's webhooks are: the independent verifier accepts
    // each, and each notification has an id of its own.
    let ours: Vec<Post> = got.iter().filter(of_task).cloned().collect();
    let verified = super::serve_webhooks::verify_independently(&ours);
    assert_eq!(verified, ours.iter().map(Post::json).collect::<Vec<_>>());
    let ids: std::collections::BTreeSet<&str> =
        ours.iter().map(|p| p.header("webhook-id")).collect();
    assert!(ids.iter().all(|id| id.starts_with("a2a_")), "{ids:?}");
    assert_eq!(ids.len(), ours.len(), "{ids:?}");
}

/// A config made by CreateTaskPushNotificationConfig: got, listed, deleted;
/// its receiver is sent the task with the config's token and authentication.
async fn pushed_by_config(checks: &BTreeMap<String, Value>, pushed: &Receiver) {
    let config = &checks["push_config"];
    let chat = checks["chat"]["id"].clone();
    assert_eq!(config["created"]["id"], "cfg1", "{config:#}");
    assert_eq!(config["created"]["taskId"], chat);
    assert_eq!(config["created"]["authentication"]["scheme"], "Bearer");
    assert_eq!(config["got"], config["created"]);
    assert_eq!(config["listed"]["configs"], json!([config["created"]]));
    assert!(config["left"].get("configs").is_none(), "{config:#}");
    assert_eq!(config["third"], "TASK_STATE_INPUT_REQUIRED");
    let of_chat = |p: &Post| p.json()["task"]["id"] == chat;
    let got = pushed
        .until("no push", |posts| posts.iter().any(of_chat))
        .await;
    let first = got.iter().find(|p| of_chat(p)).unwrap();
    assert_eq!(
        first.header("x-a2a-notification-token"),
        "cfg-tok",
        "{first:?}"
    );
    assert_eq!(
        first.header("authorization"),
        "Bearer push-cred",
        "{first:?}"
    );
}

/// A JSON-RPC call with `A2A-Version: 1.0` (or without it).
pub(super) async fn rpc(
    base: &str,
    path: &str,
    token: &str,
    version: bool,
    body: Value,
) -> (u16, Value) {
    rpc_with(base, path, token, version, &[], body).await
}

/// A streaming JSON-RPC call (`A2A-Version: 1.0`, a token if any), read to
/// its end (bounded): its SSE text, and each event's `result`.
pub(super) async fn rpc_stream(
    base: &str,
    path: &str,
    token: Option<&str>,
    body: &Value,
) -> (String, Vec<Value>) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut request = client
        .post(format!("{base}{path}"))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let text = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        request.send().await.unwrap().text().await.unwrap()
    })
    .await
    .expect("the stream ends");
    let results = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap()["result"].clone())
        .collect();
    (text, results)
}

async fn rpc_with(
    base: &str,
    path: &str,
    token: &str,
    version: bool,
    headers: &[(&str, &str)],
    body: Value,
) -> (u16, Value) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut request = client
        .post(format!("{base}{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if version {
        request = request.header("A2A-Version", "1.0");
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_is_public_and_the_endpoint_needs_a_token_and_the_version() {
    let dir = place();
    let served = serve(dir.path());
    let card = served
        .send("GET", "/a2a/nap/.well-known/agent-card.json", None, None)
        .await;
    assert_eq!(card.status, 200, "{:?}", card.body);
    assert_eq!(card.body["name"], "nap");
    let root = served
        .send("GET", "/.well-known/agent-card.json", None, None)
        .await;
    assert_eq!(root.body["name"], "echo");
    let unpublished = served
        .send("GET", "/a2a/plain/.well-known/agent-card.json", None, None)
        .await;
    assert_eq!(unpublished.status, 404);

    let get = json!({"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "x"}});
    let (status, _) = rpc(&served.base, "/a2a/echo", "wrong", true, get.clone()).await;
    assert_eq!(status, 401);
    let (status, body) = rpc(&served.base, "/a2a/echo", ACME, false, get.clone()).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (200, &json!(-32009)),
        "{body}"
    );
    let (_, body) = rpc(&served.base, "/a2a/echo/", ACME, true, get).await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    assert_eq!(body["id"], 7);
    let unknown = json!({"jsonrpc": "2.0", "id": "u", "method": "message/send", "params": {}});
    let (_, body) = rpc(&served.base, "/a2a/echo", ACME, true, unknown).await;
    assert_eq!(body["error"]["code"], -32601, "{body}");
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {}});
    let (status, _) = rpc(&served.base, "/a2a/plain", ACME, true, send).await;
    assert_eq!(status, 404);

    // A task is a run: the request's traceparent joins the run's trace, as
    // on POST /runs.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = format!("00-{trace}-00f067aa0ba902b7-01");
    let send = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}});
    let headers = [("traceparent", parent.as_str())];
    let (_, body) = rpc_with(&served.base, "/a2a/echo", ACME, true, &headers, send).await;
    let task = &body["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
    let id = task["id"].as_str().unwrap();
    let run = served
        .send("GET", &format!("/runs/{id}"), Some(ACME), None)
        .await;
    let traceparent = run.body["traceparent"].as_str().unwrap();
    assert!(traceparent.contains(trace), "{traceparent}");
    assert_eq!(run.body["agent"], "echo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_other_stop_is_failed_with_its_reason_and_a_list_is_the_tenants() {
    let dir = place();
    let served = serve(dir.path());
    // Any stop but done and user_abort is FAILED, with the reason.
    let send = json!({"jsonrpc": "2.0", "id": 3, "method": "SendMessage", "params": {
        "message": {"messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "go"}]}}});
    let (_, body) = rpc(&served.base, "/a2a/spin", ACME, true, send).await;
    let status = &body["result"]["task"]["status"];
    assert_eq!(status["state"], "TASK_STATE_FAILED", "{body}");
    assert_eq!(
        status["message"]["parts"][1]["data"]["stop_reason"],
        "max_steps"
    );
    let list = json!({"jsonrpc": "2.0", "id": 4, "method": "ListTasks",
        "params": {"status": "TASK_STATE_FAILED"}});
    let (_, body) = rpc(&served.base, "/a2a/spin", ACME, true, list).await;
    assert_eq!(body["result"]["totalSize"], 1, "{body}");
    let garbage = json!({"jsonrpc": "2.0", "id": 6, "method": "ListTasks",
        "params": {"pageToken": "garbage"}});
    let (_, body) = rpc(&served.base, "/a2a/spin", ACME, true, garbage).await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pageToken"),
        "{body}"
    );
    let (_, body) = rpc(
        &served.base,
        "/a2a/echo",
        GLOBEX,
        true,
        json!({"jsonrpc": "2.0",
        "id": 5, "method": "ListTasks", "params": {}}),
    )
    .await;
    assert_eq!(
        body["result"]["totalSize"], 0,
        "another tenant's tasks are not listed: {body}"
    );
}

#[test]
fn an_a2a_default_that_is_not_a_published_agent_is_refused() {
    let dir = place();
    let path = dir.path().join("serve.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("a2a_default = \"echo\"", "a2a_default = \"plain\""),
    )
    .unwrap();
    let store = dir.path().join("runs.db");
    let output = refused(
        &["--config", path_str(&path), "--store", path_str(&store)],
        &[(SECRET_ENV, SECRET)],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("serve.a2a_default"), "{stderr}");
}
