//! The file: opening, damage, a newer schema, a full disk, migrations.

use super::*;

#[test]
fn a_missing_directory_is_an_open_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("store.db");
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(!path.parent().unwrap().exists());
}

/// Issue 33, item 1: a FIFO named as the store was waited on forever (the
/// header read), `/dev/zero` handed to SQLite; both are refused by what they are.
#[test]
fn a_fifo_or_a_device_is_refused_not_opened() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.db");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for path in [fifo, PathBuf::from("/dev/zero")] {
        // On a thread: a hang (the bug) fails the test instead of holding it.
        let (tx, rx) = std::sync::mpsc::channel();
        let opening = path.clone();
        std::thread::spawn(move || tx.send(SqliteStore::open(&opening).map(|_| ())));
        let err = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("open returns")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            StoreError::Open {
                path: path.display().to_string(),
                message: "it is not a regular file".into()
            }
            .to_string()
        );
    }
}

/// Files in `dir` other than `keep`.
fn others(dir: &Path, keep: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p != keep)
        .collect()
}

#[test]
fn a_file_that_is_not_a_database_is_corrupt_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    // Pseudo-random bytes (xorshift) and a text file.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let random: Vec<u8> = (0..16_384)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let text = b"# notes\nthis is not a database, just a text file\n".repeat(200);
    for bytes in [random, text] {
        std::fs::write(&path, &bytes).unwrap();
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        assert!(msg.contains("not a database"), "{msg}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        assert!(others(dir.path(), &path).is_empty());
    }
}

#[test]
fn another_programs_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('hi');")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("another program"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

/// A store with several runs and some bulk, checkpointed into the main file
/// and closed.
fn filled_store(path: &Path) {
    let store = open(path);
    for r in 0..20 {
        let id = format!("r{r}");
        let entries = (0..10)
            .map(|i| user(&format!("{id} message {i} {}", "z".repeat(500))))
            .collect();
        store
            .commit(&[Write::CreateRun(record(&id, r)), append(&id, 0, entries)])
            .unwrap();
    }
    store
        .conn()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

#[test]
fn a_truncated_database_file_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    filled_store(&path);
    let len = std::fs::metadata(&path).unwrap().len();
    assert!(len > 64 * 1024, "{len}");
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(len / 2).unwrap();
    drop(file);

    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len / 2);
}

#[test]
fn a_torn_wal_frame_loses_only_the_uncommitted_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let copy = dir.path().join("copy.db");
    let store = open(&path);
    // Keep every commit in the WAL (no checkpoint into the main file).
    store
        .conn()
        .pragma_update(None, "wal_autocheckpoint", 0)
        .unwrap();
    let page_size: u32 = store
        .conn()
        .pragma_query_value(None, "page_size", |r| r.get(0))
        .unwrap();
    store.commit(&[Write::CreateRun(record("r", 1))]).unwrap();
    for i in 0..5 {
        store
            .commit(&[
                append("r", i, vec![user(&format!("batch {i}"))]),
                Write::Checkpoint {
                    run_id: "r".into(),
                    checkpoint: checkpoint(i + 1, RunStatus::Running, None),
                },
            ])
            .unwrap();
    }
    // Copy while the store is open: closing it would checkpoint the WAL.
    let wal = |p: &Path| PathBuf::from(format!("{}-wal", p.display()));
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(wal(&path), wal(&copy)).unwrap();
    let whole = dir.path().join("whole.db");
    std::fs::copy(&path, &whole).unwrap();
    std::fs::copy(wal(&path), wal(&whole)).unwrap();
    drop(store);
    // Control: the untorn copy holds all five batches.
    let session = open(&whole).load("r").unwrap().unwrap().session;
    assert_eq!(session.len(), 5);

    // A crash in the middle of writing the last frame of the last batch.
    let wal_len = std::fs::metadata(wal(&copy)).unwrap().len();
    let frame = 24 + u64::from(page_size);
    assert_eq!((wal_len - 32) % frame, 0, "whole frames");
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(wal(&copy))
        .unwrap();
    file.set_len(wal_len - frame / 2).unwrap();
    drop(file);

    let store = open(&copy);
    let run = store.load("r").unwrap().unwrap();
    let texts: Vec<_> = run
        .session
        .iter()
        .map(|e| {
            let SessionEntry::User { text } = e else {
                panic!("{e:?}")
            };
            text.as_str()
        })
        .collect();
    assert_eq!(texts, ["batch 0", "batch 1", "batch 2", "batch 3"]);
    assert_eq!(run.checkpoint.unwrap().snapshot.version, 4);
    // And it keeps working from there.
    store
        .commit(&[append("r", 4, vec![user("again")])])
        .unwrap();
    assert_eq!(store.load("r").unwrap().unwrap().session.len(), 5);
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    filled_store(&path);
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        // Back to a rollback journal, so closing leaves one plain file.
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert!(others(dir.path(), &path).is_empty());

    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(
        err,
        StoreError::NewerSchema {
            path: path.display().to_string(),
            found: SCHEMA_VERSION + 1,
            supported: SCHEMA_VERSION,
        }
    );
    assert!(err.to_string().contains("was not modified"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert!(others(dir.path(), &path).is_empty());
}

#[test]
fn a_newer_schema_in_wal_mode_is_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    filled_store(&path);
    {
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    assert!(others(dir.path(), &path).is_empty());
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema { .. }), "{err:?}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    // Not even a `-wal` or `-shm` file appeared beside it.
    assert!(others(dir.path(), &path).is_empty());
}

