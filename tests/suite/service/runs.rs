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

    let mut run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.status, 200);
    let traceparent = run.body["traceparent"].take();
    assert!(
        traceparent.as_str().is_some_and(|t| t.starts_with("00-")),
        "{traceparent}"
    );
    run.body
        .as_object_mut()
        .ok_or("not an object")?
        .remove("traceparent");
    assert_eq!(
        run.body,
        json!({
            "run_id": run_id,
            "status": "stopped",
            "steps": 3,
            "tool_calls": 3,
            "tokens_in": 0,
            "tokens_out": 0,
            "cost_micros": 0,
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
        unknown.body["error"]["message"]
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

/// A task whose one `proc.run` prints `TRACEPARENT`.
fn traceparent_task() -> Value {
    json!({
        "goal": "show the trace context",
        "budget": {"max_steps": 4, "deadline": "30s"},
        "tools": {"grant": ["proc.run"]},
        "trace": {"sample": 1.0},
        "script": {"turns": [
            {"tool_calls": [{"id": "show", "name": "proc.run",
                             "arguments": {"argv": ["sh", "-c", "printf %s \"$TRACEPARENT\""]}}]},
            finish("finish", "shown"),
        ]}
    })
}

/// Creates [`traceparent_task`] with these `traceparent` headers; returns the
/// traceparent the reply, GET and the run's process saw.
async fn traceparents_of(service: &Service, headers: &[&str]) -> Result<[String; 3], TestError> {
    let mut request = service
        .client
        .client
        .post(format!("{}/runs", service.base))
        .header("content-type", "application/json")
        .body(traceparent_task().to_string());
    for value in headers {
        request = request.header("traceparent", *value);
    }
    let response = request.send().await?;
    assert_eq!(response.status().as_u16(), 201);
    let created: Value = response.json().await?;
    let run_id = created["run_id"].as_str().ok_or("no run_id")?;
    let events = service.events(run_id).await?.rest().await?;
    let shown = events
        .iter()
        .find(|e| e.event == "tool_call_finished")
        .ok_or_else(|| format!("no tool_call_finished in {:?}", names(&events)))?;
    let stdout = &shown.data["event"]["result"]["data"]["stdout"];
    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.body["outcome"]["stop_reason"], "done", "{:?}", run.body);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Ok([
        text(&created["traceparent"]),
        text(&run.body["traceparent"]),
        text(stdout),
    ])
}

/// A W3C `traceparent` header puts the run in the caller's trace: the create
/// reply and GET show the run's traceparent with the header's trace id, and the
/// run's `proc.run` gets the same as `TRACEPARENT`. A malformed or repeated
/// header is ignored (the run starts its own trace), not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceparent_header_puts_the_run_in_that_trace() -> Result<(), TestError> {
    let service = Service::start().await?;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = format!("00-{trace}-00f067aa0ba902b7-01");
    let [created, shown, seen] = traceparents_of(&service, &[&parent]).await?;
    assert!(created.starts_with(&format!("00-{trace}-")), "{created}");
    assert_eq!(shown, created);
    assert_eq!(seen, created, "the process got the run's traceparent");

    let other = format!("00-{}-00f067aa0ba902b7-01", "1".repeat(32));
    let ignored = [
        vec!["garbage"],
        vec!["00-00000000000000000000000000000000-00f067aa0ba902b7-01"],
        vec![&parent[..parent.len() - 1]],
        vec![parent.as_str(), other.as_str()],
    ];
    for headers in ignored {
        let [created, shown, seen] = traceparents_of(&service, &headers).await?;
        assert!(created.starts_with("00-"), "{created}");
        assert!(!created.contains(trace), "{headers:?} joined: {created}");
        assert!(
            !created.contains(&"1".repeat(32)),
            "{headers:?} joined: {created}"
        );
        assert_eq!(shown, created);
        assert_eq!(seen, created);
    }
    Ok(())
}
