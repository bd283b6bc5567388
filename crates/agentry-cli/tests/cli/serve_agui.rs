//! `agentry serve`'s AG-UI routes, checked by AG-UI's official client
//! (`@ag-ui/client` 1.0's `HttpAgent` and SSE parser, `@ag-ui/core`'s
//! schemas and ordering rules, in `peers/agui.cjs`): a run's events as
//! `?format=ag-ui`, a run started and continued by `RunAgentInput`, an
//! approval as an interrupt answered by `resume`, and what is refused.

use std::process::Command;

use serde_json::json;

use super::serve::Served;
use crate::*;

const TOKEN: &str = "agui-token-5d2e";

/// The folder whose `node_modules` holds `@ag-ui/client` (.ci/run installs
/// it into .ci/peers and sets `AGUI_DIR`); a missing one fails the test.
pub(super) fn agui_dir() -> PathBuf {
    let dir = std::env::var_os("AGUI_DIR").map(PathBuf::from).expect(
        "AGUI_DIR is not set: point it at a folder where `npm install @ag-ui/core@1.0.0 @ag-ui/client@1.0.0 rxjs@7.8.1` ran (.ci/run does)",
    );
    let client = dir.join("node_modules/@ag-ui/client");
    assert!(client.is_dir(), "{} is missing", client.display());
    dir
}

/// Runs `peers/agui.cjs ARGS` and returns the JSON it prints.
pub(super) fn client(args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/peers/agui.cjs");
    let out = Command::new("node")
        .arg(script)
        .args(args)
        .env("NODE_PATH", agui_dir().join("node_modules"))
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "agui.cjs printed no JSON ({e}): {stdout}; stderr: {}",
            stderr(&out)
        )
    })
}

/// The event types, in order.
pub(super) fn types(events: &Value) -> Vec<String> {
    let events = events.as_array().expect("events");
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// The first event of `kind`.
pub(super) fn first<'a>(events: &'a Value, kind: &str) -> &'a Value {
    let events = events.as_array().expect("events");
    events
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {events:?}"))
}

/// A task in `dir/tasks/NAME` with `toml` and `turns`.
fn task(dir: &Path, name: &str, toml: &str, turns: Value) {
    let task = dir.join("tasks").join(name);
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(task.join("task.toml"), toml).unwrap();
    std::fs::write(
        task.join("script.json"),
        json!({ "turns": turns }).to_string(),
    )
    .unwrap();
}

