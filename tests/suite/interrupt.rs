//! User interrupts (`RunHandle::interrupt`): the step in progress is cut — a
//! running process tree killed, calls not started never started, an approval
//! request withdrawn, an irreversible call in flight parked for a human — and
//! the run goes on with the user's message.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentry::protocol::event::RunEvent;
use agentry::protocol::state::{SessionEntry, Settlement};
use agentry::protocol::trace::StepInterrupt;
use agentry::tools::proc::reap_orphans_here;
use agentry::{Driver, Effect, ErrorCode, ResultEnvelope, RunStatus, Runtime, StopReason};
use agentry_test_support::procs::unique_secs;
use agentry_test_support::{
    CountingTool, FnPolicy, HangingTool, Recording, ScriptBuilder, TestError, TestTask,
    collect_until_stopped, next_event, read_trace, runtime_with, tool_results,
};
use serde_json::{Value, json};

const REDIRECT: &str = "stop the build; use the cached artifacts instead";

/// Alive members of process group `pgid`.
fn group_alive(pgid: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2].parse::<i32>().ok() == Some(pgid) && fields[0] != "Z" {
            found.push(pid);
        }
    }
    found
}

async fn read_pgid(workdir: &Path) -> Result<i32, TestError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(workdir.join("pgid"))
            && let Ok(pid) = text.trim().parse()
        {
            return Ok(pid);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the command never wrote its pgid".into())
}

/// A `step_interrupted` event's step and what it cut.
fn step_interrupted(e: &RunEvent) -> Option<(u64, StepInterrupt)> {
    let RunEvent::StepInterrupted { step, interrupted } = e else {
        return None;
    };
    Some((*step, interrupted.clone()))
}

fn interrupted_error(result: &ResultEnvelope) -> Result<&agentry::ToolError, TestError> {
    let error = result.error.as_ref().ok_or("the call did not fail")?;
    assert_eq!(error.code, ErrorCode::Ecanceled, "{error:?}");
    assert!(!error.retryable, "an interrupted call is not retryable");
    assert!(
        error.message.contains("interrupted by the user"),
        "{error:?}"
    );
    Ok(error)
}

/// The trace's step and input lines.
fn trace_lines(task: &TestTask) -> Result<(Vec<Value>, Vec<Value>), TestError> {
    let lines = read_trace(&task.trace_path())?;
    let steps = lines
        .iter()
        .filter(|l| l.get("step").is_some() && l.get("decision").is_some())
        .cloned()
        .collect();
    let inputs = lines
        .iter()
        .filter(|l| l.get("input").is_some())
        .cloned()
        .collect();
    Ok((steps, inputs))
}

