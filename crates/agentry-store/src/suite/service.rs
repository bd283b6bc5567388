//! A service's uses of the store: one tenant's runs paged newest first on an
//! index, the runs a retention period has passed, a run's tree deleted.

use super::*;
use crate::{RunKey, RunQuery, StatusFilter, Store, TenantFilter};

/// A root run of `tenant` (and `agent`) created at `at`.
pub(crate) fn served(run_id: &str, at: u64, tenant: Option<&str>, agent: Option<&str>) -> Write {
    let mut r = record(run_id, at);
    let mut serve = serde_json::Map::new();
    if let Some(t) = tenant {
        serve.insert("tenant".into(), json!(t));
    }
    if let Some(a) = agent {
        serve.insert("agent".into(), json!(a));
    }
    r.policy = json!({"policy": "script:/s.json", "serve": serve}).to_string();
    Write::CreateRun(r)
}

fn stop(run_id: &str) -> Write {
    Write::Checkpoint {
        run_id: run_id.into(),
        checkpoint: checkpoint(2, RunStatus::Stopped, Some(StopReason::Done)),
    }
}

fn ids(page: &[crate::ListedRun]) -> Vec<&str> {
    page.iter().map(|r| r.summary.run_id.as_str()).collect()
}

fn a_tenants_runs_are_paged_newest_first_on_an_index<B: Backend>() {
    // Size: one store for the pages, the filters and the default listing.
    let place = B::place();
    let store = place.open();
    let mut writes = Vec::new();
    for i in 0..7u64 {
        let tenant = if i % 2 == 0 { "a" } else { "b" };
        let agent = if i < 4 { "x" } else { "y" };
        writes.push(served(
            &format!("r{i}"),
            1_000 + i,
            Some(tenant),
            Some(agent),
        ));
    }
    // Two runs created in the same millisecond are ordered by id.
    writes.push(served("r6b", 1_006, Some("a"), Some("y")));
    writes.push(served("plain", 2_000, None, None));
    let mut child = record("kid", 3_000);
    child.parent_id = Some("r0".into());
    child.policy = json!({"serve": {"tenant": "a"}}).to_string();
    writes.push(Write::CreateRun(child));
    writes.push(stop("r2"));
    store.commit(&writes).unwrap();

    let of_a = |after: Option<RunKey>, limit| RunQuery {
        tenant: TenantFilter::Of(Some("a".into())),
        after,
        limit,
        ..RunQuery::default()
    };
    let first = store.list(&of_a(None, 2)).unwrap();
    assert_eq!(ids(&first), ["r6b", "r6"]);
    let second = store.list(&of_a(Some(first[1].key()), 2)).unwrap();
    assert_eq!(ids(&second), ["r4", "r2"]);
    let third = store.list(&of_a(Some(second[1].key()), 2)).unwrap();
    assert_eq!(ids(&third), ["r0"], "the child is never listed");
    assert_eq!(third[0].serve_field("agent").as_deref(), Some("x"));

    let stopped = RunQuery {
        status: Some(StatusFilter::Stopped),
        ..of_a(None, 10)
    };
    assert_eq!(ids(&store.list(&stopped).unwrap()), ["r2"]);
    let running_y = RunQuery {
        status: Some(StatusFilter::Unfinished),
        agent: Some("y".into()),
        ..of_a(None, 10)
    };
    assert_eq!(ids(&store.list(&running_y).unwrap()), ["r6b", "r6", "r4"]);
    let nobody = RunQuery {
        tenant: TenantFilter::Of(None),
        limit: 10,
        ..RunQuery::default()
    };
    assert_eq!(ids(&store.list(&nobody).unwrap()), ["plain"]);
    let all = RunQuery {
        limit: 100,
        ..RunQuery::default()
    };
    assert_eq!(store.list(&all).unwrap().len(), 9);

    // The default implementation (every run read) agrees with the index.
    struct Plain<S: Store>(&'static S);
    impl<S: Store> Store for Plain<S> {
        fn commit(&self, w: &[Write]) -> Result<(), StoreError> {
            self.0.commit(w)
        }
        fn load(&self, id: &str) -> Result<Option<crate::StoredRun>, StoreError> {
            self.0.load(id)
        }
        fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
            self.0.runs()
        }
        fn location(&self) -> String {
            self.0.location()
        }
    }
    let leaked: &'static B::Store = Box::leak(Box::new(place.open()));
    let plain = Plain(leaked);
    for query in [of_a(None, 3), stopped, running_y, nobody] {
        assert_eq!(
            ids(&plain.list(&query).unwrap()),
            ids(&store.list(&query).unwrap()),
            "{query:?}"
        );
    }
}

