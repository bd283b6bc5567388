//! Durable runs through the embedding API: a runtime on a SQLite store, a crash
//! in the middle of a step (the run's state keeper and executor killed, so
//! nothing more reaches the store, as when the process dies), and a second
//! runtime on the same file that lists and resumes the run.
//!
//! The same guarantees under real SIGKILLs of the `agentry` binary are in
//! crates/agentry-cli/tests/crash.rs.

use std::sync::{Arc, Weak};
use std::time::Duration;

use agentry::protocol::event::RunEvent;
use agentry::protocol::state::SessionEntry;
use agentry::store::{LedgerState, SqliteOptions, Store};
use agentry::{
    Durability, Effect, Grants, Idempotency, RunConfig, RunHandle, RunStatus, Runtime,
    RuntimeError, Settlement, SqliteStore, StopReason, Tool,
};
use agentry_test_support::{
    CountingTool, GateCall, GateHandle, GateTool, ScriptBuilder, TestError, TestTask, runtime_with,
    wait_for_event,
};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

fn store(path: &std::path::Path) -> Result<Arc<dyn Store>, TestError> {
    Ok(Arc::new(SqliteStore::open(path)?))
}

fn durable(tools: Vec<Arc<dyn Tool>>, db: &std::path::Path) -> Result<Runtime, TestError> {
    Ok(runtime_with(tools)?.with_store(store(db)?, Durability::Strict)?)
}

/// A durable runtime on `db`, with a watch on its store: see [`process_exit`].
fn watched(tools: Vec<Arc<dyn Tool>>, db: &std::path::Path) -> Result<Watched, TestError> {
    let store = store(db)?;
    let watch = Arc::downgrade(&store);
    let runtime = runtime_with(tools)?.with_store(store, Durability::Strict)?;
    Ok(Watched { runtime, watch })
}

/// A durable runtime and a watch on its store, which lives as long as anything
/// of the runtime (its store writer thread included) can still write to it.
struct Watched {
    runtime: Runtime,
    watch: Weak<dyn Store>,
}

/// The process holding `process` and `handle` goes away after a [`crash`]:
/// both are dropped, and this returns once its store writer has committed
/// everything the run had queued and exited. The worst case for a crash test:
/// whatever the run queued (a ledger row written as the process went away)
/// is on disk.
async fn process_exit(process: Watched, handle: RunHandle) -> Result<(), TestError> {
    let Watched { runtime, watch } = process;
    drop(handle);
    drop(runtime);
    let gone = async {
        while watch.strong_count() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(WAIT, gone)
        .await
        .map_err(|_| "the store writer of the crashed runtime did not exit")?;
    Ok(())
}

/// Kills the run the way a crash would: the state keeper first (awaited, so
/// nothing the run does from here on, its stop included, is committed), then
/// the executor, whose call in flight is dropped without an outcome.
async fn crash(handle: &RunHandle) {
    let _ = handle.actors().state.kill_and_wait(Some(WAIT)).await;
    handle.actors().executor.kill();
    let _ = tokio::time::timeout(WAIT, handle.wait()).await;
}

/// Waits until the executor itself answered call `id` after the run's
/// cancellation (not the conductor's stand-in when the executor is late):
/// whatever the executor records for the call is queued at the store writer.
async fn executor_answered(
    events: &mut tokio::sync::broadcast::Receiver<agentry::protocol::event::EventRecord>,
    id: &str,
) -> Result<(), TestError> {
    let finished = wait_for_event(
        events,
        |e| matches!(&e.event, RunEvent::ToolCallFinished { result, .. } if result.tool_call_id == id),
        WAIT,
    )
    .await?;
    let RunEvent::ToolCallFinished { result, .. } = &finished.event else {
        return Err("not a tool call's end".into());
    };
    let message = result.error.as_ref().map(|e| e.message.as_str());
    assert!(
        !message
            .unwrap_or_default()
            .contains("did not answer in time"),
        "the executor was starved past the conductor's grace, so this run cannot show what it records: {result:?}"
    );
    Ok(())
}

fn approved(mut config: RunConfig, tools: &[&str]) -> RunConfig {
    config.approval.pre_approved = Grants::new(tools.iter().copied());
    config
}

/// The "pay once" task: one irreversible `pay` call `p1`, then finish.
fn pay_once() -> Result<(TestTask, ScriptBuilder), TestError> {
    let task = TestTask::new("pay once", &[])?.grant(&["pay"]);
    let script = ScriptBuilder::new()
        .call("p1", "pay", json!({"amount": 5}))
        .finish("paid");
    Ok((task, script))
}

/// A `pay` gate tool with an irreversible effect, and its handle.
fn irreversible_pay() -> (GateTool, agentry_test_support::GateHandle) {
    let (gate, held) = GateTool::new("pay");
    (gate.effect(Effect::IrreversibleExternal), held)
}

/// A run of "pay once" with its `p1` held at the gate.
struct InFlight {
    process: Watched,
    handle: RunHandle,
    call: GateCall,
}

/// Starts "pay once" on a durable runtime on `db` and waits until its `p1` is
/// in flight (held at the gate).
async fn pay_in_flight(
    db: &std::path::Path,
    task: &TestTask,
    script: &ScriptBuilder,
) -> Result<InFlight, TestError> {
    let (gate, mut held) = irreversible_pay();
    let process = watched(vec![Arc::new(gate)], db)?;
    let handle = process
        .runtime
        .start(approved(task.config(), &["pay"]), script.clone().policy())
        .await?;
    let call = held.next_call(WAIT).await?;
    Ok(InFlight {
        process,
        handle,
        call,
    })
}

/// A resumed run of "pay once" parked on `p1`, and the gate `p1` would run at.
struct Parked {
    process: Watched,
    handle: RunHandle,
    gate: GateHandle,
}

/// Resumes run `run_id` on a new durable runtime on `db` (a fresh `pay`
/// gate) and waits until it parks on `p1`.
async fn resume_parked(
    db: &std::path::Path,
    run_id: &str,
    script: &ScriptBuilder,
) -> Result<Parked, TestError> {
    let (gate, held) = irreversible_pay();
    let process = watched(vec![Arc::new(gate)], db)?;
    let handle = process
        .runtime
        .resume(run_id, script.clone().policy())
        .await?;
    parked_on(&handle, "p1").await?;
    Ok(Parked {
        process,
        handle,
        gate: held,
    })
}

/// Waits for `handle`'s outcome and checks that the run ended `done`.
async fn expect_done(handle: &RunHandle) -> Result<(), TestError> {
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}

/// Waits until `handle`'s run parks `awaiting_decision` on call `id`.
async fn parked_on(handle: &RunHandle, id: &str) -> Result<(), TestError> {
    let mut events = handle.subscribe();
    wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::AwaitingDecision { call, .. } if call.id == id),
        WAIT,
    )
    .await?;
    Ok(())
}

