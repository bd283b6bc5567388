//! The state keeper serializes updates: many concurrent writers, none lost;
//! and a human's answer for a call nobody parked is refused by name.

use std::collections::BTreeSet;

use agentry_protocol::state::{ControlState, RunSnapshot, SessionEntry, Settlement, TaskState};
use agentry_protocol::trace::RunInput;
use ractor::{Actor, ActorRef};

use super::msg::Waiting;
use super::*;
use crate::ask::ask;

const WRITERS: usize = 32;
const PER_WRITER: usize = 40;

fn text(writer: usize, i: usize) -> String {
    format!("w{writer:02}-m{i:03}")
}

fn initial() -> RunState {
    RunState::new(
        TaskState {
            task_id: "serialize".into(),
            goal: "goal".into(),
            ..TaskState::default()
        },
        ControlState::default(),
    )
}

/// What a user's message is when the conductor applies it.
fn message(text: String) -> StateUpdate {
    StateUpdate::Input(RunInput::Message { text })
}

/// One writer: alternates fire-and-forget updates with acknowledged ones and
/// returns where the acknowledged ones landed.
async fn write_all(keeper: ActorRef<StateMsg>, writer: usize) -> Vec<AppliedAt> {
    let mut landed = Vec::new();
    for i in 0..PER_WRITER {
        let update = message(text(writer, i));
        if i % 2 == 0 {
            keeper.cast(StateMsg::Apply(update, None)).unwrap();
        } else {
            let applied = ask(&keeper, |r| StateMsg::Apply(update, Some(r)))
                .await
                .unwrap()
                .unwrap();
            landed.push(applied.at);
        }
        tokio::task::yield_now().await;
    }
    landed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_are_applied_one_at_a_time_and_none_is_lost() {
    let (keeper, keeper_task) = Actor::spawn(None, StateKeeper, Box::new(initial()))
        .await
        .unwrap();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(write_all(keeper.clone(), w)))
        .collect();
    let mut acknowledged = Vec::new();
    for w in writers {
        let landed = w.await.unwrap();
        // Each writer's updates are applied in the order it sent them.
        assert!(
            landed.windows(2).all(|p| p[0].input_seq < p[1].input_seq),
            "a writer's inputs out of order: {landed:?}"
        );
        acknowledged.extend(landed);
    }

    let total = (WRITERS * PER_WRITER) as u64;
    let snapshot: RunSnapshot = ask(&keeper, StateMsg::Snapshot).await.unwrap();
    assert_eq!(snapshot.version, total, "one version per update");
    assert_eq!(snapshot.inputs, total, "one sequence number per input");
    assert_eq!(
        snapshot.session_len,
        total + 1,
        "the goal plus every message"
    );

    // Every acknowledged update got its own number, and its version is its
    // number (only inputs were applied): no two were applied as one.
    let distinct: BTreeSet<u64> = acknowledged.iter().map(|at| at.input_seq).collect();
    assert_eq!(distinct.len(), acknowledged.len());
    assert!(distinct.iter().all(|seq| (1..=total).contains(seq)));
    assert!(
        acknowledged
            .iter()
            .all(|at| at.input_seq == at.state_version)
    );

    keeper.stop(None);
    keeper_task.await.unwrap();
}

/// An input is numbered and joins the session, in the order applied.
#[test]
fn inputs_are_numbered_and_join_the_session_in_order() {
    let mut state = initial();
    for i in 0..3 {
        let applied = state.apply(message(format!("m{i}")));
        assert_eq!(
            applied.at,
            AppliedAt {
                input_seq: i + 1,
                state_version: i + 1,
            }
        );
    }
    let applied = state.apply(StateUpdate::TicksSkipped(2));
    assert_eq!(applied.at.input_seq, 3, "a skipped tick is no input");
    assert_eq!(applied.at.state_version, 4);
    assert_eq!(
        state.session()[2..],
        [
            SessionEntry::User { text: "m1".into() },
            SessionEntry::User { text: "m2".into() },
        ]
    );
}

/// A human's answer for a call nobody parked is refused, naming the call and
/// what it was expected to wait for (the run handle shows this text).
#[tokio::test]
async fn an_answer_for_no_parked_call_is_refused_by_name() {
    let (keeper, keeper_task) = Actor::spawn(None, StateKeeper, Box::new(initial()))
        .await
        .unwrap();
    let decision = ApprovalDecision {
        approved: true,
        reason: None,
        applied: AppliedAt::default(),
    };
    let resolved = ask(&keeper, |reply| StateMsg::Resolve {
        tool_call_id: "c1".into(),
        decision,
        reply,
    })
    .await
    .unwrap();
    let refused = resolved.unwrap_err();
    assert_eq!(
        refused,
        HumanInputError::NotWaiting {
            tool_call_id: "c1".into(),
            waiting_for: Waiting::Approval,
        }
    );
    assert_eq!(
        refused.to_string(),
        "no call \"c1\" is waiting for approval"
    );
    let settled = ask(&keeper, |reply| StateMsg::Settle {
        tool_call_id: "c2".into(),
        settlement: Settlement::Skip,
        reply,
    })
    .await
    .unwrap();
    assert_eq!(
        settled.unwrap_err().to_string(),
        "no call \"c2\" is waiting for a decision"
    );
    let snapshot: RunSnapshot = ask(&keeper, StateMsg::Snapshot).await.unwrap();
    assert_eq!(snapshot.version, 0, "a refused answer changes nothing");
    keeper.stop(None);
    keeper_task.await.unwrap();
}
