//! A user's interrupt on a durable run: its input is in the stored inbox before
//! the cut, so a crash before it is applied re-delivers it; an irreversible
//! call it cut stays parked across the crash until a human settles it.

use super::*;
use agentry_test_support::Recording;

/// The interrupt cuts an irreversible call in flight: the run parks
/// `awaiting_decision` on disk. The process dies; the resumed run parks
/// again on the call (never run again on its own), a human skips it, and the
/// interrupt's message, re-delivered from the inbox, is in the session the
/// next decision sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_irreversible_call_stays_parked_across_a_crash() -> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let (task, script) = pay_once()?;
    let mut first = pay_in_flight(&db, &task, &script).await?;
    let run_id = first.handle.run_id().to_string();
    let mut events = first.handle.subscribe();
    first.handle.interrupt("wrong account, do not pay")?;
    assert!(
        first.call.abandoned(WAIT).await,
        "the interrupt cancels the call in flight"
    );
    wait_for_event(
        &mut events,
        |e| matches!(&e.event, RunEvent::AwaitingDecision { call, .. } if call.id == "p1"),
        WAIT,
    )
    .await?;
    assert_eq!(
        ledger_row(&db, &run_id, "p1")?.state,
        LedgerState::AwaitingDecision
    );
    let stored = stored_until(&db, &run_id, |r| !r.inbox.is_empty()).await?;
    assert_eq!(
        stored.inbox[0].input,
        json!({"type": "interrupt", "text": "wrong account, do not pay"})
    );
    crash(&first.handle).await;
    process_exit(first.process, first.handle).await?;

    let (gate, mut held) = irreversible_pay();
    let second = durable(vec![Arc::new(gate)], &db)?;
    let (policy, seen) = Recording::new(script.clone().policy());
    let resumed = second.resume(&run_id, policy).await?;
    parked_on(&resumed, "p1").await?;
    assert!(held.try_next_call().is_none(), "never run again on its own");
    resumed.settle("p1", Settlement::Skip).await?;
    expect_done(&resumed).await?;

    assert!(held.try_next_call().is_none(), "a skipped call never runs");
    let next = seen
        .all()
        .into_iter()
        .last()
        .ok_or("no decision after the resume")?;
    assert_eq!(
        next.session.last(),
        Some(&SessionEntry::User {
            text: "wrong account, do not pay".into()
        })
    );
    let stored = SqliteStore::open(&db)?
        .load(&run_id)?
        .ok_or("run missing")?;
    assert!(stored.inbox.is_empty(), "{:?}", stored.inbox);
    Ok(())
}