/// A 30 s process tree interrupted at 0.5 s: the step ends at once, the whole
/// group is gone, the next decision sees the cancelled call's result and then
/// the user's message, and the run finishes `done`. The interrupted step is a
/// step (spent), and the trace says what was cut and carries the message with
/// its sequence number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_kills_the_running_process_tree_and_the_run_goes_on() -> Result<(), TestError>
{
    reap_orphans_here()?;
    let secs = unique_secs(30);
    let build = format!("echo $$ > pgid; sleep {secs} & sleep {secs} & wait");
    let task = TestTask::new("build it", &[])?.grant(&["proc.run"]).trace();
    let (policy, seen) = Recording::new(
        ScriptBuilder::new()
            .call("b1", "proc.run", json!({"argv": ["sh", "-c", build]}))
            .finish("used the cache")
            .policy(),
    );
    let started = Instant::now();
    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let mut events = handle.subscribe();
    let pgid = read_pgid(task.workdir()).await?;
    tokio::time::sleep(Duration::from_millis(500).saturating_sub(started.elapsed())).await;

    let sent = Instant::now();
    handle.interrupt(REDIRECT)?;
    let cut = next_event(&mut events, Duration::from_secs(10), step_interrupted).await?;
    let took = sent.elapsed();
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await??;

    println!("interrupt to step_interrupted: {took:?}");
    // Far below the 30 s the tool would take (the figure is 100 ms;
    // the bound here leaves room for a loaded machine).
    assert!(
        took < Duration::from_secs(2),
        "the step took {took:?} to end"
    );
    assert_eq!(
        cut,
        (
            1,
            StepInterrupt {
                decision: false,
                calls: vec!["b1".into()],
                unsettled: vec![],
            }
        )
    );
    assert!(group_alive(pgid).is_empty(), "{:?}", group_alive(pgid));
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2, "the interrupted step counts");
    assert_eq!(outcome.state.control.spent.steps, 2);

    let next = seen.step(2).ok_or("no second decision")?;
    let tail: Vec<&SessionEntry> = next.session.iter().rev().take(2).rev().collect();
    let SessionEntry::Tool { result } = tail[0] else {
        return Err(format!("expected the call's result, then the message: {tail:?}").into());
    };
    assert_eq!(result.tool_call_id, "b1");
    let error = interrupted_error(result)?;
    assert!(error.suggested_action.is_some(), "{error:?}");
    assert_eq!(
        tail[1],
        &SessionEntry::User {
            text: REDIRECT.into()
        }
    );

    let (steps, inputs) = trace_lines(&task)?;
    assert_eq!(steps[0]["interrupted"], json!({"calls": ["b1"]}));
    assert!(steps[1].get("interrupted").is_none());
    assert_eq!(inputs.len(), 1, "{inputs:?}");
    assert_eq!(
        inputs[0]["input"],
        json!({"type": "interrupt", "text": REDIRECT})
    );
    assert_eq!(inputs[0]["seq"], 1);
    Ok(())
}

/// Calls of the cut step that had not started never start; one that finished
/// before the interrupt keeps its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_not_started_never_start_and_finished_ones_keep_their_results()
-> Result<(), TestError> {
    // Not read-only: each runs alone, in order, after the read.
    let hang = HangingTool::new("hang").effect(Effect::Reversible);
    let hanging = hang.clone();
    let later = CountingTool::new("later").effect(Effect::Reversible);
    let count = later.counter();
    let runtime = runtime_with(vec![Arc::new(hang), Arc::new(later)])?;
    let task = TestTask::new("three things", &[])?.grant(&["hang", "later", "fs.read"]);
    task.write_file("a.txt", "kept")?;
    let policy = ScriptBuilder::new()
        .call("r1", "fs.read", json!({"path": "a.txt"}))
        .and_call("h1", "hang", json!({"value": 1}))
        .and_call("l1", "later", json!({"value": 2}))
        .finish("ok")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    let events = handle.subscribe();
    hanging.wait_started(1, Duration::from_secs(10)).await?;
    handle.interrupt("never mind")?;
    let events = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(count.get(), 0, "a call not started never starts");
    let results = tool_results(&events);
    assert!(
        results[0].1.ok,
        "the finished read keeps its result: {:?}",
        results[0].1
    );
    assert_eq!(results[0].1.tool_call_id, "r1");
    interrupted_error(&results[1].1)?;
    interrupted_error(&results[2].1)?;
    let cut = events.iter().find_map(|e| {
        if let RunEvent::StepInterrupted { interrupted, .. } = &e.event {
            Some(interrupted.calls.clone())
        } else {
            None
        }
    });
    assert_eq!(cut, Some(vec!["h1".to_string(), "l1".to_string()]));
    Ok(())
}

