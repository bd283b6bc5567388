//! `agentry serve`'s named agents: a run of `[agents.NAME]` (a task
//! directory, its own scripted policy) started by name, its `input` the
//! first user message and its `files` in its working directory; a request
//! that widens the budget or adds a tool is 400 naming the field; an agent
//! on a `[models.NAME]` runs against the models crate's strict
//! OpenAI-compatible server with the key from `api_key_env`; a bad
//! serve.toml is exit 2 naming the key.

use serde_json::json;

use super::serve::{Served, refused};
use crate::server::{MockServer, Reply};
use crate::sse::one_call;
use crate::*;

const TOKEN: &str = "agents-token-31aa";

/// An event-driven task in `dir/tasks/reader`: each message wakes it to read
/// note.txt, then answer "ok". Its budget: 10 steps; its grants: fs.read.
fn reader_task(dir: &Path) {
    let task = dir.join("tasks/reader");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"read note.txt for the user\"\n\
         [budget]\nmax_steps = 10\ndeadline = \"60s\"\n\
         [tools]\ngrant = [\"fs.read\"]\n\
         [driver]\nmode = \"events\"\n\
         [progress]\nwindow = 0\n",
    )
    .unwrap();
    std::fs::write(
        task.join("script.json"),
        json!({"turns": [
            {"tool_calls": [{"id": "read", "name": "fs.read", "arguments": {"path": "note.txt"}}]},
            {"final": "ok"}
        ], "then": "repeat_last"})
        .to_string(),
    )
    .unwrap();
}

fn start(dir: &Path, config: &str, env: &[(&str, &str)]) -> Served {
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let store = dir.join("runs.db");
    let mut env = env.to_vec();
    env.push(("AGENTRY_TOKEN", TOKEN));
    Served::start(
        &["--config", path_str(&path), "--store", path_str(&store)],
        &env,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_agent_runs_with_the_requests_input_and_files() {
    let dir = tempfile::tempdir().unwrap();
    reader_task(dir.path());
    // A relative task path: relative to serve.toml.
    let served = start(
        dir.path(),
        "[agents.reader]\ntask = \"tasks/reader\"\n",
        &[],
    );
    let body = json!({
        "agent": "reader",
        "input": "what does the note say?",
        "files": {"note.txt": "the note says 42"},
        "budget": {"max_steps": 4},
    });
    let id = served.create(TOKEN, &body).await;
    let seen = served.events_until(TOKEN, &id, "tool_call_finished").await;
    let input = seen
        .iter()
        .find(|(name, _)| name == "input_applied")
        .expect("the input was applied");
    assert_eq!(input.1["event"]["input"]["text"], "what does the note say?");
    let (_, read) = seen.last().unwrap();
    let result = read["event"]["result"].to_string();
    assert!(result.contains("the note says 42"), "{result}");
    let run = served.wait_status(TOKEN, &id, "sleeping").await;
    assert_eq!(run["agent"], "reader", "{run:?}");
    assert!(run.get("model").is_none(), "{run:?}");
    let listed = served.send("GET", "/runs", Some(TOKEN), None).await;
    assert_eq!(listed.body["runs"][0]["agent"], "reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_widens_the_budget_or_adds_a_tool_is_400_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    reader_task(dir.path());
    let served = start(
        dir.path(),
        "[agents.reader]\ntask = \"tasks/reader\"\n",
        &[],
    );
    let with = |key: &str, value: Value| {
        let mut body = json!({"agent": "reader", "input": "hi"});
        body[key] = value;
        body
    };
    for (body, field) in [
        (with("budget", json!({"max_steps": 11})), "budget.max_steps"),
        (with("budget", json!({"deadline": "2m"})), "budget.deadline"),
        (
            with("tools", json!({"grant": ["fs.read", "fs.write"]})),
            "tools.grant",
        ),
        (
            with(
                "tools",
                json!({"command": [{"name": "sh", "argv": ["sh"]}]}),
            ),
            "tools.command",
        ),
        (with("goal", json!("something else")), "goal"),
        (json!({"agent": "nobody", "input": "hi"}), "agent"),
    ] {
        let reply = served.send("POST", "/runs", Some(TOKEN), Some(&body)).await;
        assert_eq!(reply.status, 400, "{body}: {:?}", reply.body);
        assert_eq!(
            reply.body["error"]["field"], field,
            "{body}: {:?}",
            reply.body
        );
        assert_eq!(reply.body["error"]["code"], "bad_request");
    }
    // Nothing was started.
    let listed = served.send("GET", "/runs", Some(TOKEN), None).await;
    assert_eq!(listed.body, json!({"runs": []}));
}

/// An inline task (task fields, no `agent`) that declares tools of its own,
/// command tools, MCP servers or A2A agents, is 400 naming the table: the
/// service runs built-in tools only, and an agent the client names would get
/// the service's headers. The A2A agent's address is a real listener of the
/// test, never connected to; nothing is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_task_with_its_own_tools_is_refused_naming_the_table() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let served = start(dir.path(), "", &[]);
    let script = json!({"turns": [{"final": "x"}]});
    for (tools, field, said) in [
        (
            json!({"grant": ["billing.ask"], "a2a": [{"name": "billing", "url": url, "effect": "read_only"}]}),
            "tools.a2a",
            "A2A agents are not accepted by the service",
        ),
        (
            json!({"mcp": [{"name": "db", "url": format!("{url}/mcp")}]}),
            "tools.mcp",
            "MCP servers are not accepted by the service",
        ),
        (
            json!({"command": [{"name": "sh", "description": "d", "argv": ["sh"]}]}),
            "tools.command",
            "command tools are not accepted by the service",
        ),
    ] {
        let body = json!({"goal": "x", "tools": tools, "script": script});
        let reply = served.send("POST", "/runs", Some(TOKEN), Some(&body)).await;
        assert_eq!(reply.status, 400, "{body}: {:?}", reply.body);
        assert_eq!(reply.body["error"]["field"], field, "{:?}", reply.body);
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{field}: {said}")),
            "{message}"
        );
    }
    let listed = served.send("GET", "/runs", Some(TOKEN), None).await;
    assert_eq!(listed.body, json!({"runs": []}));
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the client's agent was never contacted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_agent_runs_on_a_named_model_with_the_key_from_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tasks/answer");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"answer the user\"\n[budget]\nmax_steps = 3\n[driver]\nmode = \"events\"\n",
    )
    .unwrap();
    let server = MockServer::start(vec![Reply::sse(one_call(
        "fin",
        "task_finish",
        r#"{"answer":"42"}"#,
    ))])
    .await
    .unwrap();
    let config = format!(
        "[agents.answer]\ntask = \"tasks/answer\"\nmodel = \"local\"\n\
         [models.local]\nprovider = \"openai\"\nmodel = \"tiny\"\n\
         base_url = \"{}/v1\"\napi_key_env = \"SERVE_TEST_MODEL_KEY\"\n",
        server.base_url
    );
    let served = start(
        dir.path(),
        &config,
        &[("SERVE_TEST_MODEL_KEY", "sk-serve-test")],
    );
    let id = served
        .create(
            TOKEN,
            &json!({"agent": "answer", "input": "what is six times seven?"}),
        )
        .await;
    let run = served.wait_status(TOKEN, &id, "stopped").await;
    assert_eq!(run["model"], "local", "{run:?}");
    assert_eq!(run["outcome"]["stop_reason"], "done", "{run:?}");
    assert_eq!(run["outcome"]["answer"], "42", "{run:?}");
    assert!(server.rejected().is_empty(), "{:?}", server.rejected());
    let received = server.received();
    let turn = received.last().expect("the model was asked");
    let auth = turn.headers.get("authorization").unwrap().to_str().unwrap();
    assert_eq!(auth, "Bearer sk-serve-test");
    assert!(
        turn.body["messages"]
            .to_string()
            .contains("what is six times seven?"),
        "{}",
        turn.body
    );
}