/// Run `run_id` as stored in `db`, once `ready` holds for it (polled; an error
/// if it does not within [`WAIT`]).
async fn stored_until(
    db: &std::path::Path,
    run_id: &str,
    ready: impl Fn(&agentry::store::StoredRun) -> bool,
) -> Result<agentry::store::StoredRun, TestError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let run = SqliteStore::open(db)?.load(run_id)?.ok_or("run missing")?;
        if ready(&run) {
            return Ok(run);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("run {run_id} never reached the expected stored state").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The stored ledger row of call `call_id` of run `run_id`.
fn ledger_row(
    db: &std::path::Path,
    run_id: &str,
    call_id: &str,
) -> Result<agentry::store::LedgerEntry, TestError> {
    let stored = SqliteStore::open(db)?.load(run_id)?.ok_or("run missing")?;
    Ok(stored
        .ledger
        .into_iter()
        .find(|r| r.call_id == call_id)
        .ok_or("no ledger row")?)
}

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
    let _ = second.handle.actors().state.kill_and_wait(Some(WAIT)).await;
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
    let _ = first.handle.actors().state.kill_and_wait(Some(WAIT)).await;
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

/// A call with a recorded outcome is never run again, even in the step being
/// acted on again; a started call whose contract makes it safe to repeat
/// (idempotent) runs again without asking anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_outcomes_replay_and_safe_calls_rerun() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("append then sync", &[])?.grant(&["append", "sync"]);
    let script = ScriptBuilder::new()
        .call("a1", "append", json!({"value": "line 1"}))
        .and_call("s1", "sync", json!({}))
        .finish("synced");

    let append = CountingTool::new("append").effect(Effect::IrreversibleExternal);
    let appended = append.counter();
    let (sync, mut held) = GateTool::new("sync");
    let sync = sync.idempotency(Idempotency::Idempotent);
    let first = durable(vec![Arc::new(append.clone()), Arc::new(sync)], &db)?;
    let handle = first
        .start(
            approved(task.config(), &["append"]),
            script.clone().policy(),
        )
        .await?;
    let run_id = handle.run_id().to_string();
    let _call = held.next_call(WAIT).await?;
    // `a1`'s outcome is on disk before the crash (queued, not awaited: a crash
    // an instant earlier would leave it started, and the resume would park it).
    stored_until(&db, &run_id, |run| {
        run.ledger
            .iter()
            .any(|r| r.call_id == "a1" && r.state == LedgerState::Outcome)
    })
    .await?;
    crash(&handle).await;
    assert_eq!(appended.get(), 1);

    let (sync, mut held) = GateTool::new("sync");
    let sync = sync.idempotency(Idempotency::Idempotent);
    let second = durable(vec![Arc::new(append.clone()), Arc::new(sync)], &db)?;
    let resumed = second.resume(&run_id, script.policy()).await?;
    let call = held.next_call(WAIT).await?;
    assert!(call.release(json!("ok")));
    expect_done(&resumed).await?;
    assert_eq!(
        appended.get(),
        1,
        "the appended line must not be appended again"
    );

    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    let results: Vec<_> = stored
        .session
        .iter()
        .filter_map(|e| match e {
            SessionEntry::Tool { result } => Some(result),
            _ => None,
        })
        .collect();
    let a1 = results
        .iter()
        .find(|r| r.tool_call_id == "a1")
        .ok_or("a1")?;
    assert!(a1.ok && a1.replayed, "{a1:?}");
    let s1 = results
        .iter()
        .find(|r| r.tool_call_id == "s1")
        .ok_or("s1")?;
    assert!(s1.ok && !s1.replayed, "{s1:?}");
    Ok(())
}

