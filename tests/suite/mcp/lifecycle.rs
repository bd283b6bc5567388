//! MCP servers that fail to start: the run never starts, the error names the
//! server and what it printed, within its `startup_timeout`, and nothing of
//! it is left running.

use std::time::{Duration, Instant};

use agentry::{TaskError, TaskSpec};
use agentry_test_support::TestError;
use agentry_test_support::procs::{alive_with_cmdline, unique_secs};

use super::task_dir;

fn server_task(command: &str, startup_timeout: &str) -> String {
    format!(
        "goal = \"g\"\n[tools]\ngrant = [\"db.*\"]\n\
         [[tools.mcp]]\nname = \"db\"\ncommand = {command}\nstartup_timeout = \"{startup_timeout}\"\n"
    )
}

/// Starts the task's servers and returns the error's text.
async fn start_error(toml: &str) -> Result<String, TestError> {
    let tmp = tempfile::tempdir()?;
    let task = TaskSpec::load(&task_dir(tmp.path(), toml)?)?;
    match super::start_mcp(&task, tmp.path()).await {
        Ok(_) => Err("the server started".into()),
        Err(e @ TaskError::Mcp { .. }) => Ok(e.to_string()),
        Err(other) => Err(format!("expected TaskError::Mcp, got {other:?}").into()),
    }
}

/// A server that prints a complaint and never answers `initialize`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_initializes_fails_the_start_within_its_timeout()
-> Result<(), TestError> {
    let secs = unique_secs(600);
    let command =
        format!("[\"sh\", \"-c\", \"echo 'cannot reach the database' >&2; exec sleep {secs}\"]");
    let started = Instant::now();
    let message = start_error(&server_task(&command, "1s")).await?;
    let took = started.elapsed();

    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(message.contains("task.toml"), "{message}");
    assert!(message.contains("db"), "names the server: {message}");
    assert!(
        message.contains("cannot reach the database"),
        "carries its stderr: {message}"
    );
    // The server's group was killed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !alive_with_cmdline(&["sleep", &secs]).is_empty() {
        assert!(Instant::now() < deadline, "the server is still running");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A server that exits at once: the error says so, with what it printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_at_start_is_a_clear_error() -> Result<(), TestError> {
    let command = "[\"sh\", \"-c\", \"echo 'no such config file' >&2; exit 3\"]";
    let message = start_error(&server_task(command, "20s")).await?;
    assert!(message.contains("db"), "{message}");
    assert!(message.contains("no such config file"), "{message}");
    Ok(())
}

/// A program that does not exist: the error names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_program_is_named() -> Result<(), TestError> {
    let command = "[\"/nonexistent/mcp-server\"]";
    let message = start_error(&server_task(command, "20s")).await?;
    assert!(message.contains("/nonexistent/mcp-server"), "{message}");
    Ok(())
}

/// A server listing 20,017 tools in 21 pages, with `max_tools` above that:
/// it starts and every tool is registered in the runtime's registry. This
/// used to take minutes (each registration compared the new name with every
/// one before it, as a model API would see it); now it is linear. The bound
/// is generous, for a debug build on a busy machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_tools_start_and_register_in_linear_time() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let toml = format!(
        "goal = \"g\"\n[tools]\ngrant = [\"many.*\"]\n\
         [[tools.mcp]]\nname = \"many\"\ncommand = [{:?}]\nmax_tools = 25000\n\
         startup_timeout = \"60s\"\nenv = {{ TEST_MANY_TOOLS = \"20000\" }}\n",
        super::test_server()?.display().to_string()
    );
    let task = TaskSpec::load(&task_dir(tmp.path(), &toml)?)?;
    let started = Instant::now();
    let mcp = super::start_mcp(&task, tmp.path()).await?;
    let registry = task.registry_with(&mcp);
    mcp.shutdown().await;
    let took = started.elapsed();
    let registry = registry?;
    assert!(registry.get("many.many19999").is_some());
    assert!(registry.get("many.read").is_some());
    assert!(took < Duration::from_secs(60), "took {took:?}");
    Ok(())
}
