//! Children on other models: a parent on one OpenAI-compatible server spawns a
//! child on the task's `[policy.models.worker]`, served by another; each server
//! sees only its own node's requests. A child on an unknown model is `EINVAL`
//! naming the models there are.

use crate::cli::fallback::{KEYS, openai_call, strict_server};
use crate::*;

/// A text reply ending the turn (the child's answer).
fn openai_text(text: &str) -> (u16, String) {
    let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}]});
    let usage =
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}});
    (
        200,
        format!("data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n"),
    )
}

#[test]
fn a_child_runs_on_the_model_it_names_and_an_unknown_name_is_einval() {
    let (worker_url, worker) = strict_server(vec![openai_text("sub done")]);
    let (parent_url, parent) = strict_server(vec![
        openai_call(
            "s",
            "agent_spawn",
            r#"{"name":"w","goal":"sub","model":"worker"}"#,
        ),
        openai_call(
            "x",
            "agent_spawn",
            r#"{"name":"x","goal":"sub","model":"nope"}"#,
        ),
        openai_call("wait", "agent_wait", r#"{"child_id":"w"}"#),
        openai_call("fin", "task_finish", r#"{"answer":"delegated"}"#),
    ]);
    let toml = format!(
        "goal = \"delegate\"\n[budget]\nmax_steps = 10\n[tools]\ngrant = [\"agent\"]\n\
         [policy]\nmodel = \"openai:parent-model\"\nbase_url = \"{parent_url}/v1\"\n\
         [policy.models.worker]\nmodel = \"openai:worker-model\"\nbase_url = \"{worker_url}/v1\"\n"
    );
    let task = task_dir(&toml, "{}");
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let out = crate::cli::model::agentry_env(
        &[
            "run",
            path_str(task.path()),
            "--json",
            "--no-store",
            "--workdir",
            path_str(&workdir),
        ],
        &KEYS,
    );
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}; stderr: {}", stderr(&out)));
    assert_eq!(report["stop_reason"], "done", "{report}");
    let (parent, worker) = (parent.lock().unwrap(), worker.lock().unwrap());
    assert_eq!((parent.refused, worker.refused), (0, 0));
    assert_eq!(parent.posts.len(), 4);
    assert_eq!(worker.posts.len(), 1);
    assert!(parent.posts.iter().all(|p| p["model"] == "parent-model"));
    assert!(worker.posts.iter().all(|p| p["model"] == "worker-model"));
    assert!(
        worker.posts[0].to_string().contains("sub"),
        "the child's goal"
    );
    // The unknown name came back to the parent's model as EINVAL listing the names.
    let seen_by_parent = parent.posts[2].to_string();
    assert!(seen_by_parent.contains("EINVAL"), "{seen_by_parent}");
    assert!(
        seen_by_parent.contains("the models are: worker"),
        "{seen_by_parent}"
    );
    // The tree records each node's model.
    let child = &report["tree"]["children"][0];
    assert_eq!(child["model"], "openai:worker-model", "{report}");
    assert_eq!(report["tree"]["model"], "openai:parent-model");
    // Each node's tokens, as its own server reported them, are charged up the
    // tree: 4 parent turns of 7 + 3, one child turn of 5 + 2.
    assert_eq!(child["spent"]["tokens_in"], 5, "{report}");
    let spent = &report["budget"]["spent"];
    assert_eq!(
        (spent["tokens_in"].as_u64(), spent["tokens_out"].as_u64()),
        (Some(33), Some(14)),
        "{report}"
    );
}
