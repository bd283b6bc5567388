//! Row decoding against damage: any value of any type written into any
//! column of a real store file (text, numbers, blobs, bytes that are not
//! UTF-8, a row's JSON cut anywhere or with a member changed or removed) is
//! read back by `load` and `runs` without a panic, and a failure is
//! [`StoreError::Corrupt`] naming the file.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rusqlite::types::Value as Sql;
use serde_json::Value;

use super::*;
use crate::{RunOwner, Store, StoreError};

/// The tables a run's load and the run listing read.
const TABLES: &[&str] = &[
    "runs", "session", "ledger", "timers", "inbox", "owners", "blobs",
];

/// A store holding one run with a row in every table (a large result kept as
/// a blob too), and every (table, column) of it.
struct Fixture {
    _dir: tempfile::TempDir,
    store: SqliteStore,
    columns: Vec<(String, String)>,
}

/// One run with a row in every table.
fn seed() -> Vec<Write> {
    let big = result("c1", json!({"content": "x".repeat(INLINE_LIMIT + 10)}));
    let mut row = ledger("c1", 1, 0, LedgerState::Outcome);
    row.outcome = Some(big.clone());
    let owner = RunOwner {
        token: "t".into(),
        host: "h".into(),
        machine: "m".into(),
        pid: 42,
        pid_start: Some(7),
        since_ms: 100,
        heartbeat_ms: 100,
        epoch: 0,
    };
    let calls = vec![ToolCall::new("c1", "read_file", json!({"path": "a.txt"}))];
    vec![
        Write::CreateRun(record("r1", 1_000)),
        Write::Checkpoint {
            run_id: "r1".into(),
            checkpoint: checkpoint(3, RunStatus::Running, Some(StopReason::Done)),
        },
        append(
            "r1",
            0,
            vec![
                user("goal"),
                SessionEntry::Assistant {
                    step: 1,
                    decision: agentry_protocol::decision::Decision::ToolCalls { calls }.into(),
                },
                SessionEntry::Tool { result: big.into() },
                SessionEntry::Tool {
                    result: result("c2", json!({"n": 1})).into(),
                },
            ],
        ),
        Write::Ledger {
            run_id: "r1".into(),
            entry: row,
        },
        Write::SetTimer {
            run_id: "r1".into(),
            timer: TimerRecord {
                timer_id: "t1".into(),
                due_at_ms: 5_000,
                name: "tick".into(),
                payload: json!({"n": 1}),
            },
        },
        Write::Enqueue {
            run_id: "r1".into(),
            seq: 1,
            input: json!({"message": "hi"}),
        },
        Write::Claim {
            run_id: "r1".into(),
            owner,
            replaces: None,
        },
    ]
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&db_path(&dir));
    store.commit(&seed()).unwrap();
    let columns = {
        let conn = store.conn();
        // Durability is not under test here: no fsync per damaged value.
        conn.pragma_update(None, "synchronous", "OFF").unwrap();
        // Room for every statement below, per (table, column), prepared once.
        conn.set_prepared_statement_cache_capacity(512);
        let mut columns = Vec::new();
        for table in TABLES {
            let mut stmt = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .unwrap();
            let names = stmt.query_map([], |r| r.get::<_, String>(0)).unwrap();
            columns.extend(names.map(|n| (table.to_string(), n.unwrap())));
        }
        columns
    };
    assert!(store.load("r1").unwrap().is_some());
    Fixture {
        _dir: dir,
        store,
        columns,
    }
}

/// A damaged value.
#[derive(Debug, Clone)]
enum Damage {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    /// Bytes stored as TEXT, UTF-8 or not.
    TextBytes(Vec<u8>),
    Blob(Vec<u8>),
    /// The stored text cut after this many bytes (modulo its length).
    Cut(usize),
    /// In the stored JSON, member `k` (modulo their number, depth first)
    /// replaced by this value, or removed (`None`).
    Member(usize, Option<Value>),
}

impl Damage {
    /// How many kinds of damage there are.
    const KINDS: usize = 8;

    fn kind(&self) -> &'static str {
        match self {
            Damage::Null => "null",
            Damage::Int(_) => "int",
            Damage::Real(_) => "real",
            Damage::Text(_) => "text",
            Damage::TextBytes(_) => "text bytes",
            Damage::Blob(_) => "blob",
            Damage::Cut(_) => "cut",
            Damage::Member(..) => "member",
        }
    }
}