/// A server with two agents: `answer` (answers "hello there" and stops
/// `done`) and `writer` (event-driven: writes a file, with approval, then
/// answers each message).
fn start(dir: &Path) -> Served {
    task(
        dir,
        "answer",
        "goal = \"answer the user\"\n[budget]\nmax_steps = 3\n",
        json!([{"final": "hello there"}]),
    );
    task(
        dir,
        "writer",
        "goal = \"write what the user asks\"\n[budget]\nmax_steps = 10\ndeadline = \"60s\"\n\
         [tools]\ngrant = [\"fs.write\"]\napprove = [\"fs.write\"]\n\
         [driver]\nmode = \"events\"\n[progress]\nwindow = 0\n",
        json!([
            {"tool_calls": [{"id": "w1", "name": "fs.write",
                             "arguments": {"path": "note.txt", "content": "hi"}}]},
            {"final": "wrote note.txt"},
            {"final": "still here"}
        ]),
    );
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        "[agents.answer]\ntask = \"tasks/answer\"\n[agents.writer]\ntask = \"tasks/writer\"\n",
    )
    .unwrap();
    let store = dir.join("runs.db");
    Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[("AGENTRY_TOKEN", TOKEN)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs @ag-ui/client in .ci/peers (AGUI_DIR); .ci/run runs it"]
async fn a_runs_events_as_ag_ui_pass_the_official_client_with_text_a_tool_call_and_state() {
    agui_dir();
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let id = served
        .create(
            TOKEN,
            &json!({
                "goal": "write out.txt",
                "tools": {"grant": ["fs.write"]},
                "script": {"turns": [
                    {"tool_calls": [{"id": "c1", "name": "fs.write",
                                     "arguments": {"path": "out.txt", "content": "42"}}]},
                    {"final": "out.txt says 42"}
                ]}
            }),
        )
        .await;
    let seen = client(&["get", &served.base, TOKEN, &id]);
    assert_eq!(seen["ok"], true, "{seen}");
    let events = &seen["events"];
    let kinds = types(events);
    assert_eq!(kinds[0], "RUN_STARTED", "{kinds:?}");
    assert_eq!(kinds.last().unwrap(), "RUN_FINISHED", "{kinds:?}");
    assert_eq!(first(events, "RUN_STARTED")["threadId"], id.as_str());
    assert_eq!(first(events, "CUSTOM")["value"]["run_id"], id.as_str());
    assert_eq!(
        first(events, "STATE_SNAPSHOT")["snapshot"]["goal"],
        "write out.txt"
    );
    // The call: started, its arguments as JSON text, ended, then its result.
    assert_eq!(first(events, "TOOL_CALL_START")["toolCallName"], "fs.write");
    let args: Value =
        serde_json::from_str(first(events, "TOOL_CALL_ARGS")["delta"].as_str().unwrap()).unwrap();
    assert_eq!(args["content"], "42");
    let result = first(events, "TOOL_CALL_RESULT");
    assert_eq!(
        (&result["toolCallId"], &result["role"]),
        (&json!("c1"), &json!("tool"))
    );
    // The answer as text, and the state's changes as JSON Patch.
    assert_eq!(
        first(events, "TEXT_MESSAGE_CONTENT")["delta"],
        "out.txt says 42"
    );
    let deltas: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "STATE_DELTA")
        .collect();
    let ops = json!(
        deltas
            .iter()
            .flat_map(|d| d["delta"].as_array().unwrap().clone())
            .collect::<Vec<_>>()
    );
    let paths = ops
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["path"].as_str().unwrap())
        .collect::<Vec<_>>();
    for path in [
        "/world/out.txt",
        "/tool_calls",
        "/answer",
        "/status",
        "/stop_reason",
    ] {
        assert!(paths.contains(&path), "{path} not in {ops}");
    }
    assert!(
        kinds.contains(&"STEP_STARTED".to_string()) && kinds.contains(&"STEP_FINISHED".to_string())
    );
    let finished = events.as_array().unwrap().last().unwrap();
    assert_eq!(finished["result"], "out.txt says 42");
    assert_eq!(finished["outcome"], json!({"type": "success"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs @ag-ui/client in .ci/peers (AGUI_DIR); .ci/run runs it"]
async fn a_run_agent_input_starts_a_run_that_the_http_agent_follows_to_done() {
    agui_dir();
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let plan = json!([{"runId": "r1", "message": "say hello"}]).to_string();
    let seen = client(&["post", &served.base, TOKEN, "answer", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    assert_eq!(call["result"], "hello there", "{call}");
    let events = &call["events"];
    let started = first(events, "RUN_STARTED");
    assert_eq!(
        (&started["threadId"], &started["runId"]),
        (&seen["threadId"], &json!("r1"))
    );
    let finished = events.as_array().unwrap().last().unwrap();
    assert_eq!(finished["type"], "RUN_FINISHED", "{events}");
    // The client's messages: the user's and the model's answer.
    let said: Vec<(&str, &str)> = seen["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(said, [("user", "say hello"), ("assistant", "hello there")]);
    assert_eq!(seen["state"]["status"], "stopped");
    // The run is agentry's like any other: its id, its outcome.
    let run_id = first(events, "CUSTOM")["value"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = served.wait_status(TOKEN, &run_id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run}");
    assert_eq!(run["agent"], "answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs @ag-ui/client in .ci/peers (AGUI_DIR); .ci/run runs it"]
async fn an_approval_is_an_interrupt_that_resume_answers_and_the_thread_goes_on() {
    agui_dir();
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let plan = json!([
        {"runId": "r1", "message": "write note.txt"},
        {"runId": "r2", "resume": [{"interruptId": "w1", "status": "resolved", "payload": {"approved": true}}]},
        {"runId": "r3", "message": "are you there?"}
    ])
    .to_string();
    let seen = client(&["post", &served.base, TOKEN, "writer", &plan]);
    let calls = seen["calls"].as_array().unwrap();
    for call in calls {
        assert_eq!(call["ok"], true, "{seen}");
    }
    // 1: the write waits for a human: a CUSTOM event with its effect, then
    // RUN_FINISHED with the interrupt the client keeps.
    let parked = first(&calls[0]["events"], "CUSTOM");
    let approval = calls[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "agentry.approval")
        .unwrap_or(parked);
    assert_eq!(approval["value"]["tool"], "fs.write", "{approval}");
    assert_eq!(approval["value"]["effect"], "reversible", "{approval}");
    let finished = calls[0]["events"].as_array().unwrap().last().unwrap();
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(finished["outcome"]["type"], "interrupt", "{finished}");
    assert_eq!(
        (
            &interrupt["id"],
            &interrupt["reason"],
            &interrupt["toolCallId"]
        ),
        (&json!("w1"), &json!("approval_required"), &json!("w1"))
    );
    assert_eq!(calls[0]["pendingInterrupts"][0]["id"], "w1");
    // 2: approved, the write runs and the agent answers, then sleeps.
    assert_eq!(calls[1]["result"], "wrote note.txt", "{}", calls[1]);
    assert!(types(&calls[1]["events"]).contains(&"TOOL_CALL_RESULT".to_string()));
    // The client's state, patched by the deltas: the file the call wrote.
    assert_eq!(
        seen["state"]["world"]["note.txt"]["bytes"], 2,
        "{}",
        seen["state"]
    );
    // 3: the same thread, a new message: the same run answers it.
    assert_eq!(calls[2]["result"], "still here", "{}", calls[2]);
    let runs: Vec<&Value> = calls
        .iter()
        .map(|c| &first(&c["events"], "CUSTOM")["value"]["run_id"])
        .collect();
    assert!(runs.iter().all(|r| *r == runs[0]), "{runs:?}");
    let run = served
        .wait_status(TOKEN, runs[0].as_str().unwrap(), "sleeping")
        .await;
    assert_eq!(run["inputs"], 3, "{run}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs @ag-ui/client in .ci/peers (AGUI_DIR); .ci/run runs it"]
async fn a_bad_run_agent_input_is_400_naming_the_field_and_a_wrong_token_is_refused() {
    agui_dir();
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let good = json!({"threadId": "t1", "runId": "r1", "messages": [
        {"id": "u1", "role": "user", "content": "hi"}], "tools": [], "context": [], "forwardedProps": {}});
    let with = |key: &str, value: Value| {
        let mut body = good.clone();
        body[key] = value;
        body
    };
    let mut no_run_id = good.clone();
    no_run_id.as_object_mut().unwrap().remove("runId");
    for (body, field) in [
        (with("forwardedProps", Value::Null), "forwardedProps"),
        (no_run_id, "runId"),
        (
            with(
                "messages",
                json!([{"id": "u1", "role": "robot", "content": "x"}]),
            ),
            "messages[0].role",
        ),
        (
            with(
                "resume",
                json!([{"interruptId": "x", "status": "resolved"}]),
            ),
            "resume",
        ),
        (with("messages", json!([])), "messages"),
    ] {
        let reply = served
            .send("POST", "/agents/answer/ag-ui", Some(TOKEN), Some(&body))
            .await;
        assert_eq!(reply.status, 400, "{body}: {:?}", reply.body);
        assert_eq!(
            reply.body["error"]["field"], field,
            "{body}: {:?}",
            reply.body
        );
    }
    let reply = served
        .send("POST", "/agents/nobody/ag-ui", Some(TOKEN), Some(&good))
        .await;
    assert_eq!(reply.status, 404, "{:?}", reply.body);
    let reply = served
        .send("GET", "/runs/x/events?format=sse", Some(TOKEN), None)
        .await;
    assert_eq!(reply.body["error"]["field"], "format", "{:?}", reply.body);
    // Nothing was started.
    let listed = served.send("GET", "/runs", Some(TOKEN), None).await;
    assert_eq!(listed.body, json!({"runs": []}));
    // A wrong token: 401, which the official client reports as such.
    let reply = served
        .send("POST", "/agents/answer/ag-ui", Some("wrong"), Some(&good))
        .await;
    assert_eq!(reply.status, 401, "{:?}", reply.body);
    let plan = json!([{"runId": "r1", "message": "hi"}]).to_string();
    let seen = client(&["post", &served.base, "wrong", "answer", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], false, "{seen}");
    assert!(
        call["error"].as_str().unwrap().contains("HTTP 401"),
        "{call}"
    );
    let seen = client(&["get", &served.base, "wrong", "x"]);
    assert!(
        seen["error"].as_str().unwrap().contains("HTTP 401"),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs @ag-ui/client in .ci/peers (AGUI_DIR); .ci/run runs it"]
async fn a_models_streamed_text_is_one_message_of_several_deltas() {
    use crate::server::{MockServer, Reply, split_events};
    use crate::sse::{chunk, finish, usage};
    agui_dir();
    let dir = tempfile::tempdir().unwrap();
    task(
        dir.path(),
        "chat",
        "goal = \"chat with the user\"\n[budget]\nmax_steps = 3\n[driver]\nmode = \"events\"\n",
        json!([]),
    );
    // The models crate's scripted OpenAI-compatible server on 127.0.0.1: a
    // reply streamed in three pieces of text, held half a second midway (the
    // woken run's status is `sleeping` all along: the segment must not end
    // while its step runs).
    let pieces = ["Hello", ", world", "!"];
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}))];
    events.extend(pieces.iter().map(|p| chunk(json!({ "content": p }))));
    events.extend([finish("stop"), usage(3, 3), "[DONE]".into()]);
    let go = std::sync::Arc::new(tokio::sync::Notify::new());
    let reply = Reply::sse(split_events(&events, 64)).hold_after(2, go.clone());
    let model = MockServer::start(vec![reply]).await.unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        go.notify_one();
    });
    let config = dir.path().join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[agents.chat]\ntask = \"tasks/chat\"\nmodel = \"local\"\n\
             [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\n\
             base_url = \"{}/v1\"\napi_key_env = \"AGUI_TEST_MODEL_KEY\"\n",
            model.base_url
        ),
    )
    .unwrap();
    let store = dir.path().join("runs.db");
    let served = Served::start(
        &["--config", path_str(&config), "--store", path_str(&store)],
        &[("AGENTRY_TOKEN", TOKEN), ("AGUI_TEST_MODEL_KEY", "sk-agui")],
    );
    let plan = json!([{"runId": "r1", "message": "greet me"}]).to_string();
    let seen = client(&["post", &served.base, TOKEN, "chat", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    let events = call["events"].as_array().unwrap();
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(deltas.len() > 1, "one delta per piece streamed: {deltas:?}");
    assert_eq!(deltas.concat(), "Hello, world!");
    let starts = events
        .iter()
        .filter(|e| e["type"] == "TEXT_MESSAGE_START")
        .count();
    assert_eq!(starts, 1, "{events:?}");
    assert_eq!(call["result"], "Hello, world!", "{call}");
    let said = &seen["messages"][1];
    assert_eq!(
        (&said["role"], &said["content"]),
        (&json!("assistant"), &json!("Hello, world!"))
    );
}

/// A run that stops for another reason than `done` ends its AG-UI stream
/// with `RUN_ERROR`: its code the stop reason, its message the reason and
/// the outcome's detail, as the native view says it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_stops_short_is_a_run_error_with_its_reason_and_detail() {
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path());
    let list = json!({"id": "l1", "name": "fs.list", "arguments": {"path": "."}});
    let again = json!({"id": "l2", "name": "fs.list", "arguments": {"path": "."}});
    let id = served
        .create(
            TOKEN,
            &json!({"goal": "list", "budget": {"max_steps": 1},
                "tools": {"grant": ["fs.list"]},
                "script": {"turns": [{"tool_calls": [list]}, {"tool_calls": [again]}]}}),
        )
        .await;
    let run = served.wait_status(TOKEN, &id, "stopped").await;
    assert_eq!(run["outcome"]["stop_reason"], "max_steps", "{run}");
    let detail = run["outcome"]["detail"].as_str().unwrap();
    let text = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/runs/{id}/events?format=ag-ui", served.base))
        .header("authorization", format!("Bearer {TOKEN}"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let error = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap())
        .find(|event| event["type"] == "RUN_ERROR")
        .unwrap_or_else(|| panic!("no RUN_ERROR: {text}"));
    assert_eq!(error["code"], "max_steps", "{error}");
    assert_eq!(
        error["message"],
        format!("the run stopped: max_steps: {detail}"),
        "{error}"
    );
}
