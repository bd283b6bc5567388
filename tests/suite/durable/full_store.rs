//! The store itself: a full disk stops the run and keeps what was committed;
//! resuming what cannot be resumed says why.

use super::*;

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
            ..SqliteOptions::default()
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
