//! An event-driven run driven over HTTP: messages, custom events, interrupts.

use super::*;

/// Posts `body` to `path` (202), then reads the stream to the step it woke and
/// checks that step applied `want` as its input.
async fn post_and_see_input(
    service: &Service,
    stream: &mut SseStream,
    path: &str,
    body: Value,
    want: Value,
) -> Result<(), TestError> {
    let sent = service.post(path, body).await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let seen = stream.until("budget_spent").await?;
    let input = seen
        .iter()
        .find(|e| e.event == "input_applied")
        .ok_or("no input_applied")?;
    assert_eq!(input.data["event"]["input"], want);
    Ok(())
}

/// Posts the interrupt `action` (202) and reads the stream to its `input_applied`.
async fn interrupt(
    service: &Service,
    stream: &mut SseStream,
    run_path: &str,
    action: &str,
) -> Result<(), TestError> {
    let sent = service
        .post(&format!("{run_path}/interrupt"), json!({"action": action}))
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let seen = stream.until("input_applied").await?;
    assert_eq!(
        seen.last().ok_or("none")?.data["event"]["input"]["type"],
        action
    );
    Ok(())
}

/// Every kind of input to a stopped run is 409, naming it stopped.
async fn late_inputs_are_refused(service: &Service, run_path: &str) -> Result<(), TestError> {
    for (path, body) in [
        ("messages", json!({"text": "too late"})),
        ("events", json!({"name": "webhook"})),
        ("interrupt", json!({"action": "resume"})),
        (
            "interrupt",
            json!({"action": "redirect", "message": "too late"}),
        ),
        ("interrupt", json!({"action": "abort"})),
    ] {
        let late = service.post(&format!("{run_path}/{path}"), body).await?;
        assert_eq!(late.status, 409, "{path}: {:?}", late.body);
        assert!(
            late.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("stopped"),
            "{:?}",
            late.body
        );
    }
    Ok(())
}

/// An event-driven run over HTTP: messages and custom events each wake a step;
/// pause parks it, resume frees it, abort stops it `user_abort`; input to the
/// stopped run is 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_events_and_interrupts() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(listener_task()).await?;
    let run_path = format!("/runs/{run_id}");
    let mut stream = service.events(&run_id).await?;

    post_and_see_input(
        &service,
        &mut stream,
        &format!("{run_path}/messages"),
        json!({"text": "hello"}),
        json!({"type": "message", "text": "hello"}),
    )
    .await?;
    post_and_see_input(
        &service,
        &mut stream,
        &format!("{run_path}/events"),
        json!({"name": "webhook", "payload": {"order": 7}}),
        json!({"type": "event", "name": "webhook", "payload": {"order": 7}}),
    )
    .await?;

    interrupt(&service, &mut stream, &run_path, "pause").await?;
    let run = service.get(&run_path).await?;
    assert_eq!(run.body["status"], "paused", "{:?}", run.body);
    assert_eq!(run.body["steps"], 2);

    interrupt(&service, &mut stream, &run_path, "resume").await?;

    let aborted = service
        .post(&format!("{run_path}/interrupt"), json!({"action": "abort"}))
        .await?;
    assert_eq!(aborted.status, 202, "{:?}", aborted.body);
    let rest = stream.rest().await?;
    let stopped = rest.last().ok_or("no events after abort")?;
    assert_eq!(stopped.event, "run_stopped");
    assert_eq!(stopped.data["event"]["stop_reason"], "user_abort");

    let run = service.get(&run_path).await?;
    assert_eq!(run.body["status"], "stopped");
    assert_eq!(run.body["inputs"], 4, "message, event, pause, resume");
    assert_eq!(
        run.body["outcome"]["stop_reason"], "user_abort",
        "{:?}",
        run.body
    );
    late_inputs_are_refused(&service, &run_path).await
}

