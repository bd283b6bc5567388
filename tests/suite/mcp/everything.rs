//! The MCP reference server (`@modelcontextprotocol/server-everything`) as a
//! task's `[[tools.mcp]]`, over stdio and streamable HTTP, through whole runs.

use std::path::Path;
use std::time::{Duration, Instant};

use agentry::mcp::McpServers;
use agentry::protocol::event::RunEvent;
use agentry::protocol::tool::{Effect, Idempotency};
use agentry::{ErrorCode, Runtime, StopReason, TaskSpec};
use agentry_test_support::procs::alive_in_group;
use agentry_test_support::{ScriptBuilder, TestError, run_with_events, tool_results};
use serde_json::json;

use super::{EverythingHttp, everything_bin, task_dir};

/// The `[[tools.mcp]]` block for the server over stdio.
fn stdio_block() -> Result<String, TestError> {
    Ok(format!(
        "[[tools.mcp]]\nname = \"everything\"\ncommand = [\"node\", {:?}, \"stdio\"]\n",
        everything_bin()?.display().to_string()
    ))
}

fn task_toml(block: &str, budget: &str) -> String {
    format!(
        "goal = \"use the everything server\"\n[budget]\n{budget}\n[tools]\ngrant = [\"everything.*\"]\n{block}"
    )
}

/// Lists the server's tools, then calls `echo`, `get-sum` and
/// `get-structured-content` in one run that ends `done`.
async fn lists_and_calls(block: &str) -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let task = TaskSpec::load(&task_dir(tmp.path(), &task_toml(block, "max_steps = 10"))?)?;
    let workdir = task.prepare_workdir(Some(&tmp.path().join("run")))?;
    let mcp = super::start_mcp(&task, &workdir).await?;
    let registry = task.registry_with(&mcp)?;
    for name in [
        "echo",
        "get-sum",
        "get-structured-content",
        "trigger-long-running-operation",
    ] {
        let tool = registry
            .get(&format!("everything.{name}"))
            .ok_or_else(|| format!("everything.{name} not registered: {:?}", registry.names()))?;
        // Annotated readOnlyHint + idempotentHint.
        assert_eq!(tool.contract.effect, Effect::ReadOnly, "{name}");
        assert_eq!(tool.contract.idempotency, Idempotency::Idempotent, "{name}");
    }
    let runtime = Runtime::new(registry);
    let policy = ScriptBuilder::new()
        .call("e", "everything.echo", json!({"message": "hello mcp"}))
        .call("s", "everything.get-sum", json!({"a": 2, "b": 40}))
        .call(
            "c",
            "everything.get-structured-content",
            json!({"location": "Chicago"}),
        )
        .finish("called")
        .policy();
    let (outcome, events) = run_with_events(&runtime, task.run_config(workdir), policy).await?;
    mcp.shutdown().await;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let data = |id: &str| -> Result<String, TestError> {
        let (_, r) = results
            .iter()
            .find(|(_, r)| r.tool_call_id == id)
            .ok_or_else(|| format!("no result for {id}"))?;
        assert!(r.ok, "{id}: {r:?}");
        Ok(r.data.as_ref().ok_or("no data")?.to_string())
    };
    assert!(data("e")?.contains("hello mcp"), "{}", data("e")?);
    assert!(data("s")?.contains("42"), "{}", data("s")?);
    // The structured content is the data (an object with the server's fields).
    let structured = results
        .iter()
        .find(|(_, r)| r.tool_call_id == "c")
        .and_then(|(_, r)| r.data.clone())
        .ok_or("no structured data")?;
    assert!(
        structured.get("temperature").is_some(),
        "structured content as data: {structured}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn over_stdio_the_servers_tools_list_and_answer() -> Result<(), TestError> {
    lists_and_calls(&stdio_block()?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn over_streamable_http_the_servers_tools_list_and_answer() -> Result<(), TestError> {
    let server = EverythingHttp::start()?;
    let block = format!(
        "[[tools.mcp]]\nname = \"everything\"\nurl = \"{}\"\n",
        server.url()
    );
    lists_and_calls(&block).await
}

/// Runs a 60 s operation in a run with a 3 s deadline on the server `block`
/// declares, checks that the call was cancelled at the deadline
/// (`ETIMEDOUT`), the run stopped `deadline` and progress arrived as events
/// on the way; returns the servers, still up.
async fn past_the_deadline(block: &str, tmp: &Path) -> Result<McpServers, TestError> {
    let toml = task_toml(block, "max_steps = 5\ndeadline = \"3s\"");
    let task = TaskSpec::load(&task_dir(tmp, &toml)?)?;
    let workdir = task.prepare_workdir(Some(&tmp.join("run")))?;
    let mcp = super::start_mcp(&task, &workdir).await?;
    let runtime = Runtime::new(task.registry_with(&mcp)?);
    let policy = ScriptBuilder::new()
        .call(
            "long",
            "everything.trigger-long-running-operation",
            json!({"duration": 60, "steps": 60}),
        )
        .finish("never reached")
        .policy();
    let started = Instant::now();
    let (outcome, events) = run_with_events(&runtime, task.run_config(workdir), policy).await?;
    let took = started.elapsed();

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(took < Duration::from_secs(30), "the run took {took:?}");
    let results = tool_results(&events);
    let (_, long) = results
        .iter()
        .find(|(_, r)| r.tool_call_id == "long")
        .ok_or("no result for the long call")?;
    let error = long.error.as_ref().ok_or("the long call did not fail")?;
    assert_eq!(error.code, ErrorCode::Etimedout, "{long:?}");
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, RunEvent::ToolProgress { tool_call_id, .. } if tool_call_id == "long")),
        "no tool_progress event for the long call"
    );
    Ok(mcp)
}

/// Over stdio: once the servers are shut down, nothing of the server's
/// process group is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn a_long_operation_past_the_deadline_is_cancelled_and_leaves_no_process()
-> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let mcp = past_the_deadline(&stdio_block()?, tmp.path()).await?;
    let pgid = mcp
        .iter()
        .find_map(|s| s.pid())
        .ok_or("the stdio server has no pid")?;
    mcp.shutdown().await;
    let pgid = i32::try_from(pgid)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !alive_in_group(pgid).is_empty() {
        assert!(
            Instant::now() < deadline,
            "server processes left: {:?}",
            alive_in_group(pgid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Over streamable HTTP: the cancelled call leaves the session usable; the
/// next call on the same server answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
async fn over_http_a_long_operation_past_the_deadline_is_cancelled() -> Result<(), TestError> {
    let server = EverythingHttp::start()?;
    let block = format!(
        "[[tools.mcp]]\nname = \"everything\"\nurl = \"{}\"\n",
        server.url()
    );
    let tmp = tempfile::tempdir()?;
    let mcp = past_the_deadline(&block, tmp.path()).await?;
    // A second run on the same servers.
    let task = TaskSpec::load(&tmp.path().join("task"))?;
    let workdir = task.prepare_workdir(Some(&tmp.path().join("run2")))?;
    let runtime = Runtime::new(task.registry_with(&mcp)?);
    let policy = ScriptBuilder::new()
        .call("e", "everything.echo", json!({"message": "still here"}))
        .finish("answered")
        .policy();
    let (outcome, events) = run_with_events(&runtime, task.run_config(workdir), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = tool_results(&events);
    let (_, echo) = results.first().ok_or("no result")?;
    assert!(echo.ok, "{echo:?}");
    mcp.shutdown().await;
    Ok(())
}
