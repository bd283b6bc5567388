//! Runs created over HTTP: the event stream, approvals and denials.

use super::*;

/// A run created over HTTP streams every event from `step_started` to
/// `run_stopped` over SSE, and GET shows it stopped `done` with its outcome; a
/// client connecting after the stop still gets the whole history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_streams_its_events_and_stops_done() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(sum_task()).await?;
    let events = service.events(&run_id).await?.rest().await?;

    let got = names(&events);
    assert_eq!(got.first(), Some(&"step_started"), "{got:?}");
    assert_eq!(got.last(), Some(&"run_stopped"), "{got:?}");
    assert_eq!(
        got.iter().filter(|n| **n == "step_started").count(),
        3,
        "{got:?}"
    );
    assert_eq!(
        events.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "ids are the sequence numbers, from 1, no gaps"
    );
    for e in &events {
        assert_eq!(e.data["seq"], e.id);
        assert_eq!(e.data["run_id"], run_id.as_str());
        assert_eq!(e.data["event"]["type"], e.event.as_str());
    }
    let stopped = events.last().ok_or("no events")?;
    assert_eq!(stopped.data["event"]["stop_reason"], "done");

    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.status, 200);
    assert_eq!(
        run.body,
        json!({
            "run_id": run_id,
            "status": "stopped",
            "steps": 3,
            "tool_calls": 3,
            "inputs": 0,
            "pending_approvals": [],
            "outcome": {
                "stop_reason": "done",
                "answer": "sum=23",
                "detail": "answer \"sum=23\" accepted: 2 checks passed",
                "steps": 3,
                "tool_calls": 3,
            }
        })
    );

    let late = service.events(&run_id).await?.rest().await?;
    assert_eq!(names(&late), got, "a late client replays the whole run");
    Ok(())
}

/// A call that needs approval parks the run (GET shows it, with the call); an
/// unknown call id is 404; approving runs the call and the run finishes `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs() -> Result<(), TestError> {
    let service = Service::start().await?;
    let mut task = approval_task();
    task["accept"] = json!([{"file": "sum.txt", "equals": "23"}]);
    let run_id = service.create(task).await?;
    let mut stream = service.events(&run_id).await?;
    let parked = stream.until("awaiting_approval").await?;
    let parked = parked.last().ok_or("no event")?;
    assert_eq!(parked.data["event"]["call"]["id"], "write");

    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.body["status"], "awaiting_approval", "{:?}", run.body);
    let pending = run.body["pending_approvals"]
        .as_array()
        .ok_or("no pending list")?;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["call"]["id"], "write");
    assert_eq!(pending[0]["call"]["name"], "fs.write");

    let unknown = service
        .post(
            &format!("/runs/{run_id}/approvals/nope"),
            json!({"decision": "approve"}),
        )
        .await?;
    assert_eq!(unknown.status, 404, "{:?}", unknown.body);
    assert!(
        unknown.body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("nope"),
        "{:?}",
        unknown.body
    );

    let approved = service
        .post(
            &format!("/runs/{run_id}/approvals/write"),
            json!({"decision": "approve"}),
        )
        .await?;
    assert_eq!(approved.status, 200, "{:?}", approved.body);
    assert!(
        approved.body["seq"].as_u64().is_some_and(|s| s >= 1),
        "{:?}",
        approved.body
    );

    let rest = stream.rest().await?;
    let written = rest
        .iter()
        .find(|e| {
            e.event == "tool_call_finished" && e.data["event"]["result"]["tool_call_id"] == "write"
        })
        .ok_or("no result for the approved call")?;
    assert_eq!(written.data["event"]["result"]["ok"], true);
    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.body["status"], "stopped");
    assert_eq!(run.body["outcome"]["stop_reason"], "done", "{:?}", run.body);

    // The run has stopped: no more decisions.
    let late = service
        .post(
            &format!("/runs/{run_id}/approvals/write"),
            json!({"decision": "approve"}),
        )
        .await?;
    assert_eq!(late.status, 409, "{:?}", late.body);
    Ok(())
}

/// Denying a parked call feeds `EPERM`, with the reason, back as its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_gets_eperm() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(approval_task()).await?;
    let mut stream = service.events(&run_id).await?;
    stream.until("awaiting_approval").await?;

    let denied = service
        .post(
            &format!("/runs/{run_id}/approvals/write"),
            json!({"decision": "deny", "reason": "not on a Friday"}),
        )
        .await?;
    assert_eq!(denied.status, 200, "{:?}", denied.body);
    assert_eq!(denied.body["decision"], "deny");

    let rest = stream.rest().await?;
    let result = rest
        .iter()
        .find(|e| {
            e.event == "tool_call_finished" && e.data["event"]["result"]["tool_call_id"] == "write"
        })
        .map(|e| &e.data["event"]["result"])
        .ok_or("no result for the denied call")?;
    assert_eq!(result["ok"], false);
    assert_eq!(result["error"]["code"], "EPERM", "{result:?}");
    let message = result["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not on a Friday"), "{message}");
    assert_eq!(names(&rest).last(), Some(&"run_stopped"));
    Ok(())
}
