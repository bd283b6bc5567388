//! What only the Postgres store has: reaching (or not) its server, its
//! schema version, connections lost and opened again, commits applied once
//! across a lost connection, claims raced by several connections, and a
//! server restarted under a stream of commits. The behaviour every backend
//! shares is `crate::suite`'s.

use std::sync::Arc;

use super::*;
use crate::suite::{Backend, PostgresPlace, append, record, user};

const NEEDS_PG: &str = "needs PostgreSQL";

#[test]
fn an_unreachable_server_is_an_open_error_naming_it_without_the_password() {
    // Port 1 on loopback: nothing listens there.
    let err = PostgresStore::connect("postgres://agentry:s3cret@127.0.0.1:1/runs?sslmode=disable")
        .unwrap_err();
    let StoreError::Open { path, message } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(path, "postgres://agentry@127.0.0.1:1/runs");
    assert!(!message.is_empty());
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err}");
}

#[test]
fn a_malformed_url_is_an_open_error() {
    let err = PostgresStore::connect("postgres://agentry:pw@127.0.0.1:notaport/db").unwrap_err();
    assert!(
        matches!(&err, StoreError::Open { message, .. } if message.contains("not a valid PostgreSQL URL")),
        "{err:?}"
    );
    assert!(!err.to_string().contains(":pw@"), "{err}");
}

