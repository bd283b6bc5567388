//! The writer and fencing, on a real SQLite file: a run taken over by
//! another process loses its batches and its heartbeats, never the others'.

use std::sync::Arc;

use agentry_protocol::state::{RunSnapshot, RunStatus};
use agentry_store::{Checkpoint, RunRecord, SqliteStore, Store, StoreError, Write};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;

/// A store holding runs `r1` and `r2`, each claimed by this process through
/// a claim registered under writer `key`; then `r1` is taken over by
/// another owner, so its claim here is stale.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    taken: Claim,
    kept: Claim,
}

fn record(run_id: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        task_id: "t".into(),
        parent_id: None,
        created_at_ms: 1,
        deadline_at_ms: None,
        config: json!({}),
        policy: String::new(),
    }
}

fn step(run_id: &str, version: u64) -> Write {
    Write::Checkpoint {
        run_id: run_id.into(),
        checkpoint: Checkpoint {
            snapshot: RunSnapshot {
                version,
                status: RunStatus::Running,
                ..RunSnapshot::default()
            },
            progress: json!({}),
        },
    }
}

fn fixture(key: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
    let taken = Claim::new(&Arc::from("r1"), key);
    let kept = Claim::new(&Arc::from("r2"), key);
    store
        .commit(&[
            Write::CreateRun(record("r1")),
            Write::CreateRun(record("r2")),
            taken.write(None),
            kept.write(None),
        ])
        .unwrap();
    taken.lease().claimed();
    kept.lease().claimed();
    // Another process takes `r1` over (its epoch goes to 2).
    let mut other = taken.owner();
    other.token = "other-node".into();
    other.pid = 1;
    store
        .commit(&[Write::Claim {
            run_id: "r1".into(),
            owner: other,
            replaces: Some(taken.lease().token().to_string()),
        }])
        .unwrap();
    Fixture {
        _dir: dir,
        store,
        taken,
        kept,
    }
}

fn job(writes: Vec<Write>, claim: &Claim) -> (Job, oneshot::Receiver<Result<(), StoreError>>) {
    let (done, rx) = oneshot::channel();
    let job = Job {
        writes,
        redactor: None,
        lease: Some(Arc::clone(claim.lease())),
        done: Some(done),
    };
    (job, rx)
}

fn version(store: &dyn Store, run_id: &str) -> Option<u64> {
    let run = store.load(run_id).unwrap().unwrap();
    run.checkpoint.map(|c| c.snapshot.version)
}

#[test]
fn a_fenced_run_in_a_group_fails_alone_and_the_writer_goes_on() {
    let f = fixture(0xf1);
    let stops = CancellationToken::new();
    f.taken.lease().stops(&stops);
    // One group: batches of the run taken over around one of another run.
    let (a, mut a_rx) = job(vec![step("r1", 1)], &f.taken);
    let (b, mut b_rx) = job(vec![step("r2", 1)], &f.kept);
    let (c, mut c_rx) = job(vec![step("r1", 2)], &f.taken);
    let mut poisoned = None;
    commit_group(&*f.store, vec![a, b, c], &mut poisoned);
    assert!(poisoned.is_none(), "{poisoned:?}");
    assert_eq!(b_rx.try_recv().unwrap(), Ok(()));
    for rx in [&mut a_rx, &mut c_rx] {
        let err = rx.try_recv().unwrap().unwrap_err();
        assert!(
            matches!(&err, StoreError::Fenced { run_id, epoch: 2, .. } if run_id == "r1"),
            "{err:?}"
        );
    }
    assert_eq!(version(&*f.store, "r2"), Some(1));
    assert_eq!(version(&*f.store, "r1"), None);
    // The run was told (its token), and its lease remembers.
    assert!(stops.is_cancelled());
    assert!(f.taken.lease().lost().is_some());

    // Its later batches fail without touching the store: even with its
    // token made the owner again behind the writer's back, nothing lands.
    let mut back = f.taken.owner();
    back.pid = 2;
    f.store
        .commit(&[Write::Claim {
            run_id: "r1".into(),
            owner: back,
            replaces: Some("other-node".into()),
        }])
        .unwrap();
    let (d, mut d_rx) = job(vec![step("r1", 3)], &f.taken);
    let (e, mut e_rx) = job(vec![step("r2", 2)], &f.kept);
    commit_group(&*f.store, vec![d, e], &mut poisoned);
    assert!(matches!(
        d_rx.try_recv().unwrap(),
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(e_rx.try_recv().unwrap(), Ok(()));
    assert_eq!(version(&*f.store, "r1"), None);
    assert_eq!(version(&*f.store, "r2"), Some(2));
    assert!(poisoned.is_none());
}

#[test]
fn a_fenced_heartbeat_loses_only_its_run() {
    let key = 0xf2;
    let f = fixture(key);
    let stops = CancellationToken::new();
    f.taken.lease().stops(&stops);
    let before = f.store.load("r2").unwrap().unwrap().owner.unwrap();
    std::thread::sleep(Duration::from_millis(5));
    heartbeat(&*f.store, &None, key);
    // The run taken over is told and beats no more...
    assert!(stops.is_cancelled());
    assert!(matches!(
        f.taken.lease().lost(),
        Some(StoreError::Fenced { epoch: 2, .. })
    ));
    assert!(
        owner::heartbeats(key)
            .iter()
            .all(|(_, lease)| &**lease.run_id() == "r2")
    );
    // ...while the other run's beat landed, and the new owner's row is untouched.
    let after = f.store.load("r2").unwrap().unwrap().owner.unwrap();
    assert!(after.heartbeat_ms > before.heartbeat_ms, "{after:?}");
    let r1 = f.store.load("r1").unwrap().unwrap().owner.unwrap();
    assert_eq!((r1.token.as_str(), r1.epoch), ("other-node", 2));
}

#[tokio::test]
async fn the_epoch_grows_over_claim_release_and_claim_through_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
    store.commit(&[Write::CreateRun(record("r"))]).unwrap();
    let writer = StoreWriter::start(Arc::clone(&store)).unwrap();
    let epoch = || store.load("r").unwrap().unwrap().owner.map(|o| o.epoch);
    let first = Claim::new(&Arc::from("r"), writer.key());
    writer.claim(&first, None).await.unwrap();
    assert_eq!(epoch(), Some(1));
    writer
        .commit(
            vec![Write::Release {
                run_id: "r".into(),
                token: first.lease().token().to_string(),
            }],
            None,
        )
        .await
        .unwrap();
    assert_eq!(epoch(), None);
    let second = Claim::new(&Arc::from("r"), writer.key());
    writer.claim(&second, None).await.unwrap();
    assert_eq!(epoch(), Some(2));
    // The first claim's token no longer fences anything.
    let err = writer
        .commit(vec![first.lease().fence()], None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Fenced { epoch: 2, .. }),
        "{err:?}"
    );
}