fn deleting_a_run_removes_its_tree_and_only_its_blobs<B: Backend>() {
    // Size: a tree with a row in every table, then what is left of each.
    let place = B::place();
    let store = place.open();
    let big = |tag: &str| {
        result(
            "c1",
            json!({"content": format!("{tag}{}", "x".repeat(INLINE_LIMIT))}),
        )
    };
    let mut kid = record("kid", 1_001);
    kid.parent_id = Some("root".into());
    let mut grandkid = record("grandkid", 1_002);
    grandkid.parent_id = Some("kid".into());
    let mut row = ledger("c1", 1, 0, LedgerState::Outcome);
    row.outcome = Some(big("own"));
    store
        .commit(&[
            Write::CreateRun(record("root", 1_000)),
            Write::CreateRun(kid),
            Write::CreateRun(grandkid),
            Write::CreateRun(record("other", 1_003)),
            append(
                "root",
                0,
                vec![
                    user("goal"),
                    SessionEntry::Tool {
                        result: big("shared").into(),
                    },
                ],
            ),
            append(
                "grandkid",
                0,
                vec![SessionEntry::Tool {
                    result: big("own").into(),
                }],
            ),
            append(
                "other",
                0,
                vec![SessionEntry::Tool {
                    result: big("shared").into(),
                }],
            ),
            Write::Ledger {
                run_id: "kid".into(),
                entry: row,
            },
            Write::SetTimer {
                run_id: "root".into(),
                timer: crate::TimerRecord {
                    timer_id: "t".into(),
                    due_at_ms: 9,
                    name: "tick".into(),
                    payload: json!({}),
                },
            },
            Write::Enqueue {
                run_id: "kid".into(),
                seq: 1,
                input: json!({"m": 1}),
            },
            stop("root"),
        ])
        .unwrap();
    assert_eq!(place.count("SELECT count(*) FROM blobs"), 2);

    let removed = store.delete_run("root").unwrap();
    let removed: Vec<&str> = removed.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(removed, ["root", "kid", "grandkid"]);
    for table in ["runs", "session", "ledger", "timers", "inbox", "owners"] {
        assert_eq!(
            place.count(&format!(
                "SELECT count(*) FROM {table} WHERE run_id <> 'other'"
            )),
            0,
            "{table}"
        );
    }
    // The blob `other` shares stays, the one only the tree held goes.
    assert_eq!(place.count("SELECT count(*) FROM blobs"), 1);
    let other = store.load("other").unwrap().unwrap();
    assert_eq!(other.session.len(), 1);
    assert!(store.delete_run("root").unwrap().is_empty(), "gone is gone");
}

fn stopped_before_finds_old_stopped_roots_only<B: Backend>() {
    let place = B::place();
    let store = place.open();
    store
        .commit(&[
            Write::CreateRun(record("done", 1)),
            Write::CreateRun(record("live", 2)),
            stop("done"),
        ])
        .unwrap();
    let now = agentry_protocol::now_millis();
    assert!(store.stopped_before(now - 60_000, 10).unwrap().is_empty());
    let old: Vec<String> = store
        .stopped_before(now + 1_000, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(old, ["done"]);
}

for_each_backend!(
    a_tenants_runs_are_paged_newest_first_on_an_index,
    deleting_a_run_removes_its_tree_and_only_its_blobs,
    stopped_before_finds_old_stopped_roots_only,
);
