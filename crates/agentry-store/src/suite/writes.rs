//! Batches: round trips, atomicity, unknown runs, blobs, listing.

use super::*;

/// What [`every_write_kind_round_trips_and_survives_reopen`] writes and then
/// expects back.
struct Fixture {
    child: RunRecord,
    denied: LedgerEntry,
    c1: LedgerEntry,
    c0: LedgerEntry,
    session: Vec<SessionEntry>,
    cp: Checkpoint,
}

fn fixture() -> Fixture {
    let mut child = record("child", 2);
    child.parent_id = Some("r1".into());
    child.deadline_at_ms = None;

    let mut denied = ledger("c2", 1, 1, LedgerState::Denied);
    denied.outcome = Some(ResultEnvelope::failure(
        "c2",
        "read_file",
        ToolError::new(ErrorCode::Eperm, "denied by the user"),
    ));
    let mut c1 = ledger("c1", 1, 0, LedgerState::Outcome);
    c1.outcome = Some(result("c1", json!({"text": "hello"})));
    let c0 = ledger("c0", 0, 3, LedgerState::AwaitingApproval);
    let session = vec![
        user("goal"),
        SessionEntry::Tool {
            result: result("c1", json!({"text": "hello"})).into(),
        },
        SessionEntry::Event {
            name: "webhook".into(),
            payload: json!({"id": 7}),
        },
    ];
    let cp = checkpoint(3, RunStatus::Sleeping, None);
    Fixture {
        child,
        denied,
        c1,
        c0,
        session,
        cp,
    }
}

fn timer(id: &str, due: u64) -> TimerRecord {
    TimerRecord {
        timer_id: id.into(),
        due_at_ms: due,
        name: "tick".into(),
        payload: json!({"n": due}),
    }
}

/// Both runs, the start of a session, an intent and a timer.
fn first_batch(f: &Fixture) -> Vec<Write> {
    vec![
        Write::CreateRun(record("r1", 1)),
        Write::CreateRun(f.child.clone()),
        append(
            "r1",
            0,
            vec![user("goal"), user("wrong, overwritten below")],
        ),
        Write::Ledger {
            run_id: "r1".into(),
            entry: ledger("c1", 1, 0, LedgerState::Intent),
        },
        Write::SetTimer {
            run_id: "r1".into(),
            timer: timer("t-late", 900),
        },
    ]
}

/// Every other kind: the rest of the session, ledger rows, timers set and
/// cleared, checkpoints, inputs queued and dequeued.
fn second_batch(f: &Fixture) -> Vec<Write> {
    vec![
        append("r1", 1, f.session[1..].to_vec()),
        Write::Ledger {
            run_id: "r1".into(),
            entry: f.c1.clone(),
        },
        Write::Ledger {
            run_id: "r1".into(),
            entry: f.denied.clone(),
        },
        Write::Ledger {
            run_id: "r1".into(),
            entry: f.c0.clone(),
        },
        Write::SetTimer {
            run_id: "r1".into(),
            timer: timer("t-early", 100),
        },
        Write::SetTimer {
            run_id: "r1".into(),
            timer: timer("t-gone", 500),
        },
        Write::ClearTimer {
            run_id: "r1".into(),
            timer_id: "t-gone".into(),
        },
        // Clearing a timer that does not exist is fine.
        Write::ClearTimer {
            run_id: "nobody".into(),
            timer_id: "t".into(),
        },
        Write::Checkpoint {
            run_id: "r1".into(),
            checkpoint: checkpoint(2, RunStatus::Running, None),
        },
        Write::Checkpoint {
            run_id: "r1".into(),
            checkpoint: f.cp.clone(),
        },
        Write::Enqueue {
            run_id: "r1".into(),
            seq: 2,
            input: json!({"kind": "message", "text": "second"}),
        },
        Write::Enqueue {
            run_id: "r1".into(),
            seq: 1,
            input: json!({"kind": "message", "text": "first"}),
        },
        Write::Enqueue {
            run_id: "r1".into(),
            seq: 3,
            input: json!({"kind": "pause"}),
        },
        Write::Dequeue {
            run_id: "r1".into(),
            seq: 3,
        },
        // Dequeuing what is not there is fine.
        Write::Dequeue {
            run_id: "nobody".into(),
            seq: 9,
        },
    ]
}

