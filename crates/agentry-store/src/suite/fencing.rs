//! Fencing: the run's epoch grows with every claim, and a batch opened by a
//! [`Write::Fence`] (or a heartbeat) of an owner that was replaced writes
//! nothing. Written against the `Store` trait only (`commit`, `load`), so
//! the same checks hold for every backend.

use super::*;
use crate::{RunOwner, Store, StoreError};

fn owner(token: &str, pid: u32) -> RunOwner {
    RunOwner {
        token: token.into(),
        host: "node-1".into(),
        machine: "m".into(),
        pid,
        pid_start: Some(7),
        since_ms: 100,
        heartbeat_ms: 100,
        // Ignored by the store: it assigns the epoch.
        epoch: 99,
    }
}

fn claim(token: &str, pid: u32, replaces: Option<&str>) -> Write {
    Write::Claim {
        run_id: "r1".into(),
        owner: owner(token, pid),
        replaces: replaces.map(str::to_string),
    }
}

fn fence(token: &str) -> Write {
    Write::Fence {
        run_id: "r1".into(),
        token: token.into(),
    }
}

fn heartbeat(token: &str, at_ms: u64) -> Write {
    Write::Heartbeat {
        run_id: "r1".into(),
        token: token.into(),
        at_ms,
    }
}

fn release(token: &str) -> Write {
    Write::Release {
        run_id: "r1".into(),
        token: token.into(),
    }
}

fn step(version: u64) -> Write {
    Write::Checkpoint {
        run_id: "r1".into(),
        checkpoint: checkpoint(version, RunStatus::Running, None),
    }
}

fn held(store: &impl Store) -> Option<RunOwner> {
    store.load("r1").unwrap().unwrap().owner
}

fn epoch(store: &impl Store) -> u64 {
    held(store).map(|o| o.epoch).unwrap()
}

/// A store holding run `r1`, claimed by `a` (epoch 1).
fn claimed_by_a<B: Backend>(place: &B) -> B::Store {
    let store = place.open();
    store
        .commit(&[Write::CreateRun(record("r1", 1)), claim("a", 10, None)])
        .unwrap();
    store
}

fn the_epoch_grows_on_every_claim_and_is_kept_across_a_release<B: Backend>() {
    let place = B::place();
    let store = claimed_by_a(&place);
    // The claimer's own epoch (99) is ignored: the first claim is epoch 1.
    assert_eq!(epoch(&store), 1);
    store.commit(&[claim("b", 20, Some("a"))]).unwrap();
    assert_eq!(epoch(&store), 2);
    // A release drops the owner but not the count: the next claim is 3.
    store.commit(&[release("b")]).unwrap();
    assert_eq!(held(&store), None);
    store.commit(&[claim("c", 30, None)]).unwrap();
    assert_eq!(
        held(&store),
        Some(RunOwner {
            epoch: 3,
            ..owner("c", 30)
        })
    );
    // A claim that loses its race raises nothing.
    let err = store.commit(&[claim("d", 40, Some("a"))]).unwrap_err();
    assert!(matches!(err, StoreError::Claimed { .. }), "{err:?}");
    assert_eq!(epoch(&store), 3);
}

fn a_batch_fenced_by_a_replaced_owner_writes_nothing<B: Backend>() {
    let place = B::place();
    let store = claimed_by_a(&place);
    store.commit(&[fence("a"), step(1)]).unwrap();
    store.commit(&[claim("b", 20, Some("a"))]).unwrap();
    // `a` was presumed dead and replaced: its whole batch is refused.
    let err = store
        .commit(&[fence("a"), step(2), append("r1", 0, vec![user("late")])])
        .unwrap_err();
    let StoreError::Fenced {
        run_id,
        epoch: now,
        owner: by,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        (run_id.as_str(), *now, by.as_deref()),
        ("r1", 2, Some("process 20 on host node-1"))
    );
    let message = err.to_string();
    assert!(
        message.contains("\"r1\"")
            && message.contains("process 20 on host node-1")
            && message.contains("epoch 2")
            && message.contains("nothing of this write was committed"),
        "{message}"
    );
    let run = store.load("r1").unwrap().unwrap();
    assert_eq!(run.checkpoint.unwrap().snapshot.version, 1);
    assert!(run.session.is_empty());
    // The new owner's batch goes through.
    store.commit(&[fence("b"), step(3)]).unwrap();
    let run = store.load("r1").unwrap().unwrap();
    assert_eq!(run.checkpoint.unwrap().snapshot.version, 3);
    // Nobody owns a released run: every fence fails, naming no owner.
    store.commit(&[fence("b"), release("b")]).unwrap();
    let err = store.commit(&[fence("b"), step(4)]).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Fenced {
                owner: None,
                epoch: 2,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("nobody owns it now"), "{err}");
    // A fence for a run the store does not hold is NoRun.
    let err = store
        .commit(&[Write::Fence {
            run_id: "nope".into(),
            token: "b".into(),
        }])
        .unwrap_err();
    assert!(matches!(err, StoreError::NoRun { .. }), "{err:?}");
}

fn a_fence_holds_at_its_place_in_the_batch<B: Backend>() {
    let place = B::place();
    let store = claimed_by_a(&place);
    // A take-over and the new owner's first writes in one batch: the fence
    // after the claim passes.
    store
        .commit(&[claim("b", 20, Some("a")), fence("b"), step(1)])
        .unwrap();
    assert_eq!(epoch(&store), 2);
    // A fence before a claim in its own batch sees the owner before it.
    let err = store
        .commit(&[fence("c"), claim("c", 30, Some("b"))])
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    assert_eq!(held(&store).unwrap().token, "b");
}

fn a_replaced_owners_heartbeat_is_fenced_and_its_release_changes_nothing<B: Backend>() {
    let place = B::place();
    let store = claimed_by_a(&place);
    store.commit(&[heartbeat("a", 500)]).unwrap();
    assert_eq!(held(&store).unwrap().heartbeat_ms, 500);
    store.commit(&[claim("b", 20, Some("a"))]).unwrap();
    // The old owner's heartbeat fails the batch, so it notices at its next beat.
    let err = store.commit(&[heartbeat("a", 900), step(1)]).unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Fenced {
                epoch: 2,
                owner: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
    let run = store.load("r1").unwrap().unwrap();
    assert_eq!(run.checkpoint, None);
    assert_eq!(run.owner.as_ref().map(|o| o.heartbeat_ms), Some(100));
    // Its release is a silent no-op: the new owner keeps the run.
    store.commit(&[release("a")]).unwrap();
    assert_eq!(held(&store).unwrap().token, "b");
    // The owner's own heartbeat goes through.
    store.commit(&[heartbeat("b", 950)]).unwrap();
    assert_eq!(held(&store).unwrap().heartbeat_ms, 950);
    // A heartbeat of a run the store does not hold is nothing (a run whose
    // creation is still on its way).
    store
        .commit(&[Write::Heartbeat {
            run_id: "nope".into(),
            token: "b".into(),
            at_ms: 1,
        }])
        .unwrap();
}

for_each_backend!(
    the_epoch_grows_on_every_claim_and_is_kept_across_a_release,
    a_batch_fenced_by_a_replaced_owner_writes_nothing,
    a_fence_holds_at_its_place_in_the_batch,
    a_replaced_owners_heartbeat_is_fenced_and_its_release_changes_nothing,
);
