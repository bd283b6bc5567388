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

mod drain;
mod full_store;
mod interrupt;
mod park;
mod replay;
mod restart;
mod takeover;

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
    // Taken once: a run whose state keeper is gone stops, and its handle
    // then lets its actors go (a run already stopped has none to kill).
    if let Some(actors) = handle.actors() {
        let _ = actors.state.kill_and_wait(Some(WAIT)).await;
        actors.executor.kill();
    }
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
