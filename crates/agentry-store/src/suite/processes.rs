//! A running call's process groups, added to its ledger row in place.

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

    let mut done = ledger("c1", 1, 0, LedgerState::Outcome);
    done.outcome = Some(result("c1", json!({"ok": 1})));
    store
        .commit(&[Write::Ledger {
            run_id: "r1".into(),
            entry: done,
        }])
        .unwrap();
    let stored = place.open().load("r1").unwrap().unwrap();
    assert!(stored.ledger[0].processes.is_empty());
}

for_each_backend!(process_groups_are_added_to_a_ledger_row,);
