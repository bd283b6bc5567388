//! A remote A2A agent's question put to a human under `agentry serve`
//! (`[[tools.a2a]] input_required = "human"`): the run parks on the call as
//! for an approval, the question as its preview; `POST
//! /runs/{id}/approvals/{call_id}` with `{"decision": "answer"}`, an A2A
//! message with the data part `{"approval": {"call_id", "answer"}}`, or an
//! AG-UI `resume` with `payload.answer` sends the text to the same remote
//! task, which completes with it.

use serde_json::json;

use super::a2a_tools::{Agent, TOKEN, start_agent};
use super::serve::Served;
use super::serve_a2a::rpc;
use super::serve_agui::{agui_dir, client, first};
use crate::*;

/// serve.toml with the agent `asker` ([`asker_task`]).
fn place(base: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    asker_task(dir.path(), base);
    std::fs::write(
        dir.path().join("serve.toml"),
        "[agents.asker]\ntask = \"tasks/asker\"\na2a = true\n",
    )
    .unwrap();
    dir
}

/// `root/tasks/asker`: its one call asks the test agent at `base` "ask" (it
/// answers with a question), and its questions go to a human.
pub(super) fn asker_task(root: &std::path::Path, base: &str) {
    let task = root.join("tasks/asker");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "goal = \"ask the echo agent\"\n\
             [budget]\nmax_steps = 5\ndeadline = \"120s\"\n[progress]\nwindow = 0\n\
             [tools]\ngrant = [\"echo.ask\"]\n\
             [[tools.a2a]]\nname = \"echo\"\nurl = \"{base}\"\n\
             headers = {{ Authorization = \"Bearer ${{ECHO_AGENT_TOKEN}}\" }}\n\
             effect = \"read_only\"\ninput_required = \"human\"\ntimeout = \"90s\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        task.join("script.json"),
        json!({"turns": [
            {"tool_calls": [{"id": "q1", "name": "echo.ask", "arguments": {"message": "ask"}}]},
            {"final": "asked"}
        ]})
        .to_string(),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it and sets A2A_PYTHON); .ci/run runs it"]
async fn a_remote_agents_question_is_answered_through_the_approval_route() {
    let agent = start_agent();
    let (_dir, served) = serve(&agent);
    let reply = served
        .send("POST", "/runs", None, Some(&json!({"agent": "asker"})))
        .await;
    assert_eq!(reply.status, 201, "{:?}", reply.body);
    let id = reply.body["run_id"].as_str().unwrap().to_string();
    let parked = served.wait_status("", &id, "awaiting_approval").await;
    let pending = &parked["pending_approvals"][0];
    assert_eq!(pending["call"]["id"], "q1", "{parked}");
    assert!(
        pending["preview"].to_string().contains("which one?"),
        "the question is the preview: {pending}"
    );
    // An answer needs its text; approve/deny take none.
    for bad in [
        json!({"decision": "answer"}),
        json!({"decision": "approve", "answer": "x"}),
    ] {
        let refused = served
            .send(
                "POST",
                &format!("/runs/{id}/approvals/q1"),
                None,
                Some(&bad),
            )
            .await;
        assert_eq!(refused.status, 400, "{bad}: {:?}", refused.body);
        assert!(refused.text.contains("answer"), "{}", refused.text);
    }
    let answered = served
        .send(
            "POST",
            &format!("/runs/{id}/approvals/q1"),
            None,
            Some(&json!({"decision": "answer", "answer": "the blue one"})),
        )
        .await;
    assert_eq!(answered.status, 200, "{:?}", answered.body);
    assert_eq!(answered.body["decision"], "answer");
    let events = served.events_until("", &id, "run_stopped").await;
    let result = finished_call(&events);
    assert!(result.contains("echo: the blue one"), "{result}");
    let (_, stopped) = events.last().unwrap();
    assert_eq!(stopped["event"]["stop_reason"], "done", "{stopped}");
    one_remote_task(&agent);
}

/// `agentry serve` with `asker`, its calls going to `agent`.
fn serve(agent: &Agent) -> (tempfile::TempDir, Served) {
    let dir = place(&agent.base);
    let config = dir.path().join("serve.toml");
    let store = dir.path().join("runs.db");
    let served = Served::start(
        &[
            "--config",
            path_str(&config),
            "--store",
            path_str(&store),
            "--no-auth",
        ],
        &[("ECHO_AGENT_TOKEN", TOKEN)],
    );
    (dir, served)
}