/// A call waiting for approval is withdrawn: it never runs, the model is told
/// why, nothing stays pending, and the run goes on with the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_withdraws_a_pending_approval() -> Result<(), TestError> {
    let pay = CountingTool::new("pay").effect(Effect::IrreversibleExternal);
    let count = pay.counter();
    let runtime = runtime_with(vec![Arc::new(pay)])?;
    let task = TestTask::new("pay the invoice", &[])?.grant(&["pay"]);
    let (policy, seen) = Recording::new(
        ScriptBuilder::new()
            .call("p1", "pay", json!({"value": 42}))
            .finish("not paid")
            .policy(),
    );
    let handle = runtime.start(task.config(), policy).await?;
    let events = handle.subscribe();
    let deadline = Instant::now() + Duration::from_secs(10);
    while handle.pending_approvals().await.is_empty() {
        assert!(Instant::now() < deadline, "the call never became pending");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.interrupt("do not pay it, it is a duplicate")?;
    let events = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(count.get(), 0, "a withdrawn call never runs");
    assert!(outcome.state.pending_approvals.is_empty());
    let result = &tool_results(&events)[0].1;
    let error = interrupted_error(result)?;
    assert!(error.message.contains("withdrawn"), "{error:?}");
    let next = seen.step(2).ok_or("no second decision")?;
    assert_eq!(
        next.session.last(),
        Some(&SessionEntry::User {
            text: "do not pay it, it is a duplicate".into()
        })
    );
    Ok(())
}

/// An irreversible call already running when the interrupt comes has an
/// unknown outcome: the run parks `awaiting_decision` for a human (as after a
/// crash) instead of guessing; the human's settlement ends the step and the
/// message follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_irreversible_call_waits_for_a_human() -> Result<(), TestError> {
    let wire = HangingTool::new("wire").effect(Effect::IrreversibleExternal);
    let wiring = wire.clone();
    let runtime = runtime_with(vec![Arc::new(wire)])?;
    let task = TestTask::new("send the money", &[])?
        .grant(&["wire"])
        .trace();
    let mut config = task.config();
    config.approval.pre_approved = agentry::Grants::new(["wire"]);
    let policy = ScriptBuilder::new()
        .call("w1", "wire", json!({"value": 100}))
        .finish("checked with the bank")
        .policy();
    let handle = runtime.start(config, policy).await?;
    let mut events = handle.subscribe();
    wiring.wait_started(1, Duration::from_secs(10)).await?;
    handle.interrupt("stop, wrong account")?;

    next_event(&mut events, Duration::from_secs(10), |e| {
        matches!(e, RunEvent::AwaitingDecision { .. }).then_some(())
    })
    .await?;
    let snap = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(snap.status, RunStatus::AwaitingDecision);
    let pending = handle.pending_decisions().await;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call.id, "w1");
    assert!(handle.outcome().is_none(), "the run waits for the human");
    handle.settle("w1", Settlement::Skip).await?;
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await??;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let (steps, inputs) = trace_lines(&task)?;
    assert_eq!(steps[0]["interrupted"], json!({"unsettled": ["w1"]}));
    let result = &steps[0]["results"][0];
    assert_eq!(result["error"]["code"], "ECANCELED");
    assert!(
        result["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("a human chose to skip it")),
        "{result}"
    );
    // The settlement, then the interrupt's message, in one order.
    let kinds: Vec<&str> = inputs
        .iter()
        .filter_map(|l| l["input"]["type"].as_str())
        .collect();
    assert_eq!(kinds, ["settlement", "interrupt"]);
    assert!(inputs[0]["seq"].as_u64() < inputs[1]["seq"].as_u64());
    Ok(())
}

/// Interrupting a sleeping event-driven agent is sending it the message: it
/// wakes and sees it; no step is cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupting_a_sleeping_agent_is_sending_it_the_message() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let mut config = task.config();
    config.driver = Driver::Events;
    let policy = FnPolicy::new(|ctx| match ctx.session.last() {
        Some(SessionEntry::User { text }) if text == "wake up and stop" => {
            agentry::Decision::ToolCalls {
                calls: vec![agentry::ToolCall::new(
                    "f1",
                    "task.finish",
                    json!({"answer": "stopped"}),
                )],
            }
        }
        _ => agentry::Decision::Final {
            answer: "waiting".into(),
        },
    });
    let handle = Runtime::with_builtins()?.start(config, policy).await?;
    let events = handle.subscribe();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snap = handle.snapshot().await.ok_or("no snapshot")?;
        if snap.status == RunStatus::Sleeping {
            break;
        }
        assert!(Instant::now() < deadline, "never slept: {snap:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    handle.interrupt("wake up and stop")?;
    let events = collect_until_stopped(events).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("stopped"));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, RunEvent::StepInterrupted { .. })),
        "nothing was running to cut"
    );
    Ok(())
}

