//! Whole runs on an MCP server that needs nothing installed: agentry-mcp's
//! own test server (`crates/agentry-mcp/examples/test_server.rs`, a real rmcp
//! server on stdio): an unannotated tool waits for a human's approval; a
//! server killed mid-run is restarted at the next call and the run goes on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry::mcp::McpServers;
use agentry::protocol::event::RunEvent;
use agentry::{Runtime, StopReason, TaskSpec};
use agentry_test_support::{
    ScriptBuilder, TestError, collect_until_stopped, tool_results, wait_for_event,
};
use serde_json::json;

use super::{task_dir, test_server};

fn task_toml(extra: &str) -> Result<String, TestError> {
    Ok(format!(
        "goal = \"use the server\"\n[budget]\nmax_steps = 10\n[tools]\ngrant = [\"srv.*\", \"server.kill\"]\n\
         [[tools.mcp]]\nname = \"srv\"\ncommand = [{:?}]\n{extra}",
        test_server()?.display().to_string()
    ))
}

/// A task on the test server (`extra` appended to its task.toml), its
/// servers started in a fresh working directory, and a runtime on its tools.
struct Started {
    task: TaskSpec,
    workdir: PathBuf,
    mcp: McpServers,
    runtime: Runtime,
}

async fn start(tmp: &Path, extra: &str) -> Result<Started, TestError> {
    let task = TaskSpec::load(&task_dir(tmp, &task_toml(extra)?)?)?;
    let workdir = task.prepare_workdir(Some(&tmp.join("run")))?;
    let mcp = super::start_mcp(&task, &workdir).await?;
    let runtime = Runtime::new(task.registry_with(&mcp)?);
    Ok(Started {
        task,
        workdir,
        mcp,
        runtime,
    })
}

/// `write` has no annotations: `irreversible_external`, so the call waits
/// for approval; approved, it runs and the run ends `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unannotated_tool_waits_for_approval_then_runs() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let Started {
        task,
        workdir,
        mcp,
        runtime,
    } = start(tmp.path(), "").await?;
    let policy = ScriptBuilder::new()
        .call("w", "srv.write", json!({"text": "pay 10"}))
        .finish("paid")
        .policy();
    let handle = runtime.start(task.run_config(workdir), policy).await?;
    let mut events = handle.subscribe();
    let waiting = wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::AwaitingApproval { call, .. } if call.id == "w"),
        Duration::from_secs(30),
    )
    .await?;
    assert!(matches!(waiting.event, RunEvent::AwaitingApproval { .. }));
    handle.approve("w").await?;
    let rest = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;
    mcp.shutdown().await;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&rest);
    let (_, w) = results
        .iter()
        .find(|(_, r)| r.tool_call_id == "w")
        .ok_or("no result for w")?;
    assert!(w.ok, "{w:?}");
    assert!(
        w.data
            .as_ref()
            .ok_or("no data")?
            .to_string()
            .contains("pay 10")
    );
    Ok(())
}

/// A command tool SIGKILLs the server between two calls; the next call
/// finds it dead, starts it again and answers; the run ends `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_run_is_restarted_and_the_run_goes_on() -> Result<(), TestError> {
    let kill_tool = r#"
