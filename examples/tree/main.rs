//! A planner parent splits a task into three children that run concurrently,
//! each with a budget carved out of the parent's, then prints the tree with each
//! node's stop reason and spend.
//!
//! `cargo run --example tree`
//!
//! Everything is scripted (no network): the parent's script delegates with the
//! `agent.spawn` tool (inline child scripts) and collects results with `agent.wait`.
//! One child asks for more steps than it needs; one runs out of steps on purpose
//! and comes back as an observation (`max_steps`), not a crash.

use agentry::protocol::event::RunEvent;
use agentry::{Grants, ResultEnvelope, RunConfig, Runtime, Script};
use serde_json::{Value, json};

fn child(name: &str, steps: u64, turns: Value) -> Value {
    json!({
        "name": name,
        "goal": format!("sub-task {name}"),
        "budget": {"max_steps": steps},
        "grant": ["fs.read", "fs.write"],
        "script": {"turns": turns, "then": "repeat_last"}
    })
}

/// The parent's configuration: it may delegate (`agent`), 20 steps, 10 s.
fn planner_config(workdir: &std::path::Path) -> RunConfig {
    let mut config = RunConfig::new("sum a.txt and b.txt through helpers", workdir);
    config.task_id = "planner".into();
    config.grants = Grants::new(["fs.read", "fs.write", "agent"]);
    config.limits.max_steps = Some(20);
    config.limits.deadline_ms = Some(10_000);
    config.progress_window = 0;
    config
}

/// The three scripted children the parent spawns: `sum-a`, `sum-b`, `dawdler`.
fn children() -> [Value; 3] {
    let sum_a = child(
        "sum-a",
        4,
        json!([
            {"tool_calls": [{"id": "r", "name": "fs.read", "arguments": {"path": "a.txt"}}]},
            {"tool_calls": [{"id": "w", "name": "fs.write", "arguments": {"path": "a.sum", "content": "8"}}]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "8"}}]}
        ]),
    );
    let sum_b = child(
        "sum-b",
        6,
        json!([
            {"tool_calls": [{"id": "r", "name": "fs.read", "arguments": {"path": "b.txt"}}]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "15"}}]}
        ]),
    );
    // Loops on a read: stopped by its own 2-step budget.
    let dawdler = child(
        "dawdler",
        2,
        json!([{"tool_calls": [{"id": "r", "name": "fs.read", "arguments": {"path": "a.txt"}}]}]),
    );
    [sum_a, sum_b, dawdler]
}

/// The parent's script: spawn the three, wait for each, write the sum, finish.
fn planner_script() -> Result<Script, Box<dyn std::error::Error>> {
    let [sum_a, sum_b, dawdler] = children();
    let script = Script::from_value(&json!({"turns": [
        {"tool_calls": [
            {"id": "s1", "name": "agent.spawn", "arguments": sum_a},
            {"id": "s2", "name": "agent.spawn", "arguments": sum_b},
            {"id": "s3", "name": "agent.spawn", "arguments": dawdler}
        ]},
        {"tool_calls": [
            {"id": "w1", "name": "agent.wait", "arguments": {"child_id": "sum-a"}},
            {"id": "w2", "name": "agent.wait", "arguments": {"child_id": "sum-b"}},
            {"id": "w3", "name": "agent.wait", "arguments": {"child_id": "dawdler"}}
        ]},
        {"tool_calls": [{"id": "w", "name": "fs.write", "arguments": {"path": "sum.txt", "content": "23"}}]},
        {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "23"}}]}
    ]}))?;
    Ok(script)
}

/// Prints one line per finished `agent.wait` (and per failed call); false if
/// a call failed or a child's wait came back without a stop reason.
fn print_children(results: Vec<ResultEnvelope>) -> bool {
    let mut all_good = true;
    for result in results {
        if !result.ok {
            println!("│  {} failed: {:?}", result.tool_call_id, result.error);
            all_good = false;
        }
        if result.tool == "agent.wait" {
            let d = result.data.unwrap_or_default();
            println!(
                "├─ {:<8} {:<20} steps {:>2}  tool calls {:>2}  answer {}",
                d["name"].as_str().unwrap_or("?"),
                d["stop_reason"].as_str().unwrap_or("?"),
                d["steps"],
                d["tool_calls"],
                d["answer"],
            );
            all_good &= !d["stop_reason"].is_null();
        }
    }
    all_good
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let workdir = tempfile::tempdir()?;
    std::fs::write(workdir.path().join("a.txt"), "3\n5\n")?;
    std::fs::write(workdir.path().join("b.txt"), "7\n8\n")?;

    let runtime = Runtime::with_builtins()?;
    let config = planner_config(workdir.path());
    let script = planner_script()?;

    let parent = runtime.start(config, script.into_policy()).await?;
    // The first subscriber sees every event from the start of the run.
    let mut events = parent.subscribe();
    let mut results = Vec::new();
    while let Ok(record) = events.recv().await {
        if let RunEvent::ToolCallFinished { result, .. } = &record.event {
            results.push((**result).clone());
        }
        if matches!(record.event, RunEvent::RunStopped { .. }) {
            break;
        }
    }
    let outcome = parent.wait().await?;

    println!(
        "planner     {:<20} steps {:>2}  tool calls {:>2}  (whole tree: steps {}, tool calls {})",
        outcome.stop_reason.to_string(),
        outcome.steps,
        outcome.tool_calls,
        outcome.budget.spent.steps,
        outcome.budget.spent.tool_calls,
    );
    let all_good = print_children(results);
    println!("{}", outcome.detail);
    if outcome.stop_reason != agentry::StopReason::Done || !all_good {
        std::process::exit(1);
    }
    Ok(())
}
