//! The embedding API: messages and custom events, pause/resume, event-driven
//! agents, approvals, timers and ticks.

use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::{EventRecord, RunEvent};
use agentry::protocol::state::{RunSnapshot, SessionEntry};
use agentry::protocol::trace::RunInput;
use agentry::{Decision, Driver, Effect, ErrorCode, RunStatus, Runtime, StopReason, ToolCall};
use agentry_test_support::{
    CountingTool, FnPolicy, GateTool, ScriptBuilder, SleepTool, TestError, TestTask, call,
    collect_until_stopped, runtime_with, tool_results,
};
use serde_json::{Value, json};

fn finish(step: u64, answer: &str) -> Decision {
    Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("finish-{step}"),
            "task.finish",
            json!({"answer": answer}),
        )],
    }
}

/// The run's snapshot once `ready` holds for it (polled; an error if it does not
/// within 5 s or the run ends first).
async fn snapshot_until(
    handle: &agentry::RunHandle,
    ready: impl Fn(&RunSnapshot) -> bool,
) -> Result<RunSnapshot, TestError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let snap = handle.snapshot().await.ok_or("no snapshot")?;
        if ready(&snap) {
            return Ok(snap);
        }
        if let Some(outcome) = handle.outcome() {
            return Err(format!("the run ended first: {}", outcome.detail).into());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("the run never got there: {snap:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Every event up to and including the first for which `last` holds.
async fn events_until(
    events: &mut tokio::sync::broadcast::Receiver<EventRecord>,
    mut last: impl FnMut(&EventRecord) -> bool,
) -> Result<Vec<EventRecord>, TestError> {
    let mut seen = Vec::new();
    loop {
        let record = tokio::time::timeout(Duration::from_secs(5), events.recv()).await??;
        let done = last(&record);
        seen.push(record);
        if done {
            return Ok(seen);
        }
    }
}

/// An event-driven agent that replies to every input and finishes on "stop".
fn replier() -> FnPolicy {
    FnPolicy::new(|ctx| match ctx.session.last() {
        Some(SessionEntry::User { text }) if text == "stop" => finish(ctx.step, "stopped"),
        _ => Decision::Final {
            answer: "ok".into(),
        },
    })
}

/// 20 writers, each sending 50 inputs (messages and custom events alternating)
/// at once.
async fn send_concurrently(handle: &agentry::RunHandle) -> Result<(), TestError> {
    let mut senders = Vec::new();
    for t in 0..20 {
        let h = handle.clone();
        senders.push(tokio::spawn(async move {
            for i in 0..50 {
                let sent = if i % 2 == 0 {
                    h.send_message(format!("m-{t}-{i}"))
                } else {
                    h.inject("webhook", json!({"t": t, "i": i}))
                };
                sent.map_err(|e| e.to_string())?;
            }
            Ok::<(), String>(())
        }));
    }
    for s in senders {
        s.await??;
    }
    Ok(())
}

/// Step and input lines are in state order, and each writer's inputs in the
/// order it sent them.
fn check_order(trace: &[Value]) {
    // Step and input lines are written in the order the state keeper applied
    // them (the state keeper queues step lines, the conductor input lines).
    let ordered: Vec<&Value> = trace
        .iter()
        .filter(|l| l["kind"] == "step" || l["kind"] == "input")
        .collect();
    let version = |l: &Value| l["state_version"].as_u64().unwrap_or(0);
    if let Some(i) = ordered
        .windows(2)
        .position(|w| version(w[0]) >= version(w[1]))
    {
        let around: Vec<String> = ordered[i.saturating_sub(3)..(i + 4).min(ordered.len())]
            .iter()
            .map(|l| format!("{} v{} seq {}", l["kind"], l["state_version"], l["seq"]))
            .collect();
        panic!("trace lines out of state order at line {i}: {around:#?}");
    }
    assert!(trace.iter().filter(|l| l["kind"] == "step").count() > 1);
    // Each writer's inputs stay in the order it sent them.
    for t in 0..20 {
        let mine: Vec<u64> = trace
            .iter()
            .filter(|l| l["kind"] == "input")
            .filter_map(|l| {
                let input = &l["input"];
                let i = match input["type"].as_str() {
                    Some("message") => input["text"]
                        .as_str()?
                        .strip_prefix(&format!("m-{t}-"))?
                        .parse()
                        .ok()?,
                    Some("event") if input["payload"]["t"] == t => {
                        input["payload"]["i"].as_u64()?
                    }
                    _ => return None,
                };
                Some(i)
            })
            .collect();
        assert_eq!(mine, (0..50).collect::<Vec<u64>>(), "writer {t}");
    }
}

/// 1,000 messages and custom events from many tasks: each applied exactly once, in
/// one total order, none lost — counted in the final state and in the trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_inputs_are_applied_once_in_one_order() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("reply to everything", &[])?.trace();
    let mut config = task.config();
    config.driver = Driver::Events;
    config.limits.max_steps = Some(10_000);
    config.progress_window = 0;
    let handle = runtime.start(config, replier()).await?;

    send_concurrently(&handle).await?;
    // On a loaded machine all 1,000 inputs may land before the first step; wait
    // for a step so that "stop" is answered by another, and step lines are
    // interleaved with input lines in the trace whatever the timing.
    snapshot_until(&handle, |s| s.control.spent.steps >= 1).await?;
    handle.send_message("stop")?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(
        outcome.state.inputs, 1_001,
        "every input applied exactly once"
    );
    let trace = task.read_trace()?;
    let seqs: Vec<u64> = trace
        .iter()
        .filter(|l| l["kind"] == "input")
        .filter_map(|l| l["seq"].as_u64())
        .collect();
    assert_eq!(
        seqs,
        (1..=1_001).collect::<Vec<_>>(),
        "one total order, no gaps, no repeats"
    );
    check_order(&trace);
    Ok(())
}

/// A user message sent while a step runs is in the session before the next decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_enters_the_session_before_the_next_decision() -> Result<(), TestError> {
    let (gate, mut gate_calls) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    let task = TestTask::new("wait for the user", &[])?.grant(&["gate"]);
    let policy = FnPolicy::new(|ctx| match ctx.session.last() {
        Some(SessionEntry::User { text }) if text == "go ahead" => finish(ctx.step, "heard you"),
        _ => Decision::ToolCalls {
            calls: vec![call("g1", "gate", json!({}))],
        },
    });

    let handle = runtime.start(task.config(), policy).await?;
    let held = gate_calls.next_call(Duration::from_secs(5)).await?;
    handle.send_message("go ahead")?;
    held.release(json!("released"));
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2, "the very next decision saw the message");
    assert_eq!(outcome.answer.as_deref(), Some("heard you"));
    Ok(())
}