/// Issue 18, item 4: an event-driven agent finishes its turn. One message; the
/// model calls a tool, sees its result and replies in text right away, with no
/// second message; then it sleeps until the next input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_gets_a_tool_call_then_a_reply() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service
        .create(json!({
            "goal": "answer questions, reading the notes first",
            "budget": {"max_steps": 10, "deadline": "60s"},
            "driver": {"mode": "events"},
            "tools": {"grant": ["fs.read"]},
            "files": {"notes.txt": "the answer is 42\n"},
            "script": {"turns": [
                {"tool_calls": [{"id": "look", "name": "fs.read", "arguments": {"path": "notes.txt"}}]},
                {"final": "it is 42"},
            ]}
        }))
        .await?;
    let run_path = format!("/runs/{run_id}");
    let mut stream = service.events(&run_id).await?;

    let sent = service
        .post(
            &format!("{run_path}/messages"),
            json!({"text": "what is the answer?"}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let mut seen = stream.until("decision_made").await?;
    seen.extend(stream.until("decision_made").await?);
    seen.extend(stream.until("budget_spent").await?);

    let names: Vec<&str> = seen.iter().map(|e| e.event.as_str()).collect();
    let inputs = names.iter().filter(|n| **n == "input_applied").count();
    assert_eq!(inputs, 1, "one message, no other input: {names:?}");
    let decisions: Vec<&Value> = seen
        .iter()
        .filter(|e| e.event == "decision_made")
        .map(|e| &e.data["event"]["decision"])
        .collect();
    assert!(decisions[0].to_string().contains("look"), "{decisions:?}");
    assert!(
        decisions[1].to_string().contains("it is 42"),
        "{decisions:?}"
    );
    let read = seen
        .iter()
        .find(|e| e.event == "tool_call_finished")
        .ok_or("no tool_call_finished")?;
    assert_eq!(read.data["event"]["result"]["tool_call_id"], "look");
    assert_eq!(read.data["event"]["result"]["ok"], true, "{:?}", read.data);
    let reply_at = names.iter().rposition(|n| *n == "decision_made");
    let result_at = names.iter().position(|n| *n == "tool_call_finished");
    assert!(
        result_at < reply_at,
        "the reply follows the result: {names:?}"
    );

    // The reply ends the turn: the agent sleeps after its two steps.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let run = service.get(&run_path).await?;
        if run.body["status"] == "sleeping" {
            assert_eq!(run.body["steps"], 2, "{:?}", run.body);
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("the run did not go to sleep: {:?}", run.body).into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Issue 21, item 3: a paused run's inbox fills over HTTP; the next message is
/// 429 with `Retry-After`, naming the run as busy; once the run is resumed (its model has taken what it held) the
/// same message is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_inbox_is_429_with_retry_after_until_the_run_takes_it() -> Result<(), TestError> {
    const CAPACITY: usize = 3;
    let config = app::ServiceConfig {
        limits: app::Limits {
            inbox_capacity: CAPACITY,
            ..app::Limits::default()
        },
        ..app::ServiceConfig::default()
    };
    let service = Service::start_with(None, config).await?;
    let run_id = service.create(listener_task()).await?;
    let run_path = format!("/runs/{run_id}");
    let mut stream = service.events(&run_id).await?;
    interrupt(&service, &mut stream, &run_path, "pause").await?;

    let messages = format!("{}{run_path}/messages", service.base);
    for i in 0..CAPACITY {
        let sent = service
            .post(
                &format!("{run_path}/messages"),
                json!({"text": format!("m{i}")}),
            )
            .await?;
        assert_eq!(sent.status, 202, "message {i}: {:?}", sent.body);
    }
    assert_busy(&service, &messages, &run_id).await?;
    // Control is never refused, full inbox or not.
    let resumed = service
        .post(
            &format!("{run_path}/interrupt"),
            json!({"action": "resume"}),
        )
        .await?;
    assert_eq!(resumed.status, 202, "{:?}", resumed.body);
    post_until_accepted(&service, &run_path, "one too many").await?;
    // Accepted is not yet applied: the run takes it at its next safe point.
    let run = wait_for_inputs(&service, &run_path, 6).await?;
    assert_eq!(
        run["inputs"], 6,
        "pause, three messages, resume, the last message: {run:?}"
    );
    Ok(())
}

/// The next message to a full inbox is 429 with `Retry-After`, naming the run as busy.
async fn assert_busy(service: &Service, messages: &str, run_id: &str) -> Result<(), TestError> {
    let busy = service
        .client
        .client
        .post(messages)
        .header("content-type", "application/json")
        .body(json!({"text": "one too many"}).to_string())
        .send()
        .await?;
    assert_eq!(busy.status().as_u16(), 429);
    let retry_after = busy
        .headers()
        .get("retry-after")
        .ok_or("no Retry-After")?
        .to_str()?
        .parse::<u64>()?;
    assert!(retry_after >= 1, "Retry-After: {retry_after}");
    let body: Value = busy.json().await?;
    let error = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        error.contains(run_id) && error.contains("busy") && error.contains("3"),
        "{body:?}"
    );
    Ok(())
}

/// Posts a message until it is accepted (a resumed run takes what its inbox held at its next decision).
async fn post_until_accepted(
    service: &Service,
    run_path: &str,
    text: &str,
) -> Result<(), TestError> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let sent = service
            .post(&format!("{run_path}/messages"), json!({"text": text}))
            .await?;
        match sent.status {
            202 => return Ok(()),
            429 if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return Err(format!("after resume: {other} {:?}", sent.body).into()),
        }
    }
}

/// The run's body once it has applied `count` inputs, or at the deadline.
async fn wait_for_inputs(
    service: &Service,
    run_path: &str,
    count: u64,
) -> Result<Value, TestError> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let run = service.get(run_path).await?;
        if run.body["inputs"] == count || std::time::Instant::now() >= deadline {
            return Ok(run.body);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
