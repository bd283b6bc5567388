//! A running call's process groups and remote task, added to its ledger
//! row in place.

use super::*;

/// A call's process groups are added to its ledger row in place as they
/// start (in order), and a row written over later (its outcome) drops them.
fn process_groups_are_added_to_a_ledger_row<B: Backend>() {
    let place = B::place();
    let store = place.open();
    let group = |pgid| agentry_protocol::ProcessGroupRecord {
        pgid,
        leader_start: Some(7),
        spawn_id: format!("1-{pgid}"),
    };
    let process = |pgid| Write::LedgerProcess {
        run_id: "r1".into(),
        call_id: "c1".into(),
        group: group(pgid),
    };
    store
        .commit(&[
            Write::CreateRun(record("r1", 1)),
            Write::Ledger {
                run_id: "r1".into(),
                entry: ledger("c1", 1, 0, LedgerState::Intent),
            },
            process(41),
        ])
        .unwrap();
    store.commit(&[process(42)]).unwrap();
    // A group of a call with no row yet is nothing (and not an error).
    store
        .commit(&[Write::LedgerProcess {
            run_id: "r1".into(),
            call_id: "none".into(),
            group: group(43),
        }])
        .unwrap();

    let stored = place.open().load("r1").unwrap().unwrap();
    assert_eq!(stored.ledger.len(), 1);
    assert_eq!(stored.ledger[0].processes, [group(41), group(42)]);
    assert_eq!(stored.ledger[0].state, LedgerState::Intent);

    write_outcome(&store, "r1", "c1");
    let stored = place.open().load("r1").unwrap().unwrap();
    assert!(stored.ledger[0].processes.is_empty());
}

/// A call's remote task is set on its ledger row in place (a later one
/// replaces it), kept with the intent across a reopen, and a row written
/// over later (its outcome) drops it.
fn a_remote_task_is_set_on_a_ledger_row<B: Backend>() {
    let place = B::place();
    let store = place.open();
    let remote = |id: &str| agentry_protocol::RemoteRef {
        kind: "a2a".into(),
        id: id.into(),
        context: Some("ctx-1".into()),
    };
    let set = |call_id: &str, id: &str| Write::LedgerRemote {
        run_id: "r1".into(),
        call_id: call_id.into(),
        remote: remote(id),
    };
    store
        .commit(&[
            Write::CreateRun(record("r1", 1)),
            Write::Ledger {
                run_id: "r1".into(),
                entry: ledger("c1", 1, 0, LedgerState::Intent),
            },
            set("c1", "task-1"),
        ])
        .unwrap();
    // A call with no row yet is nothing (and not an error).
    store.commit(&[set("none", "task-9")]).unwrap();
    let stored = place.open().load("r1").unwrap().unwrap();
    assert_eq!(stored.ledger.len(), 1);
    assert_eq!(stored.ledger[0].remote, Some(Box::new(remote("task-1"))));
    assert_eq!(stored.ledger[0].state, LedgerState::Intent);

    store.commit(&[set("c1", "task-2")]).unwrap();
    let stored = place.open().load("r1").unwrap().unwrap();
    assert_eq!(stored.ledger[0].remote, Some(Box::new(remote("task-2"))));

    write_outcome(&store, "r1", "c1");
    let stored = place.open().load("r1").unwrap().unwrap();
    assert_eq!(stored.ledger[0].remote, None);
}

for_each_backend!(
    process_groups_are_added_to_a_ledger_row,
    a_remote_task_is_set_on_a_ledger_row,
);

/// Writes call `call_id`'s outcome over its ledger row.
fn write_outcome(store: &dyn Store, run_id: &str, call_id: &str) {
    let mut done = ledger(call_id, 1, 0, LedgerState::Outcome);
    done.outcome = Some(result(call_id, json!({"ok": 1})));
    store
        .commit(&[Write::Ledger {
            run_id: run_id.into(),
            entry: done,
        }])
        .unwrap();
}
