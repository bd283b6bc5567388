//! Calls that may have taken effect when the process died wait for a human:
//! parked `awaiting_decision` (or for approval), never run again on their own.

use super::*;

/// An irreversible call interrupted mid-flight is never run again on its own:
/// the resumed run parks `awaiting_decision` (on disk, visible to a third
/// runtime), and a human's "happened" records it as done without running it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_irreversible_call_waits_for_a_human() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let (task, script) = pay_once()?;
    let first = pay_in_flight(&db, &task, &script).await?;
    let run_id = first.handle.run_id().to_string();
    crash(&first.handle).await;
    drop(first.call);

    let (gate, mut held) = irreversible_pay();
    let second = durable(vec![Arc::new(gate)], &db)?;
    let unfinished = second.unfinished_runs().await?;
    assert_eq!(
        unfinished
            .iter()
            .map(|r| r.run_id.as_str())
            .collect::<Vec<_>>(),
        [run_id.as_str()]
    );
    let resumed = second.resume(&run_id, script.clone().policy()).await?;
    parked_on(&resumed, "p1").await?;
    let pending = resumed.pending_decisions().await;
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].call.id, "p1");
    assert!(
        held.try_next_call().is_none(),
        "the call must not run again"
    );

    // The park is on disk: another process sees the run waiting.
    let listed = SqliteStore::open(&db)?.runs()?;
    assert_eq!(listed[0].status, RunStatus::AwaitingDecision);

    resumed.settle("p1", Settlement::Happened).await?;
    expect_done(&resumed).await?;
    assert!(held.try_next_call().is_none(), "a settled call never runs");

    let row = ledger_row(&db, &run_id, "p1")?;
    assert_eq!(row.state, LedgerState::Outcome);
    assert_eq!(
        row.outcome.as_ref().and_then(|o| o.data.clone()),
        Some(json!({
            "settled": "happened",
            "note": "the run was interrupted during this call; a human confirmed it took effect (its output was not recorded)"
        }))
    );
    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    assert_eq!(
        stored.checkpoint.map(|c| c.snapshot.status),
        Some(RunStatus::Stopped)
    );
    Ok(())
}

/// A parked run whose process goes away (the state keeper first, then the
/// cancellation reaches the parked call) stays parked: the call is not
/// recorded as cancelled, so the next resume asks again instead of replaying
/// "cancelled" and going on without it; "retry" then runs it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_call_stays_parked_when_its_process_goes_away() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let (task, script) = pay_once()?;
    let first = pay_in_flight(&db, &task, &script).await?;
    let run_id = first.handle.run_id().to_string();
    crash(&first.handle).await;
    drop(first.call);

    // Resumed, parked, and then that process goes away too: as at the exit of
    // a process holding a parked run, the state keeper is gone (nothing more is
    // committed through it) and the cancellation reaches the parked call.
    let mut second = resume_parked(&db, &run_id, &script).await?;
    let mut events = second.handle.subscribe();
    let actors = second.handle.actors().expect("the resumed run is parked");
    let _ = actors.state.kill_and_wait(Some(WAIT)).await;
    second.handle.abort();
    executor_answered(&mut events, "p1").await?;
    crash(&second.handle).await;
    assert!(
        second.gate.try_next_call().is_none(),
        "the call must not run again"
    );
    process_exit(second.process, second.handle).await?;
    let row = ledger_row(&db, &run_id, "p1")?;
    assert_eq!(row.state, LedgerState::AwaitingDecision, "{row:?}");

    // The next resume asks again; "retry" runs the call, once.
    let mut third = resume_parked(&db, &run_id, &script).await?;
    third.handle.settle("p1", Settlement::Retry).await?;
    let call = third.gate.next_call(WAIT).await?;
    call.release(json!("paid 5"));
    expect_done(&third.handle).await?;
    assert!(third.gate.try_next_call().is_none(), "run once");
    Ok(())
}

