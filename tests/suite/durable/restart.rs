//! What carries over a restart besides the ledger: the budget and the
//! absolute deadline, timers, and messages accepted but not yet applied.

use super::*;
use agentry_test_support::collect_until_stopped;

/// The budget goes on from what was spent before the crash, and the deadline is
/// absolute: time spent down does not give a run more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budget_and_deadline_survive_a_restart() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let script = ScriptBuilder::new()
        .call("n1", "note", json!({}))
        .call("w1", "wait", json!({}))
        .finish("done");
    let tools = || {
        let (wait, held) = GateTool::new("wait");
        let wait = wait.idempotency(Idempotency::Idempotent);
        let note = CountingTool::new("note").effect(Effect::ReadOnly);
        (vec![Arc::new(note) as Arc<dyn Tool>, Arc::new(wait)], held)
    };

    // Spent steps are still spent.
    let task = TestTask::new("steps", &[])?
        .grant(&["note", "wait"])
        .max_steps(10);
    let (t, mut held) = tools();
    let first = durable(t, &db)?;
    let handle = first.start(task.config(), script.clone().policy()).await?;
    assert_eq!(handle.fenced(), None, "started, not resumed");
    let run_id = handle.run_id().to_string();
    let _call = held.next_call(WAIT).await?;
    crash(&handle).await;
    let (t, mut held) = tools();
    let second = durable(t, &db)?;
    let resumed = second.resume(&run_id, script.clone().policy()).await?;
    // In-process tools leave no process behind (the CLI's fencing test kills real ones).
    let nothing = agentry::tools::proc::Fenced::default();
    assert_eq!(resumed.fenced(), Some(&nothing), "nothing left to fence");
    let call = held.next_call(WAIT).await?;
    let budget = resumed.budget().await.ok_or("no budget")?;
    assert_eq!(budget.spent.steps, 2, "{budget:?}");
    assert_eq!(budget.spent.tool_calls, 2, "{budget:?}");
    assert!(call.release(json!("ok")));
    let outcome = resumed.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.budget.spent.steps, 3);

    // A deadline that passed while the run was down stops it before anything
    // runs: the interrupted `w1` is not run again (a resume that restarted the
    // clock would run it and stop at a fresh deadline, still `deadline`).
    let task = TestTask::new("deadline", &[])?
        .grant(&["note", "wait"])
        .deadline_ms(600);
    let (t, mut held) = tools();
    let third = durable(t, &db)?;
    let handle = third.start(task.config(), script.clone().policy()).await?;
    let run_id = handle.run_id().to_string();
    let _call = held.next_call(WAIT).await?;
    crash(&handle).await;
    let stored = stored_until(&db, &run_id, |_| true).await?;
    let spent_before = stored
        .checkpoint
        .ok_or("no checkpoint")?
        .snapshot
        .control
        .spent;
    // Down for longer than the whole deadline.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (t, mut held) = tools();
    let fourth = durable(t, &db)?;
    let resumed = fourth.resume(&run_id, script.policy()).await?;
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(
        held.try_next_call().is_none(),
        "a call ran after the deadline had passed"
    );
    // What was committed before the crash, nothing more.
    assert_eq!(outcome.budget.spent.steps, spent_before.steps);
    assert_eq!(outcome.budget.spent.tool_calls, spent_before.tool_calls);
    Ok(())
}

/// A one-shot timer set before the crash fires after the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_survive_a_restart() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("wake up later", &[])?;
    let mut config = task.config();
    config.driver = agentry::Driver::Events;
    let script = ScriptBuilder::new().finish("woke");

    let first = durable(Vec::new(), &db)?;
    let handle = first.start(config, script.clone().policy()).await?;
    let run_id = handle.run_id().to_string();
    handle.after(
        Duration::from_millis(1_000),
        "wake",
        json!({"why": "reminder"}),
    );
    stored_until(&db, &run_id, |run| run.timers.len() == 1).await?;
    crash(&handle).await;
    // Crashed before the timer fired: only the resumed run can fire it.
    let stored = stored_until(&db, &run_id, |_| true).await?;
    assert_eq!(stored.timers.len(), 1, "{:?}", stored.timers);
    assert!(
        !stored
            .session
            .iter()
            .any(|e| matches!(e, SessionEntry::Event { name, .. } if name == "wake")),
        "the timer fired before the crash; the test shows nothing"
    );

    let second = durable(Vec::new(), &db)?;
    let resumed = second.resume(&run_id, script.policy()).await?;
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    assert!(stored.session.iter().any(
        |e| matches!(e, SessionEntry::Event { name, payload } if name == "wake" && payload["why"] == "reminder")
    ));
    assert!(stored.timers.is_empty(), "a fired timer leaves the store");
    Ok(())
}