/// `interrupt_and_pause`: the cut step ends, the run waits paused until the
/// user has said something and resumes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_and_pause_holds_the_run_until_resume() -> Result<(), TestError> {
    let hang = HangingTool::new("hang").effect(Effect::ReadOnly);
    let hanging = hang.clone();
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let task = TestTask::new("wait", &[])?.grant(&["hang"]).trace();
    let (policy, seen) = Recording::new(
        ScriptBuilder::new()
            .call("h1", "hang", json!({"value": 1}))
            .finish("ok")
            .policy(),
    );
    let handle = runtime.start(task.config(), policy).await?;
    hanging.wait_started(1, Duration::from_secs(10)).await?;
    handle.interrupt_and_pause()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let snap = handle.snapshot().await.ok_or("no snapshot")?;
        if snap.status == RunStatus::Paused && snap.control.spent.steps == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "never paused: {snap:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(seen.len(), 1, "no decision while paused");
    handle.send_message("carry on without it")?;
    handle.resume()?;
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await??;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let next = seen.step(2).ok_or("no second decision")?;
    assert_eq!(
        next.session.last(),
        Some(&SessionEntry::User {
            text: "carry on without it".into()
        })
    );
    let (_, inputs) = trace_lines(&task)?;
    let kinds: Vec<&str> = inputs
        .iter()
        .filter_map(|l| l["input"]["type"].as_str())
        .collect();
    assert_eq!(kinds, ["interrupt", "message", "resume"]);
    Ok(())
}

/// An interrupt that comes between steps cuts nothing: the message is applied
/// before the next decision and the run goes on (many times over, racing the
/// steps). Each is applied exactly once, in the order sent: the inputs
/// applied are exactly n0..n19 with distinct, rising sequence numbers, and
/// the session the last decision saw holds each once, in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupts_racing_fast_steps_are_each_applied_once() -> Result<(), TestError> {
    let sent: Vec<String> = (0..20).map(|i| format!("n{i}")).collect();
    let task = TestTask::new("count", &[])?
        .max_steps(10_000)
        .grant(&["fs.write"]);
    let last_seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&last_seen);
    let policy = FnPolicy::new(move |ctx| {
        let heard: Vec<String> = ctx
            .session
            .iter()
            .filter_map(|e| {
                if let SessionEntry::User { text } = e
                    && text.starts_with('n')
                {
                    Some(text.clone())
                } else {
                    None
                }
            })
            .collect();
        let done = heard.last().is_some_and(|t| t == "n19");
        *seen.lock().unwrap_or_else(|e| e.into_inner()) = heard;
        if done {
            agentry::Decision::Final {
                answer: "heard all".into(),
            }
        } else {
            agentry::Decision::ToolCalls {
                // Each step writes something new: not a loop without progress.
                calls: vec![agentry::ToolCall::new(
                    format!("c{}", ctx.step),
                    "fs.write",
                    json!({"path": "n.txt", "content": ctx.step.to_string()}),
                )],
            }
        }
    });
    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let events = tokio::spawn(collect_until_stopped(handle.subscribe()));
    for text in &sent {
        handle.interrupt(text.clone())?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let outcome = tokio::time::timeout(Duration::from_secs(20), handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("heard all"));

    let applied: Vec<(u64, String)> = events
        .await??
        .into_iter()
        .filter_map(|e| {
            if let RunEvent::InputApplied {
                seq,
                input: agentry::protocol::trace::RunInput::Interrupt { text: Some(text) },
            } = e.event
            {
                Some((seq, text))
            } else {
                None
            }
        })
        .collect();
    let texts: Vec<&String> = applied.iter().map(|(_, t)| t).collect();
    assert_eq!(texts, sent.iter().collect::<Vec<_>>(), "{applied:?}");
    assert!(
        applied.windows(2).all(|w| w[0].0 < w[1].0),
        "sequence numbers not distinct and rising: {applied:?}"
    );
    assert_eq!(*last_seen.lock().unwrap_or_else(|e| e.into_inner()), sent);
    Ok(())
}

