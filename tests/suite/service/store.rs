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
        settle.body["error"]
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