/// Pause takes effect at the next safe point; resume carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_stops_at_the_next_safe_point_and_resume_continues() -> Result<(), TestError> {
    let (gate, mut gate_calls) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    let task = TestTask::new("pause me", &[])?.grant(&["gate"]);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({}))
        .finish("done")
        .policy();

    let handle = runtime.start(task.config(), policy).await?;
    let mut events = handle.subscribe();
    let held = gate_calls.next_call(Duration::from_secs(5)).await?;
    handle.pause()?;
    held.release(json!("ok"));
    // The step in progress finishes; no new step starts.
    snapshot_until(&handle, |s| s.status == RunStatus::Paused).await?;
    // A message sent now is handled after anything the run had queued for
    // itself (its next step included): once it is applied, a paused run that
    // stepped would have shown it.
    handle.send_message("while paused")?;
    let seen = events_until(&mut events, |e| {
        matches!(&e.event, RunEvent::InputApplied { input: RunInput::Message { text }, .. } if text == "while paused")
    })
    .await?;
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e.event, RunEvent::StepStarted { step } if step > 1)),
        "a paused run does not step: {seen:?}"
    );
    let snap = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(
        (snap.status, snap.control.spent.steps),
        (RunStatus::Paused, 1)
    );
    handle.resume()?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2);
    Ok(())
}

/// The deadline applies while paused: a run that would finish at its next
/// step, paused after its first, stops at the deadline without stepping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_stops_a_paused_run() -> Result<(), TestError> {
    let (gate, mut gate_calls) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(gate)])?;
    // Long enough to pause first even on a loaded machine (~10 ms here).
    let task = TestTask::new("pause me", &[])?
        .grant(&["gate"])
        .deadline_ms(1_000);
    let policy = ScriptBuilder::new()
        .call("g1", "gate", json!({}))
        .finish("done")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    let held = gate_calls.next_call(Duration::from_secs(5)).await?;
    handle.pause()?;
    held.release(json!("ok"));
    snapshot_until(&handle, |s| s.status == RunStatus::Paused).await?;
    let outcome = tokio::time::timeout(Duration::from_secs(5), handle.wait()).await??;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 1, "a paused run does not step");
    Ok(())
}

