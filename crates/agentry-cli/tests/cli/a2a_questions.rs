//! A remote A2A agent's question put to a human under `agentry serve`
//! (`[[tools.a2a]] input_required = "human"`): the run parks on the call as
//! for an approval, the question as its preview; `POST
//! /runs/{id}/approvals/{call_id}` with `{"decision": "answer"}` sends the
//! text to the same remote task, which completes with it.

use serde_json::json;

use super::a2a_tools::{TOKEN, start_agent};
use super::serve::Served;
use crate::*;

/// serve.toml with the agent `asker`, whose one call asks the test agent
/// "ask" (it answers with a question) and whose questions go to a human.
fn place(base: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("tasks/asker");
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
    std::fs::write(
        dir.path().join("serve.toml"),
        "[agents.asker]\ntask = \"tasks/asker\"\n",
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it and sets A2A_PYTHON); .ci/run runs it"]
async fn a_remote_agents_question_is_answered_through_the_approval_route() {
    let agent = start_agent();
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
    let result = events
        .iter()
        .find(|(name, _)| name == "tool_call_finished")
        .map(|(_, data)| data.to_string())
        .expect("the call finished");
    assert!(result.contains("echo: the blue one"), "{result}");
    let (_, stopped) = events.last().unwrap();
    assert_eq!(stopped["event"]["stop_reason"], "done", "{stopped}");
    // One remote task, continued by the answer: no second task was made.
    let record = std::fs::read_to_string(&agent.record).unwrap();
    assert_eq!(
        record.lines().filter(|l| l.starts_with("task ")).count(),
        1,
        "{record}"
    );
}