#[test]
fn a_full_disk_keeps_the_last_committed_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let options = SqliteOptions {
        max_pages: Some(40),
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    store.commit(&[Write::CreateRun(record("r", 1))]).unwrap();
    let entry = |i: u64| user(&format!("entry {i} {}", "f".repeat(1500)));
    let mut committed = 0;
    let err = loop {
        assert!(committed < 10_000, "never filled up");
        match store.commit(&[
            append("r", committed, vec![entry(committed)]),
            Write::Checkpoint {
                run_id: "r".into(),
                checkpoint: checkpoint(committed + 1, RunStatus::Running, None),
            },
        ]) {
            Ok(()) => committed += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(
        err,
        StoreError::Full {
            path: path.display().to_string()
        }
    );
    assert!(committed > 5, "{committed}");
    // Still readable in place.
    assert_eq!(
        store.load("r").unwrap().unwrap().session.len() as u64,
        committed
    );
    drop(store);

    let store = open(&path);
    let run = store.load("r").unwrap().unwrap();
    let expected: Vec<_> = (0..committed).map(entry).collect();
    assert_eq!(run.session, expected);
    assert_eq!(run.checkpoint.unwrap().snapshot.version, committed);
    // Without the limit there is room again.
    store
        .commit(&[append("r", committed, vec![entry(committed)])])
        .unwrap();
}

#[test]
fn an_empty_file_is_initialized_as_a_new_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    std::fs::write(&path, b"").unwrap();
    let store = open(&path);
    assert_eq!(schema::user_version(&store.conn()).unwrap(), SCHEMA_VERSION);
    store.commit(&[Write::CreateRun(record("r", 1))]).unwrap();
    assert_eq!(store.runs().unwrap().len(), 1);
    let mode: String = store
        .conn()
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let sync: i64 = store
        .conn()
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 2, "synchronous = FULL");
}

/// A store as version 1 wrote it: no inbox table yet, one run.
fn write_v1_store(path: &Path, shown: &str) {
    let mut conn = Connection::open(path).unwrap();
    schema::migrate(&mut conn, &schema::MIGRATIONS[..1], shown).unwrap();
    assert_eq!(schema::user_version(&conn).unwrap(), 1);
    let tx = conn.transaction().unwrap();
    super::super::write::apply(
        &tx,
        shown,
        &[
            Write::CreateRun(record("r", 1)),
            append("r", 0, vec![user("kept")]),
        ],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// A build with one more migration upgrades `path` again, idempotently; this
/// build then refuses the upgraded file.
fn upgrade_once_more(path: &Path, shown: &str) {
    // A build with one more migration upgrades it again, idempotently...
    let next: Vec<&str> = schema::MIGRATIONS
        .iter()
        .copied()
        .chain(["ALTER TABLE runs ADD COLUMN label TEXT NOT NULL DEFAULT 'none';"])
        .collect();
    let mut conn = Connection::open(path).unwrap();
    schema::migrate(&mut conn, &next, shown).unwrap();
    schema::migrate(&mut conn, &next, shown).unwrap();
    assert_eq!(schema::user_version(&conn).unwrap(), SCHEMA_VERSION + 1);
    let label: String = conn
        .query_row("SELECT label FROM runs WHERE run_id = 'r'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(label, "none");
    drop(conn);
    // ...and this build then refuses the upgraded file.
    let err = SqliteStore::open(path).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found, .. } if found == SCHEMA_VERSION + 1),
        "{err:?}"
    );
}

/// A failing migration step leaves the store at its old version.
fn failing_migration_keeps_the_old_version(shown: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    drop(open(&path));
    let broken: Vec<&str> = schema::MIGRATIONS
        .iter()
        .copied()
        .chain(["CREATE TABLE x (a); THIS IS NOT SQL;"])
        .collect();
    let mut conn = Connection::open(&path).unwrap();
    assert!(schema::migrate(&mut conn, &broken, shown).is_err());
    assert_eq!(schema::user_version(&conn).unwrap(), SCHEMA_VERSION);
    let x: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'x'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(x, 0);
}

#[test]
fn migrations_upgrade_an_older_store_and_keep_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let shown = path.display().to_string();
    write_v1_store(&path, &shown);
    // This build opens it: migration 2 adds the inbox, the data stays.
    let store = open(&path);
    let run = store.load("r").unwrap().unwrap();
    assert_eq!(run.session, vec![user("kept")]);
    assert!(run.inbox.is_empty());
    store
        .commit(&[Write::Enqueue {
            run_id: "r".into(),
            seq: 1,
            input: json!({"kind": "resume"}),
        }])
        .unwrap();
    assert_eq!(store.load("r").unwrap().unwrap().inbox.len(), 1);
    assert_eq!(schema::user_version(&store.conn()).unwrap(), SCHEMA_VERSION);
    drop(store);

    upgrade_once_more(&path, &shown);
    failing_migration_keeps_the_old_version(&shown);
}

