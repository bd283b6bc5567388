//! Back-pressure: a run's inbox is bounded. Past its capacity a message is
//! refused with a typed busy error, nothing of it kept; a timer that fires
//! into a full inbox waits for a slot.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::protocol::state::SessionEntry;
use agentry::{Decision, Driver, RunStatus, Runtime, RuntimeError, StopReason};
use agentry_test_support::{FnPolicy, TestError, TestTask};
use serde_json::json;

/// The process's resident set, in bytes (`/proc/self/statm`, pages of 4 KiB).
fn resident_bytes() -> Result<u64, TestError> {
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm.split_whitespace().nth(1).ok_or("statm")?.parse()?;
    Ok(pages * 4096)
}

/// The user messages of a session, in order.
fn messages(session: &[SessionEntry]) -> Vec<String> {
    session
        .iter()
        .filter_map(|e| {
            if let SessionEntry::User { text } = e {
                Some(text.clone())
            } else {
                None
            }
        })
        .collect()
}

/// Polls the run's status until `status` (an error after 10 s).
async fn status_until(handle: &agentry::RunHandle, status: RunStatus) -> Result<(), TestError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let snap = handle.snapshot().await.ok_or("no snapshot")?;
        if snap.status == status {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("the run never got {status:?}: {snap:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A policy that replies to every turn, keeping in `seen` the user messages
/// of the last session it was shown (the goal left out).
fn recording(seen: &Arc<Mutex<Vec<String>>>) -> FnPolicy {
    let seen = Arc::clone(seen);
    FnPolicy::new(move |ctx| {
        if let Ok(mut seen) = seen.lock() {
            *seen = messages(ctx.session).split_off(1);
        }
        Decision::Final {
            answer: "read".into(),
        }
    })
}

/// Sends `count` messages of ~1 KiB (100,000 held would be ~100 MiB): the
/// texts taken, and how many were refused busy (each naming the run and
/// `capacity`); any other error fails.
fn send_all(
    handle: &agentry::RunHandle,
    count: usize,
    capacity: usize,
) -> Result<(Vec<String>, usize), TestError> {
    let (mut accepted, mut refused) = (Vec::new(), 0usize);
    let filler = "x".repeat(1_000);
    for i in 0..count {
        let text = format!("m{i:06} {filler}");
        match handle.send_message(text.clone()) {
            Ok(()) => accepted.push(text),
            Err(RuntimeError::InboxFull {
                run_id,
                capacity: told,
            }) => {
                assert_eq!((run_id.as_str(), told), (handle.run_id(), capacity));
                refused += 1;
            }
            Err(other) => return Err(format!("message {i}: {other}").into()),
        }
    }
    Ok((accepted, refused))
}

/// 100,000 messages sent to a paused run whose inbox holds 1,000: the first
/// 1,000 are taken, every other one is refused with `InboxFull` naming the run
/// and the capacity, the process grows by far less than 100,000 messages would
/// take, and after resume the model sees every accepted message once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_takes_messages_up_to_its_inbox_capacity() -> Result<(), TestError> {
    const SENT: usize = 100_000;
    const CAPACITY: usize = 1_000;
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("read the mail", &[])?.trace();
    let mut config = task.config();
    config.driver = Driver::Events;
    config.inbox_capacity = CAPACITY;
    config.events_from_start = false;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handle = runtime.start(config, recording(&seen)).await?;
    status_until(&handle, RunStatus::Sleeping).await?;
    handle.pause()?;
    status_until(&handle, RunStatus::Paused).await?;

    let before = resident_bytes()?;
    let started = std::time::Instant::now();
    let (accepted, refused) = send_all(&handle, SENT, CAPACITY)?;
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "100,000 sends took {:?}",
        started.elapsed()
    );
    assert_eq!(accepted.len() + refused, SENT);
    assert_eq!(
        accepted.len(),
        CAPACITY,
        "a paused run takes up to its capacity"
    );
    let usage = handle.inbox_usage();
    assert_eq!((usage.held, usage.capacity), (CAPACITY, CAPACITY));
    let grown = resident_bytes()?.saturating_sub(before);
    assert!(
        grown < 48 << 20,
        "the process grew by {grown} bytes for {CAPACITY} held messages"
    );
    // An event and an interrupt with a message are data: refused too.
    assert!(matches!(
        handle.inject("webhook", json!({})),
        Err(RuntimeError::InboxFull { .. })
    ));
    assert!(matches!(
        handle.interrupt("stop that"),
        Err(RuntimeError::InboxFull { .. })
    ));
    // Pause, resume and a bare interrupt are control: never refused.
    handle.interrupt_and_pause()?;
    handle.pause()?;
    handle.resume()?;

    status_until(&handle, RunStatus::Sleeping).await?;
    assert_eq!(handle.inbox_usage().held, 0, "the decision took them all");
    handle.abort();
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::UserAbort);
    let shown = seen.lock().map_err(|_| "poisoned")?.clone();
    // Compared whole, reported short: each message is 1 KiB.
    assert!(
        shown == accepted,
        "the model saw {} messages, not the {} accepted, once each in order",
        shown.len(),
        accepted.len()
    );
    let trace = task.read_trace()?;
    let traced: Vec<String> = trace
        .iter()
        .filter(|l| l["kind"] == "input" && l["input"]["type"] == "message")
        .filter_map(|l| l["input"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        traced == accepted,
        "the trace has {} messages, not the {} accepted, once each in order",
        traced.len(),
        accepted.len()
    );
    Ok(())
}