fn every_write_kind_round_trips_and_survives_reopen<B: Backend>() {
    let place = B::place();
    let store = place.open();
    let f = fixture();
    store.commit(&first_batch(&f)).unwrap();
    store.commit(&second_batch(&f)).unwrap();
    // An empty batch is a no-op.
    store.commit(&[]).unwrap();

    let Fixture {
        child,
        denied,
        c1,
        c0,
        session,
        cp,
    } = f;
    let expected = StoredRun {
        record: record("r1", 1),
        checkpoint: Some(cp),
        session,
        ledger: vec![c0, c1, denied],
        timers: vec![timer("t-early", 100), timer("t-late", 900)],
        inbox: vec![
            InboxRecord {
                seq: 1,
                input: json!({"kind": "message", "text": "first"}),
            },
            InboxRecord {
                seq: 2,
                input: json!({"kind": "message", "text": "second"}),
            },
        ],
        owner: None,
    };
    assert_eq!(store.load("r1").unwrap(), Some(expected.clone()));
    let child_run = store.load("child").unwrap().unwrap();
    assert_eq!(child_run.record, child);
    assert_eq!(child_run.checkpoint, None);
    assert!(child_run.session.is_empty() && child_run.ledger.is_empty());
    assert_eq!(store.load("missing").unwrap(), None);
    assert_eq!(store.location(), place.location());
    drop(store);

    // A new handle on the same file sees every committed batch.
    let store = place.open();
    assert_eq!(store.load("r1").unwrap(), Some(expected));
    assert_eq!(store.load("child").unwrap().unwrap().record, child);
}

fn a_failing_write_leaves_nothing_of_its_batch<B: Backend>() {
    let place = B::place();
    let store = place.open();
    store
        .commit(&[
            Write::CreateRun(record("a", 1)),
            append("a", 0, vec![user("first")]),
        ])
        .unwrap();
    let before = store.load("a").unwrap();

    let err = store
        .commit(&[
            Write::CreateRun(record("b", 2)),
            append("a", 1, vec![user("second")]),
            Write::Checkpoint {
                run_id: "a".into(),
                checkpoint: checkpoint(1, RunStatus::Running, None),
            },
            Write::CreateRun(record("a", 3)),
        ])
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Conflict {
            path: place.location(),
            run_id: "a".into()
        }
    );
    assert!(err.to_string().contains(&place.location()));
    assert_eq!(store.load("b").unwrap(), None);
    assert_eq!(store.load("a").unwrap(), before);
    assert_eq!(store.runs().unwrap().len(), 1);
    // The store is still usable after the rollback.
    store
        .commit(&[append("a", 1, vec![user("second")])])
        .unwrap();
    assert_eq!(store.load("a").unwrap().unwrap().session.len(), 2);
}

fn writes_for_an_unknown_run_fail_with_no_run<B: Backend>() {
    let place = B::place();
    let store = place.open();
    store.commit(&[Write::CreateRun(record("a", 1))]).unwrap();
    let ghost = "ghost".to_string();
    let writes = [
        Write::Checkpoint {
            run_id: ghost.clone(),
            checkpoint: checkpoint(1, RunStatus::Running, None),
        },
        append(&ghost, 0, vec![user("x")]),
        append(&ghost, 0, Vec::new()),
        Write::Ledger {
            run_id: ghost.clone(),
            entry: ledger("c", 0, 0, LedgerState::Intent),
        },
        Write::SetTimer {
            run_id: ghost.clone(),
            timer: TimerRecord {
                timer_id: "t".into(),
                due_at_ms: 1,
                name: "tick".into(),
                payload: json!(null),
            },
        },
    ];
    for w in writes {
        // Behind a good write, so the failure must also undo that one.
        let good = append("a", 0, vec![user("kept only if the batch commits")]);
        let err = store.commit(&[good, w.clone()]).unwrap_err();
        assert_eq!(
            err,
            StoreError::NoRun {
                path: place.location(),
                run_id: ghost.clone()
            },
            "{w:?}"
        );
    }
    assert!(store.load("a").unwrap().unwrap().session.is_empty());
    assert_eq!(store.load("ghost").unwrap(), None);
}

