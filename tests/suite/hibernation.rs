//! Hibernation (`RunConfig::hibernate_after`): an event-driven run that has
//! slept that long lets its actors go and keeps only its handles' shared
//! parts and its stored record; the next input, its timer or its deadline
//! wakes it from the store (a real SQLite file), transparently.

use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::RunEvent;
use agentry::protocol::state::{RunStatus, SessionEntry};
use agentry::runtime::ResumeOptions;
use agentry::store::Store;
use agentry::{
    Decision, Driver, Durability, Grants, RunConfig, RunHandle, Runtime, RuntimeError, SqliteStore,
    StopReason, ToolCall,
};
use agentry_test_support::{FnPolicy, TestError, TestTask, runtime_with};
use serde_json::json;

#[path = "hibernation/lease.rs"]
mod lease;

const WAIT: Duration = Duration::from_secs(10);
const NAP: Duration = Duration::from_millis(40);

/// Replies "ok" to every input; finishes on the message "stop" or the event
/// "ring"; on the message "write" asks to write a file (which needs approval).
fn replier() -> FnPolicy {
    FnPolicy::new(|ctx| match ctx.session.last() {
        Some(SessionEntry::User { text }) if text == "stop" => finish(ctx.step),
        Some(SessionEntry::Event { name, .. }) if name == "ring" => finish(ctx.step),
        Some(SessionEntry::User { text }) if text == "write" => Decision::ToolCalls {
            calls: vec![ToolCall::new(
                format!("w{}", ctx.step),
                "fs.write",
                json!({"path": "out.txt", "content": "written"}),
            )],
        },
        _ => Decision::Final {
            answer: "ok".into(),
        },
    })
}

fn finish(step: u64) -> Decision {
    Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("finish-{step}"),
            "task.finish",
            json!({"answer": "done"}),
        )],
    }
}

fn store(db: &std::path::Path) -> Result<Arc<dyn Store>, TestError> {
    Ok(Arc::new(SqliteStore::open(db)?))
}

/// A durable runtime on `db` whose runs may hibernate (each woken with a
/// fresh [`replier`]).
fn hibernating(db: &std::path::Path) -> Result<Runtime, TestError> {
    Ok(runtime_with(Vec::new())?
        .with_store(store(db)?, Durability::Strict)?
        .with_wake_policy(|_config: &RunConfig| Ok(Box::new(replier()))))
}

fn event_driven(task: &TestTask) -> RunConfig {
    let mut config = task.config();
    config.driver = Driver::Events;
    config.hibernate_after = Some(NAP);
    config
}