/// A process that dies with the store open leaves its last commits in a hot WAL;
/// the next open recovers them (this needs a writable connection even for the
/// pre-open checks).
#[test]
fn a_store_left_open_by_a_dead_process_opens_with_everything_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let store = open(&path);
    store.commit(&[Write::CreateRun(record("r1", 1))]).unwrap();
    store
        .commit(&[append("r1", 0, vec![user("a"), user("b")])])
        .unwrap();
    // Never closed: no checkpoint, the commits live only in the WAL.
    std::mem::forget(store);
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);

    let reopened = open(&path);
    let run = reopened.load("r1").unwrap().unwrap();
    assert_eq!(run.session, vec![user("a"), user("b")]);
}

/// A new store and its `-wal` and `-shm` companions are readable by their
/// owner only, whatever the umask (they were 0644: every local user could read
/// every tool output of every run).
#[cfg(unix)]
#[test]
fn a_new_store_and_its_wal_and_shm_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let store = open(&path);
    store.commit(&[Write::CreateRun(record("r", 1))]).unwrap();
    // While the connection is open the WAL and its index exist.
    for suffix in ["", "-wal", "-shm"] {
        let file = PathBuf::from(format!("{}{suffix}", path.display()));
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}: {mode:o}", file.display());
    }
}

/// The store reads through a second, read-only connection; the writer must
/// still close last, or the WAL (which only a writable connection can
/// checkpoint) is left beside a cleanly closed store and outvotes its file.
#[test]
fn a_cleanly_closed_store_leaves_no_wal_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    filled_store(&path);
    let store = SqliteStore::open(&path).unwrap();
    assert!(
        store.load("r1").unwrap().is_some(),
        "read through the reader"
    );
    drop(store);
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    assert!(
        !wal.exists(),
        "the WAL was checkpointed and removed on close"
    );
}

/// `SyncMode::Normal` sets `synchronous = NORMAL` on the writer, its WAL is
/// checkpointed by the store's own thread, and what it commits is read back
/// as with `FULL`.
#[test]
fn sync_mode_normal_commits_without_an_fsync_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let options = SqliteOptions {
        sync: SyncMode::Normal,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open_with(&path, options).unwrap();
    let sync: i64 = store
        .conn()
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 1, "synchronous = NORMAL");
    let before = std::fs::metadata(&path).unwrap().len();
    let entries = (0..200)
        .map(|i| user(&format!("message {i} {}", "n".repeat(2000))))
        .collect();
    store
        .commit(&[Write::CreateRun(record("r", 1)), append("r", 0, entries)])
        .unwrap();
    // The writer never checkpoints in this mode: the store's own thread
    // copies the WAL into the file.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::metadata(&path).unwrap().len() < before + 300_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL was never checkpointed into the file"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(store);
    let store = SqliteStore::open(&path).unwrap();
    assert!(store.load("r").unwrap().is_some());
}

/// A store as version 4 wrote it (owners, no epochs): run `owned` claimed by
/// token `t`, run `free` never claimed.
fn write_v4_store(path: &Path, shown: &str) {
    let mut conn = Connection::open(path).unwrap();
    schema::migrate(&mut conn, &schema::MIGRATIONS[..4], shown).unwrap();
    assert_eq!(schema::user_version(&conn).unwrap(), 4);
    conn.execute_batch(
        "INSERT INTO runs (run_id, task_id, created_at_ms, updated_at_ms, config, policy,
            status, version)
         VALUES ('owned', 't', 1, 1, '{}', '', 'running', 0),
                ('free', 't', 2, 2, '{}', '', 'running', 0);
         INSERT INTO owners (run_id, token, host, machine, pid, pid_start, since_ms,
            heartbeat_ms)
         VALUES ('owned', 't', 'h', 'm', 42, 7, 100, 100);",
    )
    .unwrap();
}

/// Version 5 adds the run's epoch: an owned run of a version 4 store opens at
/// epoch 1 (it was claimed once), and each later claim counts on from there.
#[test]
fn a_version_4_store_migrates_to_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let shown = path.display().to_string();
    write_v4_store(&path, &shown);
    let store = open(&path);
    assert_eq!(schema::user_version(&store.conn()).unwrap(), SCHEMA_VERSION);
    let owned = store.load("owned").unwrap().unwrap().owner.unwrap();
    assert_eq!((owned.token.as_str(), owned.pid, owned.epoch), ("t", 42, 1));
    let claim = |run_id: &str, replaces: Option<&str>| Write::Claim {
        run_id: run_id.into(),
        owner: crate::RunOwner {
            token: "new".into(),
            epoch: 0,
            ..owned.clone()
        },
        replaces: replaces.map(str::to_string),
    };
    store
        .commit(&[claim("owned", Some("t")), claim("free", None)])
        .unwrap();
    let epoch = |run_id: &str| store.load(run_id).unwrap().unwrap().owner.unwrap().epoch;
    assert_eq!((epoch("owned"), epoch("free")), (2, 1));
}
