//! Lease mode (`Runtime::with_lease`): a runtime whose store writer stops
//! renewing its lease (paused, as a stopped or partitioned node) loses its
//! run to another runtime on the same file; its next write is refused, it
//! stops the run's actors and tool calls, and it writes nothing more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

use agentry::store::{RunSummary, StoreError, StoredRun, Write};

use super::*;

const LEASE: Duration = Duration::from_millis(600);

/// A real SQLite store seen through a process that can pause: while paused
/// its commits (heartbeats included) wait, as a stopped process's would;
/// every write it makes after the pause is recorded with its result.
struct Pausable {
    inner: SqliteStore,
    paused: Mutex<bool>,
    unpaused: Condvar,
    woke: AtomicBool,
    after: Mutex<Vec<Result<(), StoreError>>>,
}

impl Pausable {
    fn new(inner: SqliteStore) -> Pausable {
        Pausable {
            inner,
            paused: Mutex::new(false),
            unpaused: Condvar::new(),
            woke: AtomicBool::new(false),
            after: Mutex::new(Vec::new()),
        }
    }

    fn pause(&self) {
        *self.paused.lock().unwrap_or_else(PoisonError::into_inner) = true;
    }

    fn unpause(&self) {
        self.woke.store(true, Ordering::SeqCst);
        *self.paused.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.unpaused.notify_all();
    }

    fn after(&self) -> Vec<Result<(), StoreError>> {
        self.after
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Store for Pausable {
    fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        let mut paused = self.paused.lock().unwrap_or_else(PoisonError::into_inner);
        while *paused {
            paused = self
                .unpaused
                .wait(paused)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(paused);
        let result = self.inner.commit(writes);
        // A barrier (an empty batch) writes nothing: not counted.
        if self.woke.load(Ordering::SeqCst) && !writes.is_empty() {
            self.after
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(result.clone());
        }
        result
    }

    fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        self.inner.load(run_id)
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.runs()
    }

    fn location(&self) -> String {
        self.inner.location()
    }
}

/// Resumes `run_id` on `runtime` as soon as its owner's lease has expired
/// (refused as `Owned` until then), within 10 s.
async fn take_over(
    runtime: &Runtime,
    run_id: &str,
    script: &ScriptBuilder,
) -> Result<RunHandle, TestError> {
    let start = Instant::now();
    loop {
        match runtime.resume(run_id, script.clone().policy()).await {
            Ok(handle) => return Ok(handle),
            Err(RuntimeError::Owned { .. }) if start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Runtime A runs a call (held at its gate) when its store pauses past its
/// lease; runtime B on the same file takes the run over (epoch 2) and runs
/// the call again. When A goes on, its next write is refused: it cancels its
/// call, stops the run's actors, its handle says the run was taken over, and
/// nothing it tried to write lands. B finishes the run with its own result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_owner_is_taken_over_and_stops_without_writing() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let task = TestTask::new("work once", &[])?.grant(&["work"]);
    let script = ScriptBuilder::new()
        .call("w1", "work", json!({"n": 1}))
        .finish("worked");
    let (gate_a, mut held_a) = GateTool::new("work");
    let paused = Arc::new(Pausable::new(SqliteStore::open(&db)?));
    let a = runtime_with(vec![Arc::new(gate_a.effect(Effect::ReadOnly))])?
        .with_store(Arc::clone(&paused) as Arc<dyn Store>, Durability::Strict)?
        .with_lease(LEASE);
    let handle_a = a.start(task.config(), script.clone().policy()).await?;
    let mut call_a = held_a.next_call(WAIT).await?;
    let run_id = handle_a.run_id().to_string();
    paused.pause();

    let (gate_b, mut held_b) = GateTool::new("work");
    let b = runtime_with(vec![Arc::new(gate_b.effect(Effect::ReadOnly))])?
        .with_store(store(&db)?, Durability::Strict)?
        .with_lease(LEASE);
    let handle_b = take_over(&b, &run_id, &script).await?;
    let reader = SqliteStore::open(&db)?;
    let owner = reader.load(&run_id)?.ok_or("run missing")?.owner;
    assert_eq!(owner.map(|o| o.epoch), Some(2), "B's claim is epoch 2");
    let call_b = held_b.next_call(WAIT).await?;

    // A goes on: its first write (a heartbeat or its run's batch) is refused.
    paused.unpause();
    assert!(
        call_a.abandoned(WAIT).await,
        "A cancelled its call in flight"
    );
    let Err(err) = tokio::time::timeout(WAIT, handle_a.wait()).await? else {
        return Err("A has no outcome for a run it lost".into());
    };
    assert!(
        matches!(&err, RuntimeError::TakenOver { run_id: r, epoch: 2, owner: Some(_) } if *r == run_id),
        "{err:?}"
    );
    assert!(err.to_string().contains("taken over"), "{err}");
    assert!(handle_a.actors().is_none(), "A's actors are gone");

    assert!(call_b.release(json!({"by": "B"})));
    expect_done(&handle_b).await?;
    // Everything A tried after its pause was refused: nothing of it landed.
    let after = paused.after();
    assert!(!after.is_empty(), "A wrote again after its pause");
    assert!(
        after
            .iter()
            .all(|r| matches!(r, Err(StoreError::Fenced { epoch: 2, .. }))),
        "{after:?}"
    );
    // The stored run is B's: its result, its stop.
    only_b_wrote(&reader.load(&run_id)?.ok_or("run missing")?)
}

/// The stored run holds B's result for `w1` (one, in the ledger and the
/// session) and B's stop.
fn only_b_wrote(stored: &StoredRun) -> Result<(), TestError> {
    let row = stored
        .ledger
        .iter()
        .find(|r| r.call_id == "w1")
        .ok_or("no w1")?;
    let data = row.outcome.as_ref().and_then(|o| o.data.clone());
    assert_eq!(data, Some(json!({"by": "B"})));
    let results: Vec<_> = stored
        .session
        .iter()
        .filter_map(|e| {
            if let SessionEntry::Tool { result } = e
                && result.tool_call_id == "w1"
            {
                return Some(result.data.clone());
            }
            None
        })
        .collect();
    assert_eq!(results, vec![Some(json!({"by": "B"}))]);
    let checkpoint = stored.checkpoint.clone().ok_or("no checkpoint")?;
    assert_eq!(
        checkpoint.snapshot.control.stop_reason,
        Some(StopReason::Done)
    );
    Ok(())
}