[[tools.command]]
name = "server.kill"
description = "SIGKILL the process group whose id is in server.pid"
argv = ["sh", "-c", "kill -9 -$(cat server.pid)"]
effect = "reversible"
# It signals a process outside its own sandbox (the server), which no sandbox
# allows: this one tool runs unconfined. The whole group: the server runs in
# its own sandbox, under a leader that passes its status on.
sandbox = { mode = "off" }
"#;
    let tmp = tempfile::tempdir()?;
    let Started {
        task,
        workdir,
        mcp,
        runtime,
    } = start(tmp.path(), kill_tool).await?;
    let first = mcp.iter().find_map(|s| s.pid()).ok_or("no server pid")?;
    std::fs::write(workdir.join("server.pid"), first.to_string())?;
    let policy = ScriptBuilder::new()
        .call("one", "srv.read", json!({"text": "before"}))
        .call("kill", "server.kill", json!({}))
        .call("two", "srv.read", json!({"text": "after"}))
        .finish("went on")
        .policy();
    let handle = runtime.start(task.run_config(workdir), policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    let second = mcp.iter().find_map(|s| s.pid()).ok_or("no server pid")?;
    mcp.shutdown().await;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    for (id, text) in [("one", "before"), ("two", "after")] {
        let (_, r) = results
            .iter()
            .find(|(_, r)| r.tool_call_id == id)
            .ok_or_else(|| format!("no result for {id}"))?;
        assert!(r.ok, "{id}: {r:?}");
        assert!(r.data.as_ref().ok_or("no data")?.to_string().contains(text));
    }
    let killed = results
        .iter()
        .find(|(_, r)| r.tool_call_id == "kill")
        .ok_or("no result for kill")?;
    assert!(killed.1.ok, "{killed:?}");
    assert_ne!(first, second, "the server was started again");
    Ok(())
}

/// An MCP tool whose name a command tool already has (or has at the wire:
/// `srv.read` and `srv_read`) is refused when the registry is built, naming
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_by_a_command_tool_is_refused_naming_both() -> Result<(), TestError> {
    for taken in ["srv.read", "srv_read"] {
        let command_tool = format!(
            "[[tools.command]]\nname = \"{taken}\"\ndescription = \"d\"\nargv = [\"true\"]\n"
        );
        let tmp = tempfile::tempdir()?;
        let task = TaskSpec::load(&task_dir(tmp.path(), &task_toml(&command_tool)?)?)?;
        let mcp = super::start_mcp(&task, tmp.path()).await?;
        let message = match task.registry_with(&mcp) {
            Ok(_) => return Err(format!("{taken}: the registry took both").into()),
            Err(e) => e.to_string(),
        };
        mcp.shutdown().await;
        assert!(
            message.contains("srv.read") && message.contains(taken),
            "{taken}: {message}"
        );
    }
    Ok(())
}

/// The server's progress notifications reach the run's subscribers as
/// `tool_progress` events of the call, never going back, before its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_notifications_become_tool_progress_events() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let Started {
        task,
        workdir,
        mcp,
        runtime,
    } = start(tmp.path(), "").await?;
    let policy = ScriptBuilder::new()
        .call("p", "srv.progress", json!({}))
        .finish("reported")
        .policy();
    let (outcome, events) =
        agentry_test_support::run_with_events(&runtime, task.run_config(workdir), policy).await?;
    mcp.shutdown().await;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let progress: Vec<(f64, Option<f64>)> = events
        .iter()
        .filter_map(|e| {
            if let RunEvent::ToolProgress {
                tool_call_id,
                progress,
                total,
                ..
            } = &e.event
                && tool_call_id == "p"
            {
                Some((*progress, *total))
            } else {
                None
            }
        })
        .collect();
    // rmcp hands each notification to a task of its own, so one may arrive
    // after a later one (dropped: what is published only grows) or after the
    // call's result (dropped with the call's route).
    assert!(!progress.is_empty(), "no tool_progress event: {events:?}");
    assert!(
        progress.windows(2).all(|w| w[0].0 < w[1].0),
        "progress went back: {progress:?}"
    );
    assert!(
        progress.iter().all(|(_, total)| *total == Some(3.0)),
        "{progress:?}"
    );
    let last_progress = events
        .iter()
        .rposition(|e| matches!(e.event, RunEvent::ToolProgress { .. }));
    let finished = events.iter().position(
        |e| matches!(&e.event, RunEvent::ToolCallFinished { result, .. } if result.tool_call_id == "p"),
    );
    assert!(last_progress < finished, "progress after the result");
    Ok(())
}