#[test]
fn location_hides_the_password_and_the_query() {
    assert_eq!(
        shown("postgresql://u:p%40ss@db.example:5433/agentry?password=x&sslmode=require"),
        "postgresql://u@db.example:5433/agentry"
    );
    assert_eq!(shown("postgres://localhost"), "postgres://localhost");
    assert_eq!(shown("not a url"), "a PostgreSQL URL");
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_newer_schema_is_refused_and_left_untouched() {
    let place = PostgresPlace::place();
    drop(place.open());
    let mut admin = postgres::Client::connect(&place.url, postgres::NoTls).expect(NEEDS_PG);
    admin
        .execute("UPDATE agentry.schema_version SET version = 99", &[])
        .unwrap();
    let err = PostgresStore::connect(&place.url).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 99, supported, .. } if supported == POSTGRES_SCHEMA_VERSION),
        "{err:?}"
    );
    assert_eq!(place.count("SELECT version FROM schema_version"), 99);
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_commit_retried_after_its_connection_was_lost_applies_once() {
    let place = PostgresPlace::place();
    drop(place.open());
    let mut client = postgres::Client::connect(&place.url, postgres::NoTls).expect(NEEDS_PG);
    let mut statements = conn::Statements::default();
    let batch = [
        Write::CreateRun(record("r1", 1)),
        append("r1", 0, vec![user("hi")]),
    ];
    let first = conn::Attempt::default();
    commit_once(&mut client, &mut statements, "pg", "id-1", &batch, first).unwrap();
    // The connection dropped after COMMIT reached the server: the retry
    // finds its id and applies nothing (a second CreateRun would conflict).
    let retry = conn::Attempt { lost_before: true };
    commit_once(&mut client, &mut statements, "pg", "id-1", &batch, retry).unwrap();
    assert_eq!(place.count("SELECT count(*) FROM session"), 1);
    // A retry whose first attempt never landed applies the batch.
    let next = [append("r1", 1, vec![user("again")])];
    commit_once(&mut client, &mut statements, "pg", "id-2", &next, retry).unwrap();
    assert_eq!(place.count("SELECT count(*) FROM session"), 2);
    assert_eq!(place.count("SELECT count(*) FROM commits"), 2);
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_killed_connection_is_opened_again_and_the_work_goes_on() {
    let place = PostgresPlace::place();
    let store = place.open();
    store.commit(&[Write::CreateRun(record("r1", 1))]).unwrap();
    let mut admin = postgres::Client::connect(&place.url, postgres::NoTls).expect(NEEDS_PG);
    let killed = admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'agentry' AND datname = current_database()",
            &[],
        )
        .unwrap();
    assert_eq!(killed, 2, "the store's writer and reader connections");
    store
        .commit(&[append("r1", 0, vec![user("after")])])
        .unwrap();
    assert_eq!(
        store.load("r1").unwrap().unwrap().session,
        vec![user("after")]
    );
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn of_several_nodes_claiming_one_run_at_once_exactly_one_wins() {
    let place = PostgresPlace::place();
    place
        .open()
        .commit(&[Write::CreateRun(record("r1", 1))])
        .unwrap();
    let stores: Vec<Arc<PostgresStore>> = (0..6).map(|_| Arc::new(place.open())).collect();
    let barrier = Arc::new(std::sync::Barrier::new(stores.len()));
    let threads: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(i, store)| {
            let (store, barrier) = (store.clone(), barrier.clone());
            std::thread::spawn(move || {
                let owner = crate::RunOwner {
                    token: format!("node-{i}"),
                    host: format!("node-{i}"),
                    machine: format!("m{i}"),
                    pid: 1,
                    pid_start: None,
                    since_ms: 1,
                    heartbeat_ms: 1,
                    epoch: 0,
                };
                barrier.wait();
                store.commit(&[Write::Claim {
                    run_id: "r1".into(),
                    owner,
                    replaces: None,
                }])
            })
        })
        .collect();
    // Every thread is started before any is joined: the barrier needs them all.
    let claims: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let won = claims.iter().filter(|c| c.is_ok()).count();
    assert_eq!(won, 1, "{claims:?}");
    assert!(
        claims
            .iter()
            .all(|c| matches!(c, Ok(()) | Err(StoreError::Claimed { .. }))),
        "{claims:?}"
    );
    let winner = place.open().load("r1").unwrap().unwrap().owner.unwrap();
    let expected = claims.iter().position(Result::is_ok).unwrap();
    assert_eq!(winner.token, format!("node-{expected}"));
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn commits_wait_through_a_server_restart_and_each_lands_once() {
    let server = agentry_test_postgres::PgServer::start();
    let url = server.database();
    let store = Arc::new(PostgresStore::connect(&url).unwrap());
    store.commit(&[Write::CreateRun(record("r1", 1))]).unwrap();
    const COMMITS: u64 = 200;
    let writer = {
        let store = store.clone();
        std::thread::spawn(move || {
            for i in 0..COMMITS {
                // A run created twice would be a conflict: each lands once.
                store.commit(&[Write::CreateRun(record(&format!("c{i}"), i))])?;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok::<_, StoreError>(())
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(200));
    server.stop();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.start_again();
    writer.join().unwrap().unwrap();
    let runs = store.runs().unwrap();
    assert_eq!(runs.len() as u64, COMMITS + 1);
}

/// A service's own tables: made once by several nodes at once, written in
/// transactions that survive a killed connection.
#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_database_makes_its_tables_once_and_its_transactions_survive_a_killed_connection() {
    let place = PostgresPlace::place();
    let ddl = "CREATE TABLE IF NOT EXISTS agentry.test_counter (n BIGINT NOT NULL)";
    let nodes: Vec<_> = (0..4)
        .map(|_| {
            let url = place.url.clone();
            std::thread::spawn(move || {
                let db = Database::connect(&url).expect(NEEDS_PG);
                db.ensure(ddl).unwrap();
                db
            })
        })
        .collect();
    let dbs: Vec<Database> = nodes.into_iter().map(|n| n.join().unwrap()).collect();
    let db = &dbs[0];
    db.transaction(|tx| tx.execute("INSERT INTO agentry.test_counter VALUES (1)", &[]))
        .unwrap();
    let mut admin = postgres::Client::connect(&place.url, postgres::NoTls).expect(NEEDS_PG);
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = 'agentry' AND datname = current_database()
               AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    let total: i64 = db
        .transaction(|tx| {
            tx.execute("INSERT INTO agentry.test_counter VALUES (2)", &[])?;
            Ok(tx
                .query_one("SELECT sum(n)::BIGINT FROM agentry.test_counter", &[])?
                .get(0))
        })
        .unwrap();
    assert_eq!(total, 3);
    let err = db
        .transaction(|tx| tx.execute("INSERT INTO agentry.no_such_table VALUES (1)", &[]))
        .unwrap_err();
    assert!(err.to_string().contains("no_such_table"), "{err}");
}

/// A listener hands over each notification, and says so when its connection
/// was lost and is back (what was sent meanwhile is gone).
#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_listener_gets_notifications_and_hears_of_a_reconnect() {
    let place = PostgresPlace::place();
    let db = Database::connect(&place.url).expect(NEEDS_PG);
    assert!(db.listen("Bad-Name", |_| {}).is_err());
    let (tx, rx) = std::sync::mpsc::channel();
    let listener = db
        .listen("agentry_test", move |notice| {
            let _ = tx.send(notice);
        })
        .unwrap();
    let wait = std::time::Duration::from_secs(20);
    db.transaction(|tx| tx.execute("SELECT pg_notify('agentry_test', 'one')", &[]))
        .unwrap();
    assert_eq!(
        rx.recv_timeout(wait).unwrap(),
        Notice::Payload("one".into())
    );
    let mut admin = postgres::Client::connect(&place.url, postgres::NoTls).expect(NEEDS_PG);
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE query LIKE 'LISTEN%' AND datname = current_database()
               AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    assert_eq!(rx.recv_timeout(wait).unwrap(), Notice::Reconnected);
    db.transaction(|tx| tx.execute("SELECT pg_notify('agentry_test', 'two')", &[]))
        .unwrap();
    assert_eq!(
        rx.recv_timeout(wait).unwrap(),
        Notice::Payload("two".into())
    );
    drop(listener);
}