/// An answer given in the step the user interrupted does not end the run:
/// the user spoke before it ended, so the next turn sees the message and
/// answers again. (The policy sends the interrupt itself as it answers, so
/// the cut lands in that very step, after the answer was decided.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_in_an_interrupted_step_does_not_end_the_run() -> Result<(), TestError> {
    let task = TestTask::new("answer", &[])?;
    let slot: Arc<std::sync::OnceLock<agentry::RunHandle>> = Arc::default();
    let handle_slot = Arc::clone(&slot);
    let policy = FnPolicy::from_async(move |ctx| {
        let slot = Arc::clone(&handle_slot);
        let step = ctx.step;
        let heard = matches!(
            ctx.session.last(),
            Some(SessionEntry::User { text }) if text == "answer in French"
        );
        Box::pin(async move {
            if step > 1 {
                let answer = if heard { "bonjour" } else { "missed it" };
                return agentry::Decision::Final {
                    answer: answer.into(),
                };
            }
            // The test hands the run's handle over once it has it.
            let handle = loop {
                if let Some(handle) = slot.get() {
                    break handle;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let _ = handle.interrupt("answer in French");
            agentry::Decision::Final {
                answer: "hello".into(),
            }
        })
    });
    let handle = Runtime::with_builtins()?
        .start(task.config(), policy)
        .await?;
    let _ = slot.set(handle.clone());
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle.wait()).await??;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("bonjour"));
    assert_eq!(outcome.steps, 2);
    Ok(())
}

/// Waits for its cancellation and answers it itself, retryable, in its own
/// words: as a process tool whose kill path returns first.
struct AnswersItsCancel {
    started: Arc<tokio::sync::Notify>,
}

#[agentry::async_trait]
impl agentry::Tool for AnswersItsCancel {
    fn contract(&self) -> agentry::ToolContract {
        agentry::ToolContract::new(
            "watch",
            "Waits until cancelled.",
            agentry_test_support::value_schema(),
        )
        .effect(Effect::Reversible)
    }

    async fn call(
        &self,
        _args: Value,
        ctx: &agentry::ToolContext,
    ) -> Result<agentry::ToolOutput, agentry::ToolError> {
        self.started.notify_one();
        ctx.cancel.cancelled().await;
        Err(agentry::ToolError::new(ErrorCode::Ecanceled, "the watch was stopped").retryable(true))
    }
}

/// A tool that answers its own cancellation first still reports the user's
/// interrupt (not retryable, pointing at the message), as the host's own
/// cancelled envelope does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_answering_its_own_cancel_still_reports_the_interrupt() -> Result<(), TestError> {
    let started = Arc::new(tokio::sync::Notify::new());
    let tool = AnswersItsCancel {
        started: Arc::clone(&started),
    };
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("watch", &[])?.grant(&["watch"]);
    let policy = ScriptBuilder::new()
        .call("w1", "watch", json!({"value": 1}))
        .finish("ok")
        .policy();
    let handle = runtime.start(task.config(), policy).await?;
    let events = handle.subscribe();
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await?;
    handle.interrupt("stop watching")?;
    let events = collect_until_stopped(events).await?;

    let result = &tool_results(&events)[0].1;
    interrupted_error(result)?;
    assert_eq!(result.attempt, 1, "not retried");
    Ok(())
}
