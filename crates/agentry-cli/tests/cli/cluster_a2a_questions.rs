//! A remote A2A agent's question (`[[tools.a2a]] input_required = "human"`)
//! on a cluster: the run waits on node A, and the human's text answer
//! reaches it through node B — an A2A data part `{"approval": {"call_id",
//! "answer"}}`, then an AG-UI `resume` with `payload.answer` — sent as the
//! native `{"decision": "answer", "answer"}` the holder applies; the same
//! remote task completes with the text.

use serde_json::json;

use super::a2a_questions::{asker_task, finished_call, send_data, send_message};
use super::a2a_tools::{TOKEN, start_agent};
use super::cluster::Place;
use super::cluster_agui::holder_pid;
use super::serve::Served;
use super::serve_a2a::rpc;
use super::serve_agui::{agui_dir, client, first};
use crate::*;

/// A node of `place` that can reach the test agent (its token in the env).
fn node(place: &Place) -> Served {
    let config = place.dir.path().join("serve.toml");
    Served::start(
        &[
            "--config",
            path_str(&config),
            "--no-auth",
            "--store",
            &place.url,
            "--lease",
            "10s",
        ],
        &[("RUST_LOG", "warn"), ("ECHO_AGENT_TOKEN", TOKEN)],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL, the a2a-sdk Python package (A2A_PYTHON) and @ag-ui/client (AGUI_DIR); .ci/run runs it"]
async fn a_question_a_run_on_node_a_waits_on_is_answered_through_node_b() {
    agui_dir();
    let agent = start_agent();
    let place = Place::new("");
    asker_task(place.dir.path(), &agent.base);
    let config = place.dir.path().join("serve.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[agents.asker]\ntask = \"tasks/asker\"\na2a = true\n");
    std::fs::write(&config, text).unwrap();
    let a = node(&place);
    let b = node(&place);

    // A2A: started on A, answered through B.
    let go = send_message(json!({"text": "go"}), None);
    let (_, asked) = rpc(&a.base, "/a2a/asker", "none", true, go).await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let id = task["id"].as_str().unwrap().to_string();
    assert_eq!(holder_pid(&place, &id), a.pid());
    let answer = json!({"approval": {"call_id": "q1", "answer": "the green one"}});
    let (_, done) = send_data(&b.base, answer, &id).await;
    assert_eq!(
        done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done}"
    );
    let events = a.events_until("", &id, "run_stopped").await;
    let result = finished_call(&events);
    assert!(result.contains("echo: the green one"), "{result}");

    // AG-UI: a thread started on one node, resumed through the other with
    // the run id as its thread id.
    let plan = json!([{"runId": "r1", "message": "go"}]).to_string();
    let seen = client(&["post", &a.base, "none", "asker", &plan]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    let id = first(&call["events"], "CUSTOM")["value"]["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let other = if holder_pid(&place, &id) == a.pid() {
        &b
    } else {
        &a
    };
    let resume = json!([{"runId": "r2", "resume": [{"interruptId": "q1",
        "status": "resolved", "payload": {"answer": "the red one"}}]}])
    .to_string();
    let seen = client(&["post", &other.base, "none", "asker", &resume, &id]);
    let call = &seen["calls"][0];
    assert_eq!(call["ok"], true, "{seen}");
    let result = first(&call["events"], "TOOL_CALL_RESULT");
    assert!(
        result["content"].to_string().contains("echo: the red one"),
        "{result}"
    );
    assert_eq!(call["result"], "asked", "{call}");
    // Two runs, each one remote task continued by its answer.
    let record = std::fs::read_to_string(&agent.record).unwrap();
    assert_eq!(
        record.lines().filter(|l| l.starts_with("task ")).count(),
        2,
        "{record}"
    );
}