/// One remote task, continued by the answer: no second task was made.
fn one_remote_task(agent: &Agent) {
    let record = std::fs::read_to_string(&agent.record).unwrap();
    assert_eq!(
        record.lines().filter(|l| l.starts_with("task ")).count(),
        1,
        "{record}"
    );
}

/// The `tool_call_finished` event of a run's events, as text.
pub(super) fn finished_call(events: &[(String, Value)]) -> String {
    events
        .iter()
        .find(|(name, _)| name == "tool_call_finished")
        .map(|(_, data)| data.to_string())
        .expect("the call finished")
}

/// SendMessage of a data part to `asker`'s task `task` on `base`.
pub(super) async fn send_data(base: &str, data: Value, task: &str) -> (u16, Value) {
    let message = send_message(json!({ "data": data }), Some(task));
    rpc(base, "/a2a/asker", "none", true, message).await
}

pub(super) fn send_message(part: Value, task: Option<&str>) -> Value {
    let mut message = json!({"messageId": "m", "role": "ROLE_USER", "parts": [part]});
    if let Some(task) = task {
        message["taskId"] = json!(task);
    }
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it and sets A2A_PYTHON); .ci/run runs it"]
async fn a_remote_agents_question_is_answered_through_an_a2a_message() {
    let agent = start_agent();
    let (_dir, served) = serve(&agent);
    let (status, reply) = rpc(
        &served.base,
        "/a2a/asker",
        "none",
        true,
        send_message(json!({"text": "go"}), None),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let task = &reply["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{reply}"
    );
    let id = task["id"].as_str().unwrap().to_string();
    // The status says it is a question and how to answer it.
    let parts = &task["status"]["message"]["parts"];
    let text = parts[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("which one?") && text.contains(r#""answer": TEXT"#),
        "{parts}"
    );
    assert_eq!(
        parts[1]["data"]["calls"][0]["question"], "which one?",
        "{parts}"
    );
    // Both a verdict and an answer: refused, the call still waits.
    let both = json!({"approval": {"call_id": "q1", "approve": true, "answer": "x"}});
    let (_, refused) = send_data(&served.base, both, &id).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let answer = json!({"approval": {"call_id": "q1", "answer": "the green one"}});
    let (status, done) = send_data(&served.base, answer, &id).await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    let events = served.events_until("", &id, "run_stopped").await;
    let result = finished_call(&events);
    assert!(result.contains("echo: the green one"), "{result}");
    one_remote_task(&agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk Python package (A2A_PYTHON) and @ag-ui/client (AGUI_DIR); .ci/run runs it"]
async fn a_remote_agents_question_is_answered_through_an_ag_ui_resume() {
    agui_dir();
    let agent = start_agent();
    let (_dir, served) = serve(&agent);
    let plan = json!([
        {"runId": "r1", "message": "go"},
        {"runId": "r2", "resume": [{"interruptId": "q1", "status": "resolved",
            "payload": {"answer": "the red one"}}]}
    ])
    .to_string();
    let seen = client(&["post", &served.base, "none", "asker", &plan]);
    let calls = seen["calls"].as_array().unwrap();
    for call in calls {
        assert_eq!(call["ok"], true, "{seen}");
    }
    // 1: the question, in the approval event and in the interrupt.
    let approval = calls[0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "agentry.approval")
        .unwrap_or_else(|| panic!("no agentry.approval: {}", calls[0]));
    assert_eq!(approval["value"]["question"], "which one?", "{approval}");
    let finished = calls[0]["events"].as_array().unwrap().last().unwrap();
    let interrupt = &finished["outcome"]["interrupts"][0];
    assert_eq!(interrupt["id"], "q1", "{finished}");
    let message = interrupt["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("which one?") && message.contains("answer"),
        "{interrupt}"
    );
    // 2: answered, the remote task completes with the text and the run ends.
    let result = first(&calls[1]["events"], "TOOL_CALL_RESULT");
    assert!(
        result["content"].to_string().contains("echo: the red one"),
        "{result}"
    );
    assert_eq!(calls[1]["result"], "asked", "{}", calls[1]);
    one_remote_task(&agent);
}
