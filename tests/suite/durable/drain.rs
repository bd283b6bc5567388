//! A service going away drains its runs: the step in progress finishes (its
//! irreversible call gets its outcome on disk), no other starts, and the run
//! left in the store resumes in the next process at its next step, not
//! paused, without running the call again.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_run_finishes_its_step_and_resumes_elsewhere_without_running_it_again()
-> Result<(), TestError> {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("runs.db");
    let (task, script) = pay_once()?;
    let first = pay_in_flight(&db, &task, &script).await?;
    let run_id = first.handle.run_id().to_string();

    let handle = first.handle.clone();
    let mut drained = tokio::spawn(async move { handle.drain().await });
    // The call is held at its gate: the step is not over, nor the drain.
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut drained)
            .await
            .is_err(),
        "drained while its step was still running"
    );
    first.call.release(json!("paid 5"));
    tokio::time::timeout(WAIT, drained)
        .await
        .map_err(|_| "the drain did not end with the step")??;
    assert!(
        first.handle.outcome().is_none(),
        "a drained run is not stopped"
    );
    assert_eq!(
        ledger_row(&db, &run_id, "p1")?.state,
        LedgerState::Outcome,
        "the step's call is on disk"
    );
    first.process.runtime.flush().await?;
    first.process.runtime.abandon().await;
    process_exit(first.process, first.handle).await?;

    let (gate, mut held) = irreversible_pay();
    let second = durable(vec![Arc::new(gate)], &db)?;
    let resumed = second.resume(&run_id, script.policy()).await?;
    expect_done(&resumed).await?;
    assert!(held.try_next_call().is_none(), "the call ran once");
    Ok(())
}