/// A message the handle accepted while a step was running, not yet applied when
/// the process died, is in the run's stored inbox: the resumed run applies it
/// (once) before its next decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_message_survives_a_restart() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("wait, then read the message", &[])?.grant(&["wait"]);
    let script = ScriptBuilder::new()
        .call("w1", "wait", json!({}))
        .finish("read it");
    let gate = || {
        let (wait, held) = GateTool::new("wait");
        (wait.idempotency(Idempotency::Idempotent), held)
    };

    let (wait, mut held) = gate();
    let first = durable(vec![Arc::new(wait)], &db)?;
    let handle = first.start(task.config(), script.clone().policy()).await?;
    let run_id = handle.run_id().to_string();
    let _call = held.next_call(WAIT).await?;
    handle.send_message("hello from before the crash")?;
    // Queued behind the step: not applied yet, but in the store.
    let stored = stored_until(&db, &run_id, |run| !run.inbox.is_empty()).await?;
    assert_eq!(stored.inbox.len(), 1, "{:?}", stored.inbox);
    crash(&handle).await;

    let (wait, mut held) = gate();
    let second = durable(vec![Arc::new(wait)], &db)?;
    let resumed = second.resume(&run_id, script.policy()).await?;
    let call = held.next_call(WAIT).await?;
    assert!(call.release(json!("ok")));
    expect_done(&resumed).await?;
    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    let messages: Vec<_> = stored
        .session
        .iter()
        .filter(
            |e| matches!(e, SessionEntry::User { text } if text == "hello from before the crash"),
        )
        .collect();
    assert_eq!(messages.len(), 1, "applied exactly once");
    assert!(stored.inbox.is_empty(), "an applied input leaves the inbox");
    Ok(())
}

/// A resumed run numbers its events on from the numbering its last checkpoint
/// recorded, past [`agentry::runtime::RESUMED_EVENT_GAP`]: every number after every
/// event seen before the crash (those emitted after the last commit
/// included), gapless from there, and its own checkpoints record it on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_numbers_its_events_on_after_those_before_the_crash() -> Result<(), TestError>
{
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("note, then wait", &[])?.grant(&["note", "wait"]);
    let script = ScriptBuilder::new()
        .call("n1", "note", json!({}))
        .call("w1", "wait", json!({}))
        .finish("done");
    let (t, mut held) = note_and_wait();
    let first = watched(t, &db)?;
    let handle = first
        .runtime
        .start(task.config(), script.clone().policy())
        .await?;
    let run_id = handle.run_id().to_string();
    let mut events = handle.subscribe();
    let _call = held.next_call(WAIT).await?;
    let noted = wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::ToolCallFinished { result, .. } if result.tool_call_id == "n1"),
        WAIT,
    )
    .await?;
    wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::ToolCallStarted { tool_call_id, .. } if tool_call_id == "w1"),
        WAIT,
    )
    .await?;
    crash(&handle).await;
    // Everything the run queued is on disk: what the resume reads.
    process_exit(first, handle).await?;
    // Every event the first process numbered, the crash's own included.
    let mut seen_before = 0;
    while let Ok(record) = events.try_recv() {
        seen_before = record.seq;
    }
    let stored = stored_until(&db, &run_id, |_| true).await?;
    let recorded = last_event(&stored).ok_or("no numbering in the checkpoint")?;
    // Step 1's record waited for its commit, after its call's events.
    assert!(recorded >= noted.seq, "{recorded} < {}", noted.seq);
    assert!(seen_before >= recorded, "{seen_before} < {recorded}");

    let (t, mut held) = note_and_wait();
    let second = durable(t, &db)?;
    let resumed = second.resume(&run_id, script.policy()).await?;
    let after = resumed.subscribe();
    let call = held.next_call(WAIT).await?;
    assert!(call.release(json!("ok")));
    let events = collect_until_stopped(after).await?;
    expect_done(&resumed).await?;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let first_seq = recorded + agentry::runtime::RESUMED_EVENT_GAP + 1;
    let expected: Vec<u64> = (first_seq..first_seq + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "not numbered on after {recorded}");
    assert!(
        first_seq > seen_before,
        "a number seen before the crash was given again"
    );
    // The resumed run's checkpoints record its numbering on.
    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    let now = last_event(&stored).ok_or("no numbering in the checkpoint")?;
    let last = *seqs.last().ok_or("no events after the resume")?;
    assert!(
        (first_seq..=last).contains(&now),
        "{now} outside {first_seq}..={last}"
    );
    Ok(())
}

/// A read-only `note` and an idempotent `wait` held at its gate.
fn note_and_wait() -> (Vec<Arc<dyn Tool>>, GateHandle) {
    let (wait, held) = GateTool::new("wait");
    let wait = wait.idempotency(Idempotency::Idempotent);
    let note = CountingTool::new("note").effect(Effect::ReadOnly);
    (vec![Arc::new(note) as Arc<dyn Tool>, Arc::new(wait)], held)
}

/// The event numbering the run's last checkpoint recorded.
fn last_event(run: &agentry::store::StoredRun) -> Option<u64> {
    run.checkpoint
        .as_ref()
        .and_then(|cp| cp.progress["last_event"].as_u64())
}

/// A run whose process died before its first checkpoint landed (its model
/// never answered) has only its record: `stored_snapshot` gives the state a
/// resume starts it from (its goal, nothing spent), which is what a service
/// shows of it (`agentry serve` used to answer "its node does not answer"
/// for such a run for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_a_checkpoint_is_read_back_as_it_would_start() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("never decided", &[])?;
    let runtime = durable(Vec::new(), &db)?;
    let hung = agentry_test_support::FnPolicy::from_async(|_| Box::pin(std::future::pending()));
    let handle = runtime.start(task.config(), hung).await?;
    let run_id = handle.run_id().to_string();
    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    assert!(stored.checkpoint.is_none(), "{:?}", stored.checkpoint);
    let snapshot = runtime.stored_snapshot(&run_id).await?;
    assert_eq!(snapshot.task.goal, "never decided");
    assert_eq!(snapshot.control.spent.steps, 0);
    assert_ne!(snapshot.status, agentry::RunStatus::Stopped);
    runtime.abandon().await;
    Ok(())
}