#[test]
fn a_bad_serve_toml_is_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    reader_task(dir.path());
    for (text, key) in [
        (
            "[agents.reader]\ntask = \"tasks/reader\"\ntools = []\n",
            "agents.reader.tools",
        ),
        (
            "[agents.reader]\ntask = \"tasks/nowhere\"\n",
            "agents.reader.task",
        ),
        (
            "[agents.reader]\ntask = \"tasks/reader\"\nmodel = \"gone\"\n",
            "agents.reader.model",
        ),
        (
            "[agents.reader]\ntask = \"tasks/reader\"\nmodel = \"m\"\n\
             [models.m]\nprovider = \"openai\"\nmodel = \"x\"\napi_key_env = \"SERVE_TEST_UNSET_KEY\"\n",
            "agents.reader.model",
        ),
        ("[serve]\nlisten = \"127.0.0.1:1\"\n", "serve.listen"),
    ] {
        let config = dir.path().join("serve.toml");
        std::fs::write(&config, text).unwrap();
        let store = dir.path().join("runs.db");
        let out = refused(
            &["--config", path_str(&config), "--store", path_str(&store)],
            &[("AGENTRY_TOKEN", TOKEN)],
        );
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        assert!(stderr(&out).contains(key), "{text}: {}", stderr(&out));
    }
}

/// A named agent's run killed with its server resumes on the next start as
/// `agentry resume` resumes it: same id, same agent, and it takes input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_agents_run_resumes_after_the_server_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    reader_task(dir.path());
    let config = "[agents.reader]\ntask = \"tasks/reader\"\n";
    let served = start(dir.path(), config, &[]);
    let body = json!({"agent": "reader", "input": "read it", "files": {"note.txt": "first"}});
    let id = served.create(TOKEN, &body).await;
    served.events_until(TOKEN, &id, "tool_call_finished").await;
    served.wait_status(TOKEN, &id, "sleeping").await;
    served.kill();
    let again = start(dir.path(), config, &[]);
    let run = again.wait_status(TOKEN, &id, "sleeping").await;
    assert_eq!(run["agent"], "reader", "{run:?}");
    let sent = again
        .send(
            "POST",
            &format!("/runs/{id}/messages"),
            Some(TOKEN),
            Some(&json!({"text": "again"})),
        )
        .await;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let deadline = std::time::Instant::now() + super::serve::WAIT;
    loop {
        let run = again
            .send("GET", &format!("/runs/{id}"), Some(TOKEN), None)
            .await;
        if run.body["inputs"] == 2 && run.body["status"] == "sleeping" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
