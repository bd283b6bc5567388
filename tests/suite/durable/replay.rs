//! What the ledger settles on a resume: recorded outcomes replayed, safe calls
//! run again, a keyed action under a fresh call id caught by its intent key.

use super::*;

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
        .filter_map(|e| {
            if let SessionEntry::Tool { result } = e {
                Some(result)
            } else {
                None
            }
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