/// An event-driven agent sleeps on its mailbox and wakes only on events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_driven_agent_sleeps_until_an_event() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("react to webhooks", &[])?;
    let mut config = task.config();
    config.driver = Driver::Events;
    let policy = FnPolicy::new(|ctx| match ctx.session.last() {
        Some(SessionEntry::Event { name, payload })
            if name == "webhook" && payload["last"] == true =>
        {
            finish(ctx.step, "handled")
        }
        _ => Decision::Final {
            answer: "noted".into(),
        },
    });
    let handle = runtime.start(config, policy).await?;

    let snap = snapshot_until(&handle, |s| s.status == RunStatus::Sleeping).await?;
    assert_eq!(snap.control.spent.steps, 0, "no event, no step");
    handle.inject("webhook", json!({"last": false}))?;
    handle.after(Duration::from_millis(30), "webhook", json!({"last": true}));
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2, "one step per event");
    assert_eq!(outcome.answer.as_deref(), Some("handled"));
    Ok(())
}

/// The same reply to each new message is an answer, not a loop: with the
/// default progress window (3), five messages answered "ok" one by one leave
/// the agent asleep, not stopped as `no_progress`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_reply_to_new_messages_is_not_no_progress() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("reply to everything", &[])?;
    let mut config = task.config();
    config.driver = Driver::Events;
    assert_eq!(config.progress_window, 3, "the default window");
    let handle = runtime.start(config, replier()).await?;
    for n in 1..=5u64 {
        handle.send_message(format!("message {n}"))?;
        snapshot_until(&handle, |s| {
            s.control.spent.steps >= n && s.status == RunStatus::Sleeping
        })
        .await?;
    }
    handle.send_message("stop")?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 6);
    Ok(())
}

fn pay_task(timeout: Option<Duration>) -> Result<(TestTask, agentry::RunConfig), TestError> {
    let task = TestTask::new("pay the invoice", &[])?.grant(&["pay"]);
    let mut config = task.config();
    config.approval.timeout = timeout;
    Ok((task, config))
}

fn pay_policy() -> agentry::ScriptedPolicy {
    ScriptBuilder::new()
        .call("p1", "pay", json!({"value": 42}))
        .finish("paid")
        .policy()
}

/// An irreversible tool waits for a human; `approve` runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs() -> Result<(), TestError> {
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let count = pay.counter();
    let runtime = runtime_with(vec![Arc::new(pay)])?;
    let (_task, config) = pay_task(None)?;
    let handle = runtime.start(config, pay_policy()).await?;
    let events = handle.subscribe();

    let pending = wait_for_pending(&handle).await?;
    assert_eq!(pending, "p1");
    assert_eq!(count.get(), 0, "nothing runs before the decision");
    let snap = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(snap.status, RunStatus::AwaitingApproval);
    handle.approve("p1").await?;
    let events = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(count.get(), 1);
    assert!(tool_results(&events)[0].1.ok);
    let names: Vec<String> = events
        .iter()
        .map(|e| agentry_test_support::event_name(&e.event))
        .collect();
    assert!(names.iter().any(|n| n == "awaiting_approval"), "{names:?}");
    let err = handle
        .approve("p1")
        .await
        .err()
        .ok_or("a second approval must fail")?;
    assert!(
        err.to_string().contains("p1") || err.to_string().contains("stopped"),
        "{err}"
    );
    Ok(())
}

/// `deny` feeds EPERM back to the policy; nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_is_eperm_and_never_runs() -> Result<(), TestError> {
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let count = pay.counter();
    let runtime = runtime_with(vec![Arc::new(pay)])?;
    let (_task, config) = pay_task(None)?;
    let handle = runtime.start(config, pay_policy()).await?;
    let events = handle.subscribe();

    wait_for_pending(&handle).await?;
    handle.deny("p1", Some("over the limit".into())).await?;
    let events = collect_until_stopped(events).await?;
    handle.wait().await?;

    assert_eq!(count.get(), 0);
    let result = &tool_results(&events)[0].1;
    assert_eq!(result.error_code(), Some(ErrorCode::Eperm));
    let message = result
        .error
        .as_ref()
        .map(|e| e.message.clone())
        .unwrap_or_default();
    assert!(message.contains("over the limit"), "{message}");
    Ok(())
}

