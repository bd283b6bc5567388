//! The state keeper serializes updates: many concurrent writers, none lost.

use agentry_test_support::ask_actor as ask;
use std::collections::BTreeSet;

use agentry::protocol::state::{ControlState, RunSnapshot, SessionEntry, TaskState};
use agentry::runtime::state::{Applied, RunState, StateKeeper, StateMsg, StateUpdate};
use agentry_test_support::TestError;
use ractor::{Actor, ActorRef};

const WRITERS: usize = 32;
const PER_WRITER: usize = 40;

fn text(writer: usize, i: usize) -> String {
    format!("w{writer:02}-m{i:03}")
}

/// One writer: alternates fire-and-forget updates with acknowledged ones and
/// returns the versions it was told.
async fn write_all(keeper: ActorRef<StateMsg>, writer: usize) -> Result<Vec<u64>, TestError> {
    let mut versions = Vec::new();
    for i in 0..PER_WRITER {
        let update = StateUpdate::UserMessage {
            text: text(writer, i),
        };
        if i % 2 == 0 {
            keeper
                .cast(StateMsg::Apply(update, None))
                .map_err(|e| format!("cast failed: {e}"))?;
        } else {
            let applied: Applied = ask(&keeper, |r| StateMsg::Apply(update, Some(r))).await??;
            versions.push(applied.version);
        }
        tokio::task::yield_now().await;
    }
    Ok(versions)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_are_applied_one_at_a_time_and_none_is_lost() -> Result<(), TestError> {
    let initial = RunState::new(
        TaskState {
            task_id: "serialize".into(),
            goal: "goal".into(),
            ..TaskState::default()
        },
        ControlState::default(),
    );
    let (keeper, keeper_task) = Actor::spawn(None, StateKeeper, initial)
        .await
        .map_err(|e| format!("spawn failed: {e}"))?;

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write_all(keeper.clone(), w)))
        .collect();
    let mut acknowledged = Vec::new();
    for w in writers {
        acknowledged.extend(w.await??);
    }

    let total = (WRITERS * PER_WRITER) as u64;
    let snapshot: RunSnapshot = ask(&keeper, StateMsg::Snapshot).await?;
    assert_eq!(snapshot.version, total, "one version per update");
    assert_eq!(
        snapshot.session_len,
        total + 1,
        "the goal plus every message"
    );

    // Every acknowledged update got its own version: no two were applied as one.
    let distinct: BTreeSet<u64> = acknowledged.iter().copied().collect();
    assert_eq!(distinct.len(), acknowledged.len());
    assert!(distinct.iter().all(|v| (1..=total).contains(v)));

    // Every message is present exactly once, and each writer's messages are in the
    // order it sent them.
    let session: Vec<SessionEntry> = ask(&keeper, |r| StateMsg::Session(0, r)).await?;
    let texts: Vec<String> = session
        .iter()
        .skip(1)
        .filter_map(|e| match e {
            SessionEntry::User { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(texts.len() as u64, total);
    let unique: BTreeSet<&String> = texts.iter().collect();
    let expected: BTreeSet<String> = (0..WRITERS)
        .flat_map(|w| (0..PER_WRITER).map(move |i| text(w, i)))
        .collect();
    assert_eq!(unique, expected.iter().collect());
    for w in 0..WRITERS {
        let prefix = format!("w{w:02}-");
        let mine: Vec<&String> = texts.iter().filter(|t| t.starts_with(&prefix)).collect();
        let sent: Vec<String> = (0..PER_WRITER).map(|i| text(w, i)).collect();
        assert_eq!(
            mine,
            sent.iter().collect::<Vec<_>>(),
            "writer {w} out of order"
        );
    }

    keeper.stop(None);
    keeper_task.await?;
    Ok(())
}

/// `Session(from)` returns exactly the entries from that index on, so the conductor
/// can feed the policy only what is new.
#[tokio::test]
async fn session_reads_from_an_index() -> Result<(), TestError> {
    let initial = RunState::new(
        TaskState {
            goal: "goal".into(),
            ..TaskState::default()
        },
        ControlState::default(),
    );
    let (keeper, keeper_task) = Actor::spawn(None, StateKeeper, initial)
        .await
        .map_err(|e| format!("spawn failed: {e}"))?;
    for i in 0..3 {
        let update = StateUpdate::UserMessage {
            text: format!("m{i}"),
        };
        let _: Applied = ask(&keeper, |r| StateMsg::Apply(update, Some(r))).await??;
    }
    let tail: Vec<SessionEntry> = ask(&keeper, |r| StateMsg::Session(2, r)).await?;
    assert_eq!(
        tail,
        vec![
            SessionEntry::User { text: "m1".into() },
            SessionEntry::User { text: "m2".into() },
        ]
    );
    let past_end: Vec<SessionEntry> = ask(&keeper, |r| StateMsg::Session(99, r)).await?;
    assert!(past_end.is_empty());
    keeper.stop(None);
    keeper_task.await?;
    Ok(())
}
