//! Redirecting a run over HTTP: `{"action": "redirect", "message"}` cuts the
//! step in progress (its process tool killed) and the run goes on with the
//! message.

use std::time::Instant;

use agentry::tools::proc::reap_orphans_here;
use agentry_test_support::procs::{alive_with_cmdline, unique_secs};

use super::*;

/// A run whose first call holds a process tree for `secs` seconds, then finishes.
fn sleeper_task(secs: &str) -> Value {
    json!({
        "goal": "wait, unless told otherwise",
        "budget": {"max_steps": 5, "deadline": "60s"},
        "tools": {"grant": ["proc.run"]},
        "script": {"turns": [
            {"tool_calls": [{"id": "nap", "name": "proc.run",
                "arguments": {"argv": ["sh", "-c", format!("sleep {secs} & sleep {secs}")]}}]},
            finish("finish", "redirected"),
        ]}
    })
}

/// Polls until a `sleep secs` process is alive (true) or none is (false).
async fn wait_for_sleepers(secs: &str, alive: bool) -> Result<(), TestError> {
    let deadline = Instant::now() + WAIT;
    while alive_with_cmdline(&["sleep", secs]).is_empty() == alive {
        if Instant::now() > deadline {
            return Err(format!("sleep {secs}: still not alive={alive} after {WAIT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Issue 20: a redirect while a process tool sleeps for 30 s is accepted (202);
/// the call ends `ECANCELED` with its processes killed; the step says it was interrupted; the message enters as the
/// interrupt's input; and the run goes on to `done`, long before the sleep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_cuts_the_running_tool_and_the_run_goes_on() -> Result<(), TestError> {
    reap_orphans_here()?;
    let secs = unique_secs(30);
    let service = Service::start().await?;
    let run_id = service.create(sleeper_task(&secs)).await?;
    let run_path = format!("/runs/{run_id}");
    let mut stream = service.events(&run_id).await?;
    stream.until("tool_call_started").await?;
    wait_for_sleepers(&secs, true).await?;

    let started = Instant::now();
    let sent = service
        .post(
            &format!("{run_path}/interrupt"),
            json!({"action": "redirect", "message": "stop waiting and finish"}),
        )
        .await?;
    assert_eq!(sent.status, 202, "{:?}", sent.body);
    let rest = stream.rest().await?;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the run waited for the sleep: {:?}",
        started.elapsed()
    );
    wait_for_sleepers(&secs, false).await?;

    let nap = rest
        .iter()
        .find(|e| e.event == "tool_call_finished")
        .ok_or("no tool_call_finished")?;
    let error = &nap.data["event"]["result"]["error"];
    assert_eq!(nap.data["event"]["result"]["tool_call_id"], "nap");
    // Cancelled by the interrupt: the step's `step_interrupted` names it below
    // (the error's wording is the runtime's, tested there).
    assert_eq!(error["code"], "ECANCELED", "{error}");
    let cut = rest
        .iter()
        .find(|e| e.event == "step_interrupted")
        .ok_or_else(|| format!("no step_interrupted: {:?}", names(&rest)))?;
    assert_eq!(cut.data["event"]["step"], 1);
    assert_eq!(cut.data["event"]["interrupted"]["calls"], json!(["nap"]));
    let input = rest
        .iter()
        .find(|e| e.event == "input_applied")
        .ok_or("no input_applied")?;
    assert_eq!(
        input.data["event"]["input"],
        json!({"type": "interrupt", "text": "stop waiting and finish"})
    );
    assert!(cut.id < input.id, "{:?}", names(&rest));
    let stopped = rest.last().ok_or("no events")?;
    assert_eq!(stopped.event, "run_stopped");
    assert_eq!(
        stopped.data["event"]["stop_reason"],
        "done",
        "{:?}",
        names(&rest)
    );

    let run = service.get(&run_path).await?;
    assert_eq!(run.body["inputs"], 1, "{:?}", run.body);
    assert_eq!(
        run.body["outcome"]["answer"], "redirected",
        "{:?}",
        run.body
    );
    Ok(())
}

/// A redirect says something: no message, an empty one or a non-string is
/// 400 naming `message`; a message on another action is 400 too, and an
/// unknown action's error names all four. None of it reaches the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_without_a_message_is_refused() -> Result<(), TestError> {
    let service = Service::start().await?;
    let run_id = service.create(listener_task()).await?;
    let path = format!("/runs/{run_id}/interrupt");
    for (body, want) in [
        (json!({"action": "redirect"}), "message: missing"),
        (
            json!({"action": "redirect", "message": ""}),
            "message: expected a non-empty string",
        ),
        (
            json!({"action": "redirect", "message": 7}),
            "message: expected a non-empty string",
        ),
        (
            json!({"action": "pause", "message": "hi"}),
            "message: only the \"redirect\" action takes a message",
        ),
        (
            json!({"action": "redirect", "message": "hi", "text": "hi"}),
            "unknown field \"text\"",
        ),
        (
            json!({"action": "stop", "message": "hi"}),
            r#"action: expected "pause", "resume", "abort" or "redirect", found "stop""#,
        ),
        (
            json!({"action": "stop"}),
            r#"action: expected "pause", "resume", "abort" or "redirect", found "stop""#,
        ),
    ] {
        let refused = service.post(&path, body.clone()).await?;
        assert_eq!(refused.status, 400, "{body}: {:?}", refused.body);
        let error = refused.body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(error.contains(want), "{body}: {error}");
    }
    let run = service.get(&format!("/runs/{run_id}")).await?;
    assert_eq!(run.body["inputs"], 0, "{:?}", run.body);
    assert_eq!(run.body["steps"], 0, "{:?}", run.body);
    Ok(())
}
