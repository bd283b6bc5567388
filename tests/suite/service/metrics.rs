//! `GET /metrics` of the real service binary (its own process, its own global
//! subscriber with the metrics layer), scraped over HTTP after runs and read
//! by the strict OpenMetrics parser of `suite::metrics`.

use super::*;
use crate::suite::metrics::exposition::Exposition;

/// The service binary without a store, killed when dropped.
fn start_service() -> Result<ServiceProcess, TestError> {
    let command = std::process::Command::new(crate::suite::service_bin::binary()?);
    let spawned = crate::suite::service_bin::spawn(command, WAIT)?;
    Ok(ServiceProcess {
        child: spawned.child,
        base: format!("http://{}", spawned.addr),
        _tmp: spawned.tmp,
    })
}

/// Polls `GET /runs/{id}` until `done` says so.
async fn wait_for(
    client: &ServiceClient,
    run_id: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, TestError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = client.get(&format!("/runs/{run_id}")).await?;
        if done(&run.body) {
            return Ok(run.body);
        }
        assert!(tokio::time::Instant::now() < deadline, "{:?}", run.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `GET /metrics`: its content type, and its text parsed.
async fn scrape(client: &ServiceClient) -> Result<Exposition, TestError> {
    let request = client.client.get(format!("{}/metrics", client.base));
    let response = ok_of_type(request, agentry::metrics::CONTENT_TYPE).await?;
    Exposition::parse(&response.text().await?)
}

/// A run `done` after a failing read, one out of steps, and an event-driven
/// agent that sleeps until it is told something.
fn three_tasks() -> [Value; 3] {
    [
        json!({
            "goal": "read, then finish",
            "budget": {"max_steps": 4, "deadline": "30s"},
            "tools": {"grant": ["fs.read"]},
            "script": {"turns": [
                {"tool_calls": [{"id": "r", "name": "fs.read", "arguments": {"path": "missing.txt"}}]},
                {"tool_calls": [{"id": "f", "name": "task.finish", "arguments": {"answer": "ok"}}]}
            ]}
        }),
        json!({
            "goal": "never finish",
            "budget": {"max_steps": 1, "deadline": "30s"},
            "tools": {"grant": ["fs.read"]},
            "script": {"turns": [
                {"tool_calls": [{"id": "a", "name": "fs.read", "arguments": {"path": "a.txt"}}]},
                {"tool_calls": [{"id": "b", "name": "fs.read", "arguments": {"path": "b.txt"}}]}
            ]}
        }),
        json!({
            "goal": "wait for messages",
            "budget": {"max_steps": 4, "deadline": "60s"},
            "driver": {"mode": "events"},
            "script": {"turns": [{"final": "never reached"}]}
        }),
    ]
}

/// Three runs over HTTP — one `done` after a failing read, one out of steps,
/// one event-driven agent sleeping until it is aborted — then the service's
/// metrics: runs by stop reason, tool calls by tool and outcome, the sleeping
/// gauge while it slept. `/metrics` is behind the same guard as every route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_serves_its_runs_metrics() -> Result<(), TestError> {
    let process = start_service()?;
    let client = Service::client_of(&process.base)?;
    let [done, stuck, sleeper] = three_tasks();
    let done = client.create(done).await?;
    let stuck = client.create(stuck).await?;
    let sleeper = client.create(sleeper).await?;
    let stopped = |run: &Value| run["status"] == "stopped";
    wait_for(&client, &done, stopped).await?;
    wait_for(&client, &stuck, stopped).await?;
    wait_for(&client, &sleeper, |run| run["status"] == "sleeping").await?;

    let m = scrape(&client).await?;
    assert_eq!(m.value("agentry_runs_sleeping", &[]), Some(1.0));
    assert_eq!(m.value("agentry_runs_live", &[]), Some(1.0));

    let abort = client
        .post(
            &format!("/runs/{sleeper}/interrupt"),
            json!({"action": "abort"}),
        )
        .await?;
    assert_eq!(abort.status, 202, "{:?}", abort.body);
    wait_for(&client, &sleeper, stopped).await?;

    // A run is counted as its span closes, which its actors' copies of the
    // span may hold a moment after its status reads `stopped`.
    let mut m = scrape(&client).await?;
    for _ in 0..100 {
        if m.value("agentry_runs_total", &[("stop_reason", "user_abort")]) == Some(1.0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        m = scrape(&client).await?;
    }
    for reason in ["done", "max_steps", "user_abort"] {
        assert_eq!(
            m.value("agentry_runs_total", &[("stop_reason", reason)]),
            Some(1.0),
            "{reason}"
        );
    }
    let calls = |tool: &str, outcome: &str| {
        m.value(
            "agentry_tool_calls_total",
            &[("tool", tool), ("outcome", outcome)],
        )
    };
    assert_eq!(calls("fs.read", "EINVAL"), Some(2.0));
    assert_eq!(calls("task.finish", "ok"), Some(1.0));
    assert_eq!(m.value("agentry_runs_sleeping", &[]), Some(0.0));
    assert_eq!(m.value("agentry_runs_live", &[]), Some(0.0));
    // Labels are bounded: no run id in any of them.
    for sample in m.samples() {
        for id in [&done, &stuck, &sleeper] {
            assert!(
                !sample.labels.values().any(|v| v == id),
                "{sample:?} names run {id}"
            );
        }
    }

    // A web page elsewhere may not read them (the guard's Origin rule).
    let foreign = client
        .client
        .get(format!("{}/metrics", client.base))
        .header("origin", "http://evil.example")
        .send()
        .await?;
    assert_eq!(foreign.status().as_u16(), 403);
    Ok(())
}

/// An app built without metrics (as an embedder's, whose subscriber has no
/// metrics layer) answers `GET /metrics` 404 in the service's JSON shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_without_metrics_answers_404() -> Result<(), TestError> {
    let service = Service::start().await?;
    let reply = service.get("/metrics").await?;
    assert_eq!(reply.status, 404, "{:?}", reply.body);
    assert_eq!(
        reply.body["error"]["message"],
        "metrics are not collected by this service"
    );
    Ok(())
}