/// Polls `ready` every 2 ms until it holds; an error after [`WAIT`].
async fn until(what: &str, mut ready: impl FnMut() -> bool) -> Result<(), TestError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !ready() {
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("never happened: {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

async fn hibernated(handle: &RunHandle) -> Result<(), TestError> {
    until("the run hibernated", || handle.hibernated()).await
}

/// The stored messages of `run_id` as its session shows them (after the
/// goal, its first user entry).
fn stored_messages(store: &dyn Store, run_id: &str) -> Result<Vec<String>, TestError> {
    let run = store.load(run_id)?.ok_or("no stored run")?;
    Ok(run
        .session
        .iter()
        .filter_map(|e| match e {
            SessionEntry::User { text } => Some(text.clone()),
            SessionEntry::Assistant { .. }
            | SessionEntry::Tool { .. }
            | SessionEntry::Event { .. }
            | SessionEntry::Note { .. } => None,
        })
        .skip(1)
        .collect())
}

/// A run that may hibernate keeps its waker (its handle and the runtime) in
/// its slot, a cycle the slot breaks when the run stops: once its last handle
/// and the runtime go, nothing of it is left, and the store closes (its writer
/// checkpoints the WAL away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_that_could_hibernate_lets_its_runtime_go() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let handle = runtime.start(event_driven(&task), replier()).await?;
    hibernated(&handle).await?;
    handle.send_message("hello")?;
    hibernated(&handle).await?;
    handle.abort();
    handle.wait().await?;
    drop(handle);
    drop(runtime);
    let wal = task.root().join("runs.db-wal");
    until("the store closed (its WAL gone)", || !wal.exists()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hibernated_run_lets_its_actors_go_and_a_message_wakes_it() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let handle = runtime.start(event_driven(&task), replier()).await?;
    let first = handle.actors().ok_or("no actors while it runs")?;
    hibernated(&handle).await?;

    assert!(
        handle.actors().is_none(),
        "a hibernated run keeps its actors"
    );
    assert_eq!(handle.budget().await, None);
    for cell in [first.policy, first.executor, first.state, first.budget] {
        cell.wait(Some(WAIT))
            .await
            .map_err(|e| format!("an actor outlived the hibernation: {e}"))?;
    }
    let asleep = handle.snapshot().await.ok_or("no stored snapshot")?;
    assert_eq!(asleep.control.spent.steps, 0);

    handle.send_message("hello")?;
    until("the message was answered", || {
        handle.actors().is_some() || handle.outcome().is_some()
    })
    .await?;
    // Answered, then asleep again: hibernated once more with one step spent.
    let stepped = async {
        loop {
            if handle.hibernated()
                && let Some(s) = handle.snapshot().await
                && s.control.spent.steps == 1
            {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let snap = tokio::time::timeout(WAIT, stepped).await?;
    assert_eq!(snap.inputs, 1);
    assert_eq!(stored_messages(&*store(&db)?, handle.run_id())?, ["hello"]);

    handle.send_message("stop")?;
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2, "one step per message, across two wakes");
    assert!(handle.actors().is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_hibernated_agents_each_take_their_messages_once_in_order()
-> Result<(), TestError> {
    let runs: usize = std::env::var("HIBERNATION_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let load = async {
        let mut handles = Vec::with_capacity(runs);
        for _ in 0..runs {
            handles.push(runtime.start(event_driven(&task), replier()).await?);
        }
        for h in &handles {
            hibernated(h).await?;
        }
        for h in &handles {
            h.send_message("m1")?;
            h.send_message("m2")?;
        }
        // Every run answered and asleep again (10,000 wakes queue at the
        // store's one writer: bounded as a whole, not per run).
        let mut waiting: Vec<&RunHandle> = handles.iter().collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        while !waiting.is_empty() {
            waiting.retain(|h| !h.hibernated());
            if let Some(h) = waiting.first()
                && tokio::time::Instant::now() >= deadline
            {
                return Err(format!(
                    "{} runs never slept again, e.g. {}: awake {} stopped {:?} inbox {:?}",
                    waiting.len(),
                    h.run_id(),
                    h.actors().is_some(),
                    h.outcome().map(|o| o.detail),
                    h.inbox_usage(),
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok::<_, TestError>(handles)
    };
    let handles = tokio::time::timeout(Duration::from_secs(600), load).await??;
    let store = store(&db)?;
    for h in &handles {
        // A run may hibernate between the two messages (each wakes it); once
        // both are applied it sleeps again.
        let applied = async {
            loop {
                let messages = stored_messages(&*store, h.run_id())?;
                if messages.len() >= 2 || !h.hibernated() {
                    return Ok::<_, TestError>(messages);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let messages = tokio::time::timeout(WAIT, applied).await??;
        assert_eq!(messages, ["m1", "m2"], "run {}", h.run_id());
        assert!(h.outcome().is_none(), "run {} stopped", h.run_id());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passing_during_hibernation_stops_the_run_at_the_deadline()
-> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?.deadline_ms(600);
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let handle = runtime.start(event_driven(&task), replier()).await?;
    hibernated(&handle).await?;
    // Nothing is sent: the deadline alone wakes it, and it stops.
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(
        outcome.budget.elapsed_ms >= 600,
        "stopped before its deadline: {:?}",
        outcome.budget
    );
    assert_eq!(outcome.steps, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_firing_while_hibernated_wakes_the_run() -> Result<(), TestError> {
    let task = TestTask::new("wait for the bell", &[])?;
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let handle = runtime.start(event_driven(&task), replier()).await?;
    handle.after(Duration::from_millis(500), "ring", json!({}));
    hibernated(&handle).await?;
    assert!(handle.outcome().is_none(), "the timer has not fired yet");
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 1, "the timer's event woke one step");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_numbering_goes_on_across_hibernation() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let handle = runtime.start(event_driven(&task), replier()).await?;
    let mut events = handle.subscribe();
    for text in ["one", "two"] {
        hibernated(&handle).await?;
        handle.send_message(text)?;
        until("woken", || !handle.hibernated()).await?;
    }
    hibernated(&handle).await?;
    handle.send_message("stop")?;
    let mut seqs = Vec::new();
    let mut applied = Vec::new();
    loop {
        let record = tokio::time::timeout(WAIT, events.recv()).await??;
        seqs.push(record.seq);
        if let RunEvent::InputApplied { seq, .. } = &record.event {
            applied.push(*seq);
        }
        if matches!(record.event, RunEvent::RunStopped { .. }) {
            break;
        }
    }
    let expected: Vec<u64> = (seqs[0]..seqs[0] + seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "a gap or a repeat in the event numbering");
    assert_eq!(applied, [1, 2, 3], "the inputs' numbers go on across wakes");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_answered_across_hibernation() -> Result<(), TestError> {
    let task = TestTask::new("write when asked", &[])?.grant(&["fs.read", "fs.write"]);
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let mut config = event_driven(&task);
    config.approval.require = Grants::new(["fs.write"]);
    let handle = runtime.start(config, replier()).await?;
    hibernated(&handle).await?;
    // No approval is pending: asking wakes the run, which says so.
    assert!(matches!(
        handle.approve("nothing").await,
        Err(RuntimeError::NoPendingApproval { .. })
    ));
    hibernated(&handle).await?;
    handle.send_message("write")?;
    let parked = async {
        loop {
            let pending = handle.pending_approvals().await;
            if let Some(p) = pending.first() {
                return p.call.id.clone();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let id = tokio::time::timeout(WAIT, parked).await?;
    // A run parked on a human stays awake (it is mid-step) however long.
    tokio::time::sleep(NAP * 3).await;
    assert!(!handle.hibernated(), "a parked run hibernated");
    handle.approve(&id).await?;
    hibernated(&handle).await?;
    assert_eq!(
        std::fs::read_to_string(task.workdir().join("out.txt"))?,
        "written"
    );
    handle.send_message("stop")?;
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hibernated_runs_resume_after_the_process_goes() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let first = hibernating(&db)?;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let h = first.start(event_driven(&task), replier()).await?;
        h.send_message("before")?;
        ids.push(h.run_id().to_string());
        until("answered and hibernated", || h.hibernated()).await?;
        // Every run is hibernated as the process goes.
        drop(h);
    }
    // The process goes as a crash would: nothing more reaches the store.
    first.abandon().await;
    drop(first);

    let second = hibernating(&db)?;
    let unfinished: Vec<String> = second
        .unfinished_runs()
        .await?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    for id in &ids {
        assert!(unfinished.contains(id), "run {id} is not resumable");
        let h = second.resume(id, replier()).await?;
        h.send_message("after")?;
        h.send_message("stop")?;
        let outcome = tokio::time::timeout(WAIT, h.wait()).await??;
        assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
        assert_eq!(
            stored_messages(&*store(&db)?, id)?,
            ["before", "after", "stop"]
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_stops_hibernated_runs() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let runtime = hibernating(&db)?;
    let handle = runtime.start(event_driven(&task), replier()).await?;
    hibernated(&handle).await?;
    runtime.shutdown();
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_store_a_run_never_hibernates() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let runtime =
        runtime_with(Vec::new())?.with_wake_policy(|_: &RunConfig| Ok(Box::new(replier())));
    let handle = runtime.start(event_driven(&task), replier()).await?;
    tokio::time::sleep(NAP * 5).await;
    assert!(!handle.hibernated());
    assert!(handle.actors().is_some());
    handle.abort();
    Ok(())
}

/// Runs `config` on a runtime that never hibernates it, sends it `messages`
/// and waits until its store shows them applied and the run asleep; then the
/// process goes as in a crash. Returns the run's id.
async fn asleep_then_crash(
    db: &std::path::Path,
    mut config: RunConfig,
    messages: &[&str],
) -> Result<String, TestError> {
    config.hibernate_after = None;
    let first = hibernating(db)?;
    let h = first.start(config, replier()).await?;
    for m in messages {
        h.send_message(*m)?;
    }
    let id = h.run_id().to_string();
    let stored = store(db)?;
    let want: Vec<String> = messages.iter().map(|m| m.to_string()).collect();
    until(
        "the messages applied and the run asleep in the store",
        || {
            stored_messages(&*stored, &id).is_ok_and(|m| m == want)
                && stored.load(&id).ok().flatten().is_some_and(|r| {
                    r.checkpoint
                        .is_some_and(|c| c.snapshot.status == RunStatus::Sleeping)
                })
        },
    )
    .await?;
    assert!(h.actors().is_some(), "the first process held it awake");
    first.abandon().await;
    Ok(id)
}

fn dormant() -> ResumeOptions {
    ResumeOptions::default()
        .hibernate_after(Some(NAP))
        .dormant(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_run_resumed_dormant_has_no_actors_and_a_message_wakes_it_once()
-> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?;
    let db = task.root().join("runs.db");
    let id = asleep_then_crash(&db, event_driven(&task), &["before"]).await?;

    let second = hibernating(&db)?;
    let h = second
        .resume_with(&id, Box::new(replier()), dormant())
        .await?;
    assert!(h.hibernated(), "a sleeping run resumed awake");
    assert!(h.actors().is_none(), "a dormant resume built actors");
    assert_eq!(h.budget().await, None);
    let asleep = h.snapshot().await.ok_or("no stored snapshot")?;
    assert_eq!(asleep.inputs, 1);

    h.send_message("after")?;
    until("woken for the message", || {
        h.actors().is_some() || h.outcome().is_some()
    })
    .await?;
    // Applied once, then asleep again: the resume's `hibernate_after` holds.
    let stored = store(&db)?;
    until("answered and hibernated again", || {
        h.hibernated() && stored_messages(&*stored, &id).is_ok_and(|m| m.len() == 2)
    })
    .await?;
    assert_eq!(stored_messages(&*stored, &id)?, ["before", "after"]);

    h.send_message("stop")?;
    let outcome = tokio::time::timeout(WAIT, h.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(stored_messages(&*stored, &id)?, ["before", "after", "stop"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_run_resumed_dormant_still_stops_at_its_deadline() -> Result<(), TestError> {
    let task = TestTask::new("answer messages", &[])?.deadline_ms(800);
    let db = task.root().join("runs.db");
    let id = asleep_then_crash(&db, event_driven(&task), &["before"]).await?;

    let second = hibernating(&db)?;
    let h = second
        .resume_with(&id, Box::new(replier()), dormant())
        .await?;
    assert!(h.hibernated(), "a sleeping run resumed awake");
    // Nothing is sent: its deadline's alarm alone wakes it, and it stops.
    let outcome = tokio::time::timeout(WAIT, h.wait()).await??;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    assert!(
        outcome.budget.elapsed_ms >= 800,
        "stopped before its deadline: {:?}",
        outcome.budget
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_on_a_human_resumes_awake_even_when_dormant_is_asked() -> Result<(), TestError>
{
    let task = TestTask::new("write when asked", &[])?.grant(&["fs.read", "fs.write"]);
    let db = task.root().join("runs.db");
    let mut config = event_driven(&task);
    config.hibernate_after = None;
    config.approval.require = Grants::new(["fs.write"]);
    let first = hibernating(&db)?;
    let h = first.start(config, replier()).await?;
    h.send_message("write")?;
    let parked = async {
        while h.pending_approvals().await.is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    tokio::time::timeout(WAIT, parked).await?;
    let id = h.run_id().to_string();
    first.abandon().await;

    let second = hibernating(&db)?;
    let h = second
        .resume_with(&id, Box::new(replier()), dormant())
        .await?;
    assert!(!h.hibernated(), "a run parked on a human resumed dormant");
    let pending = async {
        loop {
            if let Some(p) = h.pending_approvals().await.first() {
                return p.call.id.clone();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    let call = tokio::time::timeout(WAIT, pending).await?;
    h.approve(&call).await?;
    h.send_message("stop")?;
    let outcome = tokio::time::timeout(WAIT, h.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}
