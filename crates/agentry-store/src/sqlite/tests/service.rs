//! The SQLite store's own side of a service's listing: it walks the
//! tenant's expression index in order (the listing's behaviour, shared with
//! every backend, is tested in `crate::suite::service`).

use super::*;
use crate::suite::service::served;

#[test]
fn a_tenants_page_walks_the_tenant_index_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&db_path(&dir));
    store
        .commit(&[
            served("a1", 1, Some("a"), None),
            served("b1", 2, Some("b"), Some("y")),
        ])
        .unwrap();
    // SQLite walks the tenant's index, not the table.
    let plan: Vec<String> = {
        let conn = store.conn();
        let mut stmt = conn
            .prepare(concat!(
                "EXPLAIN QUERY PLAN SELECT run_id FROM runs WHERE parent_id IS NULL AND ",
                super::super::schema::tenant_expr!(),
                " IS 'a' ORDER BY created_at_ms DESC, run_id DESC LIMIT 5"
            ))
            .unwrap();
        stmt.query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert!(
        plan.iter().any(|step| step.contains("runs_by_tenant"))
            && !plan.iter().any(|s| s.contains("TEMP B-TREE")),
        "{plan:?}"
    );
}