/// A keyed tool's action re-proposed under a fresh call id is caught by the
/// intent key: the recorded outcome comes back `replayed`, nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_action_under_a_fresh_id_is_replayed() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let charge = CountingTool::new("charge").idempotency(Idempotency::RequiredKey);
    let charged = charge.counter();
    let runtime = durable(vec![Arc::new(charge)], &db)?;
    let task = TestTask::new("charge once", &[])?.grant(&["charge"]);
    let policy = ScriptBuilder::new()
        .call("c1", "charge", json!({"value": 5}))
        .call("c2", "charge", json!({"value": 5}))
        .call("c3", "charge", json!({"value": 6}))
        .finish("charged")
        .policy();
    let outcome = runtime.run(task.config(), policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(charged.get(), 2, "c2 repeats c1; c3 is a different action");
    let stored = SqliteStore::open(&db)?
        .load(&outcome.run_id)?
        .ok_or("run missing")?;
    let key = |id: &str| {
        stored
            .ledger
            .iter()
            .find(|r| r.call_id == id)
            .map(|r| r.intent_key.clone())
    };
    assert_eq!(key("c1"), key("c2"));
    assert_ne!(key("c1"), key("c3"));
    Ok(())
}

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
    let run_id = handle.run_id().to_string();
    let _call = held.next_call(WAIT).await?;
    crash(&handle).await;
    let (t, mut held) = tools();
    let second = durable(t, &db)?;
    let resumed = second.resume(&run_id, script.clone().policy()).await?;
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

/// A full disk stops the run with a clear reason; what was committed before is
/// intact and readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_store_stops_the_run_and_keeps_what_was_committed() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let limited: Arc<dyn Store> = Arc::new(SqliteStore::open_with(
        &db,
        SqliteOptions {
            max_pages: Some(60),
        },
    )?);
    let echo = CountingTool::new("echo").effect(Effect::ReadOnly);
    let runtime = runtime_with(vec![Arc::new(echo)])?.with_store(limited, Durability::Strict)?;
    let task = TestTask::new("fill the disk", &[])?
        .grant(&["echo"])
        .max_steps(500)
        .window(0);
    // Distinct 3 KiB values: every step adds pages.
    let mut builder = ScriptBuilder::new();
    for i in 0..400 {
        builder = builder.call(
            &format!("e{i}"),
            "echo",
            json!({"value": format!("{i:>3000}")}),
        );
    }
    let outcome = runtime
        .run(task.config(), builder.finish("never").policy())
        .await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::UnrecoverableError,
        "{}",
        outcome.detail
    );
    assert!(outcome.detail.contains("full"), "{}", outcome.detail);

    let reopened = SqliteStore::open(&db)?;
    let stored = reopened.load(&outcome.run_id)?.ok_or("run missing")?;
    let checkpoint = stored.checkpoint.ok_or("no checkpoint")?;
    assert!(checkpoint.snapshot.session_len > 1);
    assert_eq!(stored.session.len() as u64, checkpoint.snapshot.session_len);
    assert!(reopened.runs()?[0].unfinished());
    Ok(())
}

/// Resuming what cannot be resumed says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_errors_name_the_problem() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let runtime = durable(Vec::new(), &db)?;
    let policy = || ScriptBuilder::new().finish("ok").policy();
    match runtime.resume("nope", policy()).await {
        Err(RuntimeError::NoSuchRun { run_id, .. }) => assert_eq!(run_id, "nope"),
        other => panic!("{other:?}"),
    }
    let task = TestTask::new("quick", &[])?;
    let outcome = runtime.run(task.config(), policy()).await?;
    match runtime.resume(&outcome.run_id, policy()).await {
        Err(e @ RuntimeError::AlreadyStopped { .. }) => {
            assert!(e.to_string().contains("done"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(runtime.unfinished_runs().await?.is_empty());
    let plain = runtime_with(Vec::new())?;
    assert!(matches!(
        plain.resume("x", policy()).await,
        Err(RuntimeError::NoStore)
    ));
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
    handle.actors().executor.kill();
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
