//! A service on a store: killed, restarted, its open runs resumed.

use super::*;

/// A service on a store is killed (SIGKILL) with a run still open (an
/// event-driven agent waiting for messages); a new service on the same store
/// resumes it before it listens, under the same id, and the run goes on from
/// where it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_on_a_store_resumes_its_runs_after_a_restart() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("service.db");
    let task = json!({
        "goal": "answer two messages, then finish",
        "budget": {"max_steps": 10, "deadline": "60s"},
        "driver": {"mode": "events"},
        "script": {"turns": [
            {"final": "first"},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "second"}}]}
        ]}
    });
    let process = ServiceProcess::start(&db)?;
    let first = Service::client_of(&process.base)?;
    let run_id = first.create(task).await?;
    let sent = first
        .post(&format!("/runs/{run_id}/messages"), json!({"text": "one"}))
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    // Step 1 answered: the run sleeps until the next message.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = first.get(&format!("/runs/{run_id}")).await?;
        if run.body["steps"] == 1 && run.body["status"] == "sleeping" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    process.kill()?;

    let second = Service::start_on(Some(&db)).await?;
    let run = second.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.status, 200, "the resumed run is served under its id");
    assert_eq!(run.body["steps"], 1);
    // Nothing was interrupted mid-call, so there is nothing to settle.
    let settle = second
        .post(
            &format!("/runs/{run_id}/decisions/nope"),
            json!({"decision": "happened"}),
        )
        .await?;
    assert_eq!(settle.status, 404, "{:?}", settle.body);
    let settle = second
        .post(
            &format!("/runs/{run_id}/decisions/nope"),
            json!({"decision": "maybe"}),
        )
        .await?;
    assert_eq!(settle.status, 400, "{:?}", settle.body);
    assert!(
        settle.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("happened, retry or skip"),
        "{:?}",
        settle.body
    );
    let sent = second
        .post(&format!("/runs/{run_id}/messages"), json!({"text": "two"}))
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = second.get(&format!("/runs/{run_id}")).await?;
        if run.body["status"] == "stopped" {
            assert_eq!(run.body["outcome"]["stop_reason"], "done", "{:?}", run.body);
            assert_eq!(run.body["outcome"]["answer"], "second");
            assert_eq!(run.body["steps"], 2);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// The warden `pid` started (its `$0` is `agentry-warden`), once it runs.
async fn warden_of(pid: u32) -> Result<i32, TestError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let found =
            agentry_test_support::procs::child_named(pid, agentry::tools::proc::WARDEN_NAME);
        if let Some(warden) = found {
            return Ok(warden);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("no warden of process {pid}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A service killed (SIGKILL) while a run's process tool sleeps in a tree,
/// its warden killed first so the tools outlive it: the service started again
/// on the store kills them before it resumes the run, which then waits for a
/// human on the interrupted call (`proc.run` is not idempotent) and goes on
/// once it is settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_services_tools_are_gone_before_its_runs_resume() -> Result<(), TestError> {
    use agentry_test_support::procs::{alive_with_cmdline, unique_secs};
    let secs = unique_secs(47);
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("service.db");
    let task = json!({
        "goal": "wait",
        "budget": {"max_steps": 5, "deadline": "60s"},
        "tools": {"grant": ["proc.run"]},
        "script": {"turns": [
            {"tool_calls": [{"id": "nap", "name": "proc.run",
                "arguments": {"argv": ["sh", "-c", format!("sleep {secs} & sleep {secs}")]}}]},
            {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "went on"}}]}
        ]}
    });
    let process = ServiceProcess::start(&db)?;
    let first = Service::client_of(&process.base)?;
    let run_id = first.create(task).await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    while alive_with_cmdline(&["sleep", &secs]).len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the tool never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let warden = warden_of(process.child.id()).await?;
    std::process::Command::new("kill")
        .args(["-KILL", &warden.to_string()])
        .status()?;
    process.kill()?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(alive_with_cmdline(&["sleep", &secs]).len(), 2, "outlived");

    let second = Service::start_on(Some(&db)).await?;
    assert!(
        alive_with_cmdline(&["sleep", &secs]).is_empty(),
        "fenced before the run resumed"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = second.get(&format!("/runs/{run_id}")).await?;
        if run.body["status"] == "awaiting_decision" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let settled = second
        .post(
            &format!("/runs/{run_id}/decisions/nap"),
            json!({"decision": "skip"}),
        )
        .await?;
    assert_eq!(settled.status, 200, "{:?}", settled.body);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = second.get(&format!("/runs/{run_id}")).await?;
        if run.body["status"] == "stopped" {
            assert_eq!(run.body["outcome"]["stop_reason"], "done", "{:?}", run.body);
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