/// A timer that fires while the inbox is full waits for a slot: its event is
/// delivered once a decision has taken what the inbox held, never dropped.
/// Paused tokio time: the timer is past due when the run is looked at.
#[tokio::test(start_paused = true)]
async fn a_timer_firing_into_a_full_inbox_waits_for_a_slot() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("wait for the alarm", &[])?;
    let mut config = task.config();
    config.driver = Driver::Events;
    config.inbox_capacity = 1;
    let policy = FnPolicy::new(|ctx| match ctx.session.last() {
        Some(SessionEntry::Event { name, .. }) if name == "alarm" => Decision::ToolCalls {
            calls: vec![agentry::ToolCall::new(
                "f",
                "task.finish",
                json!({"answer": "alarm"}),
            )],
        },
        _ => Decision::Final {
            answer: "noted".into(),
        },
    });
    let handle = runtime.start(config, policy).await?;
    status_until(&handle, RunStatus::Sleeping).await?;
    handle.pause()?;
    status_until(&handle, RunStatus::Paused).await?;
    handle.send_message("first")?;
    handle.after(Duration::from_millis(10), "alarm", json!({}));
    assert!(matches!(
        handle.send_message("second"),
        Err(RuntimeError::InboxFull { capacity: 1, .. })
    ));
    // A minute past the alarm's time (virtual: the clock is paused).
    tokio::time::sleep(Duration::from_secs(60)).await;
    let snap = handle.snapshot().await.ok_or("no snapshot")?;
    assert_eq!(
        snap.inputs, 2,
        "pause and the message; the alarm waits: {snap:?}"
    );
    assert_eq!(handle.inbox_usage().held, 1);
    handle.resume()?;
    let outcome = tokio::time::timeout(Duration::from_secs(60), handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.answer.as_deref(), Some("alarm"));
    assert_eq!(outcome.state.inputs, 4, "pause, message, resume, alarm");
    Ok(())
}

/// A durable run: a refused input leaves nothing in the store. Of five
/// messages to a paused run whose inbox holds two, the store's session has
/// the two taken, and its inbox nothing left over to deliver on a resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_input_is_not_in_the_store() -> Result<(), TestError> {
    let tmp = tempfile::tempdir()?;
    let store: Arc<dyn agentry::Store> =
        Arc::new(agentry::SqliteStore::open(tmp.path().join("runs.db"))?);
    let runtime =
        Runtime::with_builtins()?.with_store(Arc::clone(&store), agentry::Durability::Strict)?;
    let task = TestTask::new("read the mail", &[])?;
    let mut config = task.config();
    config.driver = Driver::Events;
    config.inbox_capacity = 2;
    let policy = FnPolicy::new(|_| Decision::Final {
        answer: "read".into(),
    });
    let handle = runtime.start(config, policy).await?;
    status_until(&handle, RunStatus::Sleeping).await?;
    handle.pause()?;
    status_until(&handle, RunStatus::Paused).await?;
    let sent: Vec<bool> = (0..5)
        .map(|i| handle.send_message(format!("m{i}")).is_ok())
        .collect();
    assert_eq!(sent, [true, true, false, false, false]);
    handle.abort();
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::UserAbort);

    let stored = store
        .load(handle.run_id())?
        .ok_or("the run is not stored")?;
    let session = messages(&stored.session);
    assert_eq!(
        session,
        ["read the mail", "m0", "m1"],
        "the goal and the two taken"
    );
    assert!(
        stored.inbox.is_empty(),
        "left in the inbox: {:?}",
        stored.inbox
    );
    Ok(())
}