/// No decision within the approval timeout: EPERM, nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_approval_times_out() -> Result<(), TestError> {
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let count = pay.counter();
    let runtime = runtime_with(vec![Arc::new(pay)])?;
    let (_task, config) = pay_task(Some(Duration::from_millis(100)))?;
    let handle = runtime.start(config, pay_policy()).await?;
    let events = handle.subscribe();
    let events = collect_until_stopped(events).await?;
    handle.wait().await?;

    assert_eq!(count.get(), 0);
    let result = &tool_results(&events)[0].1;
    assert_eq!(result.error_code(), Some(ErrorCode::Eperm));
    assert!(handle.pending_approvals().await.is_empty());
    Ok(())
}

/// While parked, the wall clock keeps running: the deadline still stops the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_applies_while_awaiting_approval() -> Result<(), TestError> {
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let runtime = runtime_with(vec![Arc::new(pay)])?;
    let task = TestTask::new("pay", &[])?.grant(&["pay"]).deadline_ms(200);
    let handle = runtime.start(task.config(), pay_policy()).await?;
    let outcome = tokio::time::timeout(Duration::from_secs(5), handle.wait()).await??;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    Ok(())
}

async fn wait_for_pending(handle: &agentry::RunHandle) -> Result<String, TestError> {
    for _ in 0..400 {
        if let Some(p) = handle.pending_approvals().await.first() {
            return Ok(p.call.id.clone());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Err("no call became pending".into())
}

/// A tick handler slower than the period: overlapping ticks are skipped and
/// counted, never stacked; the tick budget stops the agent.
#[tokio::test(start_paused = true)]
async fn slow_ticks_skip_overlaps_and_the_tick_budget_stops_the_agent() -> Result<(), TestError> {
    let sleep = SleepTool::new("check").effect(Effect::ReadOnly);
    let concurrency = sleep.max_in_flight();
    let runtime = runtime_with(vec![Arc::new(sleep)])?;
    let task = TestTask::new("monitor", &[])?.grant(&["check"]);
    let mut config = task.config();
    config.tick_every = Some(Duration::from_millis(20));
    config.limits.max_ticks = Some(4);
    config.progress_window = 0;
    // Each tick runs a 50 ms check: two or three ticks pass meanwhile.
    let policy = FnPolicy::new(|ctx| Decision::ToolCalls {
        calls: vec![call(
            &format!("c{}", ctx.step),
            "check",
            json!({"ms": 50, "tag": ctx.step}),
        )],
    });

    let handle = runtime.start(config, policy).await?;
    let outcome = handle.wait().await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::MaxTicks,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.budget.spent.ticks, 4);
    assert_eq!(outcome.steps, 4, "each tick woke exactly one decision");
    assert!(
        outcome.state.ticks_skipped >= 4,
        "skipped {}",
        outcome.state.ticks_skipped
    );
    assert_eq!(concurrency.get(), 1, "ticks never stacked");
    let ticks = outcome.state.inputs;
    assert_eq!(ticks, 4);
    let _ = RunInput::Pause;
    Ok(())
}

/// A pull-driven run whose steps take microseconds takes several steps per
/// conductor message (no self-addressed `Step` per step), yet an input sent while
/// a step runs still applies at the very next safe point: the next decision sees
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_during_fast_steps_is_seen_by_the_next_decision() -> Result<(), TestError> {
    let count = CountingTool::new("count");
    let runtime = runtime_with(vec![Arc::new(count)])?;
    let task = TestTask::new("spin", &[])?.grant(&["count"]).max_steps(500);
    // At step 20 the model tells the test, then waits until the message is sent.
    let (at_20_tx, at_20_rx) = tokio::sync::oneshot::channel::<()>();
    let (sent_tx, sent_rx) = tokio::sync::oneshot::channel::<()>();
    let mut at_20 = Some(at_20_tx);
    let mut sent = Some(sent_rx);
    let policy = FnPolicy::from_async(move |ctx| {
        let step = ctx.step;
        let heard = ctx
            .session
            .iter()
            .any(|e| matches!(e, SessionEntry::User { text } if text == "stop"));
        let wait = if step == 20 {
            if let Some(tx) = at_20.take() {
                let _ = tx.send(());
            }
            sent.take()
        } else {
            None
        };
        Box::pin(async move {
            if let Some(rx) = wait {
                let _ = rx.await;
            }
            if heard {
                Decision::Final {
                    answer: format!("heard at {step}"),
                }
            } else {
                Decision::ToolCalls {
                    calls: vec![call(&format!("c{step}"), "count", json!({"value": step}))],
                }
            }
        })
    });

    let handle = runtime.start(task.config(), policy).await?;
    at_20_rx.await?;
    handle.send_message("stop")?;
    let _ = sent_tx.send(());
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("heard at 21"));
    Ok(())
}