fn a_large_output_is_stored_once_by_reference<B: Backend>() {
    let place = B::place();
    let store = place.open();
    let big = json!({"content": "x".repeat(1 << 20)});
    let envelope = result("c1", big);
    let mut entry = ledger("c1", 1, 0, LedgerState::Outcome);
    entry.outcome = Some(envelope.clone());
    let session = vec![
        user("goal"),
        SessionEntry::Tool {
            result: envelope.clone().into(),
        },
    ];
    store
        .commit(&[
            Write::CreateRun(record("r", 1)),
            append("r", 0, session.clone()),
            Write::Ledger {
                run_id: "r".into(),
                entry: entry.clone(),
            },
        ])
        .unwrap();
    // A second run with the same output shares the blob.
    store
        .commit(&[
            Write::CreateRun(record("r2", 2)),
            append("r2", 0, session[1..].to_vec()),
        ])
        .unwrap();

    assert_eq!(place.count("SELECT count(*) FROM blobs"), 1);
    assert!(place.count("SELECT length(bytes) FROM blobs") > 1 << 20);
    assert!(place.count("SELECT max(length(entry)) FROM session") < 1024);
    assert!(place.count("SELECT max(length(row)) FROM ledger") < 1024);

    let run = store.load("r").unwrap().unwrap();
    assert_eq!(run.session, session);
    assert_eq!(run.ledger, vec![entry]);
    assert_eq!(store.load("r2").unwrap().unwrap().session, session[1..]);
}

fn a_small_output_stays_inline<B: Backend>() {
    let place = B::place();
    let store = place.open();
    let limit_sized = json!("y".repeat(INLINE_LIMIT - 2)); // exactly INLINE_LIMIT bytes
    let session = vec![SessionEntry::Tool {
        result: result("c", limit_sized).into(),
    }];
    store
        .commit(&[
            Write::CreateRun(record("r", 1)),
            append("r", 0, session.clone()),
        ])
        .unwrap();
    assert_eq!(place.count("SELECT count(*) FROM blobs"), 0);
    assert_eq!(store.load("r").unwrap().unwrap().session, session);
}

fn runs_lists_newest_first_with_their_status<B: Backend>() {
    let place = B::place();
    let store = place.open();
    assert!(store.runs().unwrap().is_empty());
    let mut child = record("c", 20);
    child.parent_id = Some("b".into());
    store
        .commit(&[
            Write::CreateRun(record("a", 10)),
            Write::CreateRun(record("b", 30)),
            Write::CreateRun(child),
            Write::CreateRun(record("d", 20)),
            Write::Checkpoint {
                run_id: "a".into(),
                checkpoint: checkpoint(7, RunStatus::Stopped, Some(StopReason::MaxSteps)),
            },
            Write::Checkpoint {
                run_id: "b".into(),
                checkpoint: checkpoint(4, RunStatus::AwaitingApproval, None),
            },
        ])
        .unwrap();
    let runs = store.runs().unwrap();
    let ids: Vec<_> = runs.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["b", "c", "d", "a"]);
    let unfinished: Vec<_> = runs
        .iter()
        .filter(|r| r.unfinished())
        .map(|r| r.run_id.as_str())
        .collect();
    assert_eq!(unfinished, ["b", "c", "d"]);

    let a = &runs[3];
    assert_eq!(
        (a.status, a.stop_reason, a.version),
        (RunStatus::Stopped, Some(StopReason::MaxSteps), 7)
    );
    let b = &runs[0];
    assert_eq!(
        (b.status, b.stop_reason, b.version),
        (RunStatus::AwaitingApproval, None, 4)
    );
    let c = &runs[1];
    assert_eq!((c.status, c.version), (RunStatus::Running, 0));
    assert_eq!(c.parent_id.as_deref(), Some("b"));
    assert_eq!(c.task_id, "task-c");
    assert_eq!(c.created_at_ms, 20);
    assert!(c.updated_at_ms > 1_600_000_000_000);
}