/// A run cancelled while an irreversible call is in flight, whose stop never
/// reaches the disk (its process goes away), records nothing for the call: it
/// may have taken effect, so the next resume parks it for a human instead of
/// replaying "cancelled" (which a model would answer by calling it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_short_by_cancellation_keeps_its_intent() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let (task, script) = pay_once()?;
    let mut first = pay_in_flight(&db, &task, &script).await?;
    let run_id = first.handle.run_id().to_string();
    let mut events = first.handle.subscribe();
    // The state keeper goes first (nothing more is committed through it), then
    // the cancellation reaches the call in flight.
    let actors = first.handle.actors().expect("the run is in a call");
    let _ = actors.state.kill_and_wait(Some(WAIT)).await;
    first.handle.abort();
    assert!(
        first.call.abandoned(WAIT).await,
        "the cancellation never reached the call"
    );
    executor_answered(&mut events, "p1").await?;
    crash(&first.handle).await;
    process_exit(first.process, first.handle).await?;
    let row = ledger_row(&db, &run_id, "p1")?;
    assert_eq!(row.state, LedgerState::Intent, "{row:?}");

    let mut second = resume_parked(&db, &run_id, &script).await?;
    second.handle.settle("p1", Settlement::Happened).await?;
    expect_done(&second.handle).await?;
    assert!(second.gate.try_next_call().is_none(), "never run twice");
    Ok(())
}

/// A call parked for approval when the process died is parked again after the
/// resume (it never ran), and approving it then runs it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_survives_a_restart() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("refund after approval", &[])?.grant(&["refund"]);
    let script = ScriptBuilder::new()
        .call("r1", "refund", json!({"value": 10}))
        .finish("refunded");
    let tool = || CountingTool::new("refund").effect(Effect::IrreversibleExternal);

    let refund = tool();
    let first = durable(vec![Arc::new(refund.clone())], &db)?;
    let handle = first.start(task.config(), script.clone().policy()).await?;
    let run_id = handle.run_id().to_string();
    let mut events = handle.subscribe();
    wait_for_event(
        &mut events,
        |e| matches!(e.event, RunEvent::AwaitingApproval { .. }),
        WAIT,
    )
    .await?;
    crash(&handle).await;

    let refund = tool();
    let refunded = refund.counter();
    let second = durable(vec![Arc::new(refund)], &db)?;
    let resumed = second.resume(&run_id, script.policy()).await?;
    let mut events = resumed.subscribe();
    wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::AwaitingApproval { call, .. } if call.id == "r1"),
        WAIT,
    )
    .await?;
    assert_eq!(refunded.get(), 0, "nothing runs before the approval");
    assert_eq!(resumed.pending_approvals().await.len(), 1);
    resumed.approve("r1").await?;
    expect_done(&resumed).await?;
    assert_eq!(refunded.get(), 1);
    Ok(())
}

/// The executor dies in the middle of an irreversible call: the model hears the
/// outcome is unknown, and when it proposes the same call again the restarted
/// executor (which reads the ledger back from the store) parks it for a human
/// instead of running it a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_lost_with_its_executor_is_not_rerun_silently() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("pay once", &[])?.grant(&["pay"]);
    let policy = ScriptBuilder::new()
        .call("p1", "pay", json!({"amount": 5}))
        .call("p1", "pay", json!({"amount": 5}))
        .finish("paid")
        .policy();
    let (gate, mut held) = GateTool::new("pay");
    let gate = gate.effect(Effect::IrreversibleExternal);
    let runtime = durable(vec![Arc::new(gate)], &db)?;
    let handle = runtime
        .start(approved(task.config(), &["pay"]), policy)
        .await?;
    let mut events = handle.subscribe();
    let _call = held.next_call(WAIT).await?;
    handle
        .actors()
        .expect("the run is in a call")
        .executor
        .kill();
    wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::AwaitingDecision { call, .. } if call.id == "p1"),
        WAIT,
    )
    .await?;
    assert!(
        held.try_next_call().is_none(),
        "never run a second time unasked"
    );
    handle.settle("p1", Settlement::Skip).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert!(held.try_next_call().is_none());
    Ok(())
}
