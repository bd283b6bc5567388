//! Hibernation in lease mode (`Runtime::with_lease`, the nodes of a cluster
//! on one store): a hibernated run is owned by no process.

use std::time::Duration;

use agentry::{RuntimeError, StopReason};
use agentry_test_support::{TestError, TestTask};

use super::{WAIT, event_driven, hibernating, replier, store, stored_messages};

/// In lease mode (nodes of a cluster on one store) a hibernated run is owned
/// by no process: it lets its lease go (no owner stored) and leaves this
/// runtime, whose handle says so; a message sent through that handle is
/// refused and stores nothing; the next runtime to resume it holds it and
/// takes its messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_lease_mode_a_hibernated_run_lets_its_lease_go_for_the_next_runtime()
-> Result<(), TestError> {
    let lease = Duration::from_secs(5);
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let first = hibernating(&db)?.with_lease(lease);
    let handle = first.start(event_driven(&task), replier()).await?;
    handle.send_message("before")?;
    let left = tokio::time::timeout(WAIT, handle.wait()).await?;
    assert!(matches!(left, Err(RuntimeError::LetGo { .. })), "{left:?}");
    let id = handle.run_id().to_string();
    let reader = store(&db)?;
    let stored = reader.load(&id)?.ok_or("no stored run")?;
    assert_eq!(
        stored.owner, None,
        "a hibernated run is owned by no process"
    );
    assert!(
        matches!(
            handle.send_message("refused"),
            Err(RuntimeError::LetGo { .. })
        ),
        "a message to a run that let its lease go is refused"
    );
    first.flush().await?;
    assert!(
        reader.load(&id)?.ok_or("no stored run")?.inbox.is_empty(),
        "a refused message stores nothing"
    );

    let second = hibernating(&db)?.with_lease(lease);
    let resumed = second.resume(&id, replier()).await?;
    assert!(
        reader.load(&id)?.ok_or("no stored run")?.owner.is_some(),
        "the runtime that resumed it owns it"
    );
    resumed.send_message("after")?;
    resumed.send_message("stop")?;
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(stored_messages(&*reader, &id)?, ["before", "after", "stop"]);
    Ok(())
}