fn commits_from_several_threads<B: Backend>() {
    let place = B::place();
    let store = std::sync::Arc::new(place.open());
    let handles: Vec<_> = (0..4u64)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let id = format!("t{t}");
                store.commit(&[Write::CreateRun(record(&id, t))]).unwrap();
                for i in 0..10 {
                    store.commit(&[append(&id, i, vec![user("m")])]).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for t in 0..4 {
        assert_eq!(
            store.load(&format!("t{t}")).unwrap().unwrap().session.len(),
            10
        );
    }
}

/// A group commit carries a run's checkpoint and a call's ledger row several
/// times; the last of each wins, and a superseded write for an unknown run is
/// still refused.
fn the_last_checkpoint_and_ledger_row_of_a_batch_win<B: Backend>() {
    let place = B::place();
    let store = place.open();
    store.commit(&[Write::CreateRun(record("r1", 1))]).unwrap();
    let cp = |version| Write::Checkpoint {
        run_id: "r1".into(),
        checkpoint: checkpoint(version, RunStatus::Running, None),
    };
    let row = |state| Write::Ledger {
        run_id: "r1".into(),
        entry: ledger("c1", 1, 0, state),
    };
    store
        .commit(&[
            cp(1),
            row(LedgerState::Intent),
            cp(2),
            row(LedgerState::AwaitingDecision),
            cp(3),
        ])
        .unwrap();
    let run = store.load("r1").unwrap().unwrap();
    assert_eq!(run.checkpoint.unwrap().snapshot.version, 3);
    assert_eq!(run.ledger.len(), 1);
    assert_eq!(run.ledger[0].state, LedgerState::AwaitingDecision);

    let ghost = Write::Checkpoint {
        run_id: "ghost".into(),
        checkpoint: checkpoint(1, RunStatus::Running, None),
    };
    let err = store.commit(&[ghost.clone(), ghost]).unwrap_err();
    assert!(matches!(err, StoreError::NoRun { .. }), "{err}");
}

fn owner(token: &str, pid: u32) -> crate::RunOwner {
    crate::RunOwner {
        token: token.into(),
        host: "h".into(),
        machine: "m".into(),
        pid,
        pid_start: Some(7),
        since_ms: 100,
        heartbeat_ms: 100,
        epoch: 0,
    }
}

/// A claim is a compare-and-set on the previous owner's token: of two
/// takeovers of the same owner only the first wins, and the loser's batch
/// leaves nothing. Heartbeats and releases touch only the owner they name.
fn claims_are_compare_and_set_and_heartbeats_name_their_owner<B: Backend>() {
    let place = B::place();
    let store = place.open();
    let claim = |token: &str, replaces: Option<&str>| Write::Claim {
        run_id: "r1".into(),
        owner: owner(token, 10),
        replaces: replaces.map(str::to_string),
    };
    store
        .commit(&[Write::CreateRun(record("r1", 1)), claim("a", None)])
        .unwrap();
    assert_eq!(
        store.load("r1").unwrap().unwrap().owner,
        Some(crate::RunOwner {
            epoch: 1,
            ..owner("a", 10)
        })
    );
    // A second "new" claim, and a claim naming a stale owner, both lose.
    for lost in [claim("b", None), claim("b", Some("zzz"))] {
        let err = store
            .commit(&[
                lost,
                Write::Checkpoint {
                    run_id: "r1".into(),
                    checkpoint: checkpoint(9, RunStatus::Running, None),
                },
            ])
            .unwrap_err();
        assert!(matches!(err, StoreError::Claimed { .. }), "{err:?}");
        assert_eq!(store.load("r1").unwrap().unwrap().checkpoint, None);
    }
    store.commit(&[claim("b", Some("a"))]).unwrap();
    // The replaced owner's release changes nothing (its heartbeat is
    // refused: `fencing.rs`).
    store
        .commit(&[Write::Release {
            run_id: "r1".into(),
            token: "a".into(),
        }])
        .unwrap();
    assert_eq!(
        store.load("r1").unwrap().unwrap().owner,
        Some(crate::RunOwner {
            epoch: 2,
            ..owner("b", 10)
        })
    );
    store
        .commit(&[Write::Heartbeat {
            run_id: "r1".into(),
            token: "b".into(),
            at_ms: 999,
        }])
        .unwrap();
    let held = store.load("r1").unwrap().unwrap().owner.unwrap();
    assert_eq!((held.since_ms, held.heartbeat_ms), (100, 999));
    store
        .commit(&[Write::Release {
            run_id: "r1".into(),
            token: "b".into(),
        }])
        .unwrap();
    assert_eq!(store.load("r1").unwrap().unwrap().owner, None);
    // A claim for a run the store does not hold is NoRun.
    let err = store
        .commit(&[Write::Claim {
            run_id: "nope".into(),
            owner: owner("c", 1),
            replaces: None,
        }])
        .unwrap_err();
    assert!(matches!(err, StoreError::NoRun { .. }), "{err:?}");
}

for_each_backend!(
    every_write_kind_round_trips_and_survives_reopen,
    a_failing_write_leaves_nothing_of_its_batch,
    writes_for_an_unknown_run_fail_with_no_run,
    a_large_output_is_stored_once_by_reference,
    a_small_output_stays_inline,
    runs_lists_newest_first_with_their_status,
    commits_from_several_threads,
    the_last_checkpoint_and_ledger_row_of_a_batch_win,
    claims_are_compare_and_set_and_heartbeats_name_their_owner,
);