fn damage() -> impl Strategy<Value = Damage> {
    let json_leaf = prop_oneof![
        Just(Value::Null),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        Just(json!(1e308)),
        Just(json!("")),
        Just(json!("$data_blob")),
        Just(json!([])),
        Just(json!({})),
        Just(json!({"$data_blob": "0000"})),
        any::<i64>().prop_map(Value::from),
    ];
    let text = prop::collection::vec(any::<char>(), 0..24).prop_map(String::from_iter);
    prop_oneof![
        1 => Just(Damage::Null),
        2 => prop_oneof![any::<i64>(), Just(-1i64), Just(i64::MIN), Just(1i64 << 32)].prop_map(Damage::Int),
        1 => any::<f64>().prop_map(Damage::Real),
        2 => text.prop_map(Damage::Text),
        2 => prop::collection::vec(any::<u8>(), 0..24).prop_map(Damage::TextBytes),
        1 => prop::collection::vec(any::<u8>(), 0..24).prop_map(Damage::Blob),
        3 => any::<usize>().prop_map(Damage::Cut),
        6 => (any::<usize>(), prop::option::of(json_leaf)).prop_map(|(k, v)| Damage::Member(k, v)),
    ]
}

/// The JSON pointers of every object member of `v`, depth first.
fn members(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                members(child, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                members(child, &format!("{at}/{i}"), out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// The damaged value for `original`, and the SQL that stores it (`?1` the
/// value); `None` when this damage does not apply to it.
fn damaged(original: &Sql, d: &Damage) -> Option<(Sql, &'static str)> {
    let plain = "?1";
    let as_text = "CAST(?1 AS TEXT)";
    Some(match d {
        Damage::Null => (Sql::Null, plain),
        Damage::Int(n) => (Sql::Integer(*n), plain),
        Damage::Real(f) => (Sql::Real(*f), plain),
        Damage::Text(t) => (Sql::Text(t.clone()), plain),
        Damage::TextBytes(b) => (Sql::Blob(b.clone()), as_text),
        Damage::Blob(b) => (Sql::Blob(b.clone()), plain),
        Damage::Cut(k) => {
            let Sql::Text(t) = original else { return None };
            let bytes = t.as_bytes();
            (Sql::Blob(bytes[..k % (bytes.len() + 1)].to_vec()), as_text)
        }
        Damage::Member(k, replacement) => {
            let Sql::Text(t) = original else { return None };
            let mut v: Value = serde_json::from_str(t).ok()?;
            let mut at = Vec::new();
            members(&v, "", &mut at);
            let pointer = at.get(k % at.len().max(1))?;
            match replacement {
                Some(r) => *v.pointer_mut(pointer)? = r.clone(),
                None => {
                    let (parent, key) = pointer.rsplit_once('/')?;
                    let key = key.replace("~1", "/").replace("~0", "~");
                    v.pointer_mut(parent)?.as_object_mut()?.remove(&key);
                }
            }
            (Sql::Text(v.to_string()), plain)
        }
    })
}

/// A value written: where, and what was there.
struct Saved {
    table: String,
    column: String,
    rowid: i64,
    original: Sql,
}

/// Writes `d` into the `row`th row of (table, column); what to put back, or
/// `None` when the write was refused (a constraint) or does not apply.
fn write_damage(
    conn: &Connection,
    (table, column): &(String, String),
    row: usize,
    d: &Damage,
) -> Option<Saved> {
    let rowids: Vec<i64> = {
        let mut stmt = conn
            .prepare_cached(&format!("SELECT rowid FROM {table}"))
            .ok()?;
        let ids = stmt.query_map([], |r| r.get(0)).ok()?;
        ids.collect::<Result<_, _>>().ok()?
    };
    let rowid = *rowids.get(row % rowids.len().max(1))?;
    let original: Sql = conn
        .prepare_cached(&format!(
            "SELECT \"{column}\" FROM {table} WHERE rowid = ?1"
        ))
        .and_then(|mut s| s.query_row([rowid], |r| r.get(0)))
        .ok()?;
    let (value, expr) = damaged(&original, d)?;
    let changed = conn
        .prepare_cached(&format!(
            "UPDATE {table} SET \"{column}\" = {expr} WHERE rowid = ?2"
        ))
        .and_then(|mut s| s.execute(rusqlite::params![value, rowid]))
        .ok()?;
    if changed != 1 {
        return None;
    }
    Some(Saved {
        table: table.clone(),
        column: column.clone(),
        rowid,
        original,
    })
}

/// Reads everything back: each read succeeds or is `Corrupt` naming the file.
fn read_back(store: &SqliteStore) -> Result<(), TestCaseError> {
    let verdicts = [
        store.load("r1").map(|_| ()),
        store.runs().map(|_| ()),
        store.load("absent").map(|_| ()),
    ];
    for verdict in verdicts {
        match verdict {
            Ok(()) => {}
            Err(StoreError::Corrupt { path, message }) => {
                prop_assert_eq!(&path, &store.location());
                prop_assert!(!message.is_empty());
            }
            Err(e) => return Err(TestCaseError::fail(format!("not Corrupt: {e:?}"))),
        }
    }
    Ok(())
}

/// What the property's damage writes did: applied per (table, column) and
/// per kind of damage, and how many the schema refused or did not apply.
#[derive(Default, Debug)]
struct Applied {
    by_column: BTreeMap<(String, String), usize>,
    by_kind: BTreeMap<&'static str, usize>,
    refused: usize,
}

/// Writes each damage; what to put back for those applied (counted).
fn write_damages(
    f: &Fixture,
    damages: &[(usize, usize, Damage)],
    applied: &mut Applied,
) -> Vec<Saved> {
    let conn = f.store.conn();
    let mut saved = Vec::new();
    for (col, row, d) in damages {
        let column = &f.columns[col % f.columns.len()];
        match write_damage(&conn, column, *row, d) {
            Some(s) => {
                *applied.by_column.entry(column.clone()).or_default() += 1;
                *applied.by_kind.entry(d.kind()).or_default() += 1;
                saved.push(s);
            }
            None => applied.refused += 1,
        }
    }
    saved
}

/// Puts the saved values back, last written first.
fn restore(f: &Fixture, saved: &[Saved]) -> Result<(), TestCaseError> {
    let conn = f.store.conn();
    for s in saved.iter().rev() {
        conn.prepare_cached(&format!(
            "UPDATE {} SET \"{}\" = ?1 WHERE rowid = ?2",
            s.table, s.column
        ))
        .and_then(|mut st| st.execute(rusqlite::params![s.original, s.rowid]))
        .map_err(|e| TestCaseError::fail(format!("cannot restore: {e}")))?;
    }
    Ok(())
}

/// Any value in any column reads back or is `Corrupt`; and the damage really
/// was done: every column and every kind of damage was applied at least once
/// (a write the schema refuses is skipped, so without this count a fixture
/// that refused them all would pass having tested nothing).
#[test]
fn any_value_in_any_column_reads_back_or_is_corrupt() {
    // 4,000 cases, not 10,000: each writes up to three values into the file,
    // reads the run back (two read transactions, eight queries) and puts the
    // values back, ~0.9 ms a case unoptimized here, so 10,000 took 9 s.
    // XorShift: ChaCha unoptimized costs more.
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 4_000,
        rng_algorithm: proptest::test_runner::RngAlgorithm::XorShift,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let f = fixture();
    let applied = std::cell::RefCell::new(Applied::default());
    let damages = prop::collection::vec((any::<usize>(), any::<usize>(), damage()), 1..4);
    let verdict = runner.run(&damages, |damages| {
        let saved = write_damages(&f, &damages, &mut applied.borrow_mut());
        let verdict = read_back(&f.store);
        restore(&f, &saved)?;
        verdict
    });
    if let Err(e) = verdict {
        panic!("{e}");
    }
    let applied = applied.into_inner();
    let missed: Vec<_> = f
        .columns
        .iter()
        .filter(|c| !applied.by_column.contains_key(*c))
        .collect();
    assert!(missed.is_empty(), "never damaged: {missed:?}; {applied:?}");
    assert_eq!(applied.by_kind.len(), Damage::KINDS, "{applied:?}");
}

/// Found by the property above: a column holding the wrong type (text in an
/// integer column) or a number out of range (a pid of -1) read back as
/// `StoreError::Io`, as if the disk had failed; it is damage to the file.
#[test]
fn a_wrong_typed_or_out_of_range_column_is_corrupt_not_io() {
    for sql in [
        "UPDATE runs SET created_at_ms = 'soon'",
        "UPDATE owners SET pid = -1",
        "UPDATE session SET entry = CAST(X'FF00' AS TEXT) WHERE idx = 0",
    ] {
        let f = fixture();
        f.store.conn().execute(sql, []).unwrap();
        let err = f.store.load("r1").unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{sql}: {err:?}");
        assert!(err.to_string().contains(&f.store.location()), "{err}");
    }
}
