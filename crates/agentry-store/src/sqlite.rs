//! The embedded store: one SQLite file in WAL mode, `synchronous = FULL`
//! (or `NORMAL`, [`SyncMode`]).
//!
//! Opening is careful not to touch a file it cannot use: an existing file is
//! first opened read-only to read its schema version and run `quick_check`;
//! only then is it opened for writing, switched to WAL (which writes to the
//! file) and migrated.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::{
    ListedRun, RunQuery, RunRecord, RunSummary, SCHEMA_VERSION, Store, StoreError, StoredRun, Write,
};

mod checkpoint;
mod error;
mod read;
mod schema;
mod service;
mod write;

#[cfg(test)]
mod tests;

use error::sql_error;

/// How long a writer waits for another connection's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Options of [`SqliteStore::open_with`]. The default is what production wants.
#[derive(Debug, Clone, Default)]
pub struct SqliteOptions {
    /// Caps the database at this many pages (`PRAGMA max_page_count`); a write
    /// that would grow it further fails with [`StoreError::Full`], exactly as
    /// on a full disk. `None`: no cap beyond SQLite's own.
    pub max_pages: Option<u64>,
    /// How hard a commit waits for the disk (default [`SyncMode::Full`]).
    pub sync: SyncMode,
}

/// How hard a commit waits for the disk (SQLite's `synchronous`, in WAL mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// `FULL`: every commit is on the disk (fsynced) before it returns: a
    /// committed step survives a power loss or a kernel crash.
    #[default]
    Full,
    /// `NORMAL`: a commit is written to the WAL, which is fsynced only at its
    /// checkpoints (run every 200 ms on a thread of the store's own, so no
    /// commit waits for one). A committed step survives the process's crash (SIGKILL,
    /// a panic, an OOM kill), not the machine's: a power loss or a kernel
    /// crash may lose the last commits (the file stays consistent). For a
    /// service whose machine is not the weak point, commits cost a write
    /// instead of an fsync.
    Normal,
}

impl SyncMode {
    fn pragma(self) -> &'static str {
        match self {
            SyncMode::Full => "FULL",
            SyncMode::Normal => "NORMAL",
        }
    }
}

/// The embedded [`Store`]: one SQLite file (plus its `-wal` and `-shm`
/// companions), no server. See the crate docs for the guarantees.
pub struct SqliteStore {
    /// A read-only connection for loads and listings: in WAL mode it reads
    /// the last committed state while the writer waits on its fsync, so a
    /// hibernated run's wake does not queue behind the commit of the very
    /// message that woke it. Declared first, so dropped first: the writer
    /// closes last, and only the last connection to close checkpoints the
    /// WAL into the file and removes it (a read-only one cannot).
    reader: Mutex<Connection>,
    /// `SyncMode::Normal`'s checkpoints, on a thread of their own; stopped
    /// before the writer closes.
    _checkpointer: Option<checkpoint::Checkpointer>,
    /// The connection that writes: the runtime commits from a single writer
    /// thread.
    conn: Mutex<Connection>,
    /// The path as the user gave it, for messages.
    path: String,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (or creates) the store at `path` with the default options.
    ///
    /// Fails with [`StoreError::Open`] if the file cannot be opened or created
    /// (e.g. its directory does not exist), [`StoreError::Corrupt`] if it is not
    /// a usable SQLite database, and [`StoreError::NewerSchema`] if a newer
    /// agentry wrote it (the file is then left untouched).
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (or creates) the store at `path` with `options`; see
    /// [`SqliteStore::open`].
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let open_error = |message: String| StoreError::Open {
            path: shown.clone(),
            message,
        };
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => return Err(open_error("it is a directory".into())),
            // A FIFO or a device named as the store: reading its header (and
            // SQLite's own open) would wait on the FIFO forever.
            Ok(meta) if !meta.is_file() => {
                return Err(open_error("it is not a regular file".into()));
            }
            Ok(_) => check_existing(path, &shown)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // SQLite would only say "unable to open database file".
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                    && !dir.is_dir()
                {
                    return Err(open_error(format!(
                        "the directory {} does not exist",
                        dir.display()
                    )));
                }
                create_private(path).map_err(|e| open_error(e.to_string()))?;
            }
            Err(e) => return Err(open_error(e.to_string())),
        }

        // No URI flag: the path is a file name, never interpreted.
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut conn =
            Connection::open_with_flags(path, flags).map_err(|e| error::open_error(&shown, e))?;
        configure(&conn, &options, &shown)?;
        schema::migrate(&mut conn, schema::MIGRATIONS, &shown)?;
        let reader = open_reader(path, &shown)?;
        let checkpointer = match options.sync {
            SyncMode::Full => None,
            SyncMode::Normal => Some(checkpoint::Checkpointer::start(path, &shown, BUSY_TIMEOUT)?),
        };
        Ok(SqliteStore {
            conn: Mutex::new(conn),
            reader: Mutex::new(reader),
            _checkpointer: checkpointer,
            path: shown,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave a transaction half
        // applied (an uncommitted transaction rolls back when dropped), so the
        // connection is still sound.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn reader(&self) -> MutexGuard<'_, Connection> {
        // Reads only: nothing a panic could leave half done.
        self.reader.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The store's read-only connection, opened once the writer has switched the
/// file to WAL and migrated it.
fn open_reader(path: &Path, shown: &str) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| error::open_error(shown, e))?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| sql_error(shown, e))?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Creates the store file empty, readable by its owner only (0600), before
/// SQLite opens it: SQLite gives the `-wal` and `-shm` files the main file's
/// mode, so all three hold tool outputs for the owner's eyes only. Never
/// follows a link (`O_CREAT | O_EXCL`); a file that appeared meanwhile is
/// opened as it is.
fn create_private(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Checks an existing file without modifying it: read-only, no WAL switch, no
/// migration. Refuses a newer schema, a damaged file and a foreign database.
fn check_existing(path: &Path, shown: &str) -> Result<(), StoreError> {
    // Even a read-only SQLite connection creates `-wal` and `-shm` files for a
    // WAL-mode database; a newer store is refused from its header alone.
    if let Some(found) = header_version(path)
        && found > SCHEMA_VERSION
    {
        return Err(StoreError::NewerSchema {
            path: shown.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    // A process that died mid-run (or while creating the store) leaves a hot
    // WAL, a stale WAL index or a hot rollback journal, which only a writable
    // connection can recover (a read-only one fails "attempt to write a
    // readonly database"). Recovery rebuilds the WAL index; with no checkpoint on close the
    // main file is still not written by this check.
    let hot_wal = wal_has_frames(path)
        || side_file(path, "-shm")
        || side_file(path, "-wal")
        || side_file(path, "-journal");
    let flags = if hot_wal {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(path, flags).map_err(|e| error::open_error(shown, e))?;
    if hot_wal {
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(|e| sql_error(shown, e))?;
    }
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| sql_error(shown, e))?;
    let found = schema::user_version(&conn).map_err(|e| sql_error(shown, e))?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: shown.to_string(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let problems = quick_check(&conn).map_err(|e| sql_error(shown, e))?;
    if !problems.is_empty() {
        return Err(StoreError::Corrupt {
            path: shown.to_string(),
            message: problems.join("; "),
        });
    }
    if found == 0 {
        // Version 0 with tables is some other program's database: migrating
        // would mix our tables into it.
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
            .map_err(|e| sql_error(shown, e))?;
        if tables > 0 {
            return Err(StoreError::Corrupt {
                path: shown.to_string(),
                message: "it is a SQLite database of another program (it has tables but no agentry schema version)".into(),
            });
        }
    }
    Ok(())
}

/// The schema version in the file header, when the header is authoritative: a
/// SQLite file with no (or an empty) `-wal` file, whose frames could carry a
/// newer header.
fn header_version(path: &Path) -> Option<u32> {
    use std::io::Read;

    if wal_has_frames(path) {
        return None;
    }
    let mut header = [0u8; 100];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .ok()?;
    if !header.starts_with(b"SQLite format 3\0") {
        return None;
    }
    // user_version: 4 bytes, big-endian, at offset 60 (SQLite file format).
    let version = i32::from_be_bytes([header[60], header[61], header[62], header[63]]);
    // Negative: written by no agentry; counts as newer (refused untouched).
    Some(u32::try_from(version).unwrap_or(u32::MAX))
}

/// Whether the store's side file (`-wal`, `-shm`, `-journal`) exists.
fn side_file(path: &Path, suffix: &str) -> bool {
    let mut side = path.as_os_str().to_owned();
    side.push(suffix);
    std::path::Path::new(&side).exists()
}

/// Whether the store's `-wal` file holds anything (frames not yet checkpointed,
/// e.g. after a crash).
fn wal_has_frames(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0)
}

/// `PRAGMA quick_check`: the problems it reports (at most a few), empty if ok.
fn quick_check(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("PRAGMA quick_check(5)")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut problems = Vec::new();
    for row in rows {
        let row = row?;
        if row != "ok" {
            problems.push(row);
        }
    }
    Ok(problems)
}

/// Connection settings of a writable store.
fn configure(conn: &Connection, options: &SqliteOptions, shown: &str) -> Result<(), StoreError> {
    let sql = |e| sql_error(shown, e);
    conn.busy_timeout(BUSY_TIMEOUT).map_err(sql)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Open {
            path: shown.to_string(),
            message: format!("cannot switch it to WAL mode (journal mode stays {mode})"),
        });
    }
    conn.pragma_update(None, "synchronous", options.sync.pragma())
        .map_err(sql)?;
    if options.sync == SyncMode::Normal {
        // Its checkpoints run on their own thread (`checkpoint.rs`), not
        // inside whichever commit crosses the threshold.
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(sql)?;
    }
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sql)?;
    if let Some(pages) = options.max_pages {
        let pages = i64::try_from(pages).unwrap_or(i64::MAX);
        conn.pragma_update(None, "max_page_count", pages)
            .map_err(sql)?;
    }
    // Room for every statement of a batch plus the reads.
    conn.set_prepared_statement_cache_capacity(32);
    Ok(())
}

impl Store for SqliteStore {
    fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        // IMMEDIATE: take the write lock up front, so a concurrent writer makes
        // us wait (busy timeout) instead of failing halfway through.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&self.path, e))?;
        write::apply(&tx, &self.path, writes)?;
        // On any error above, dropping `tx` rolls the whole batch back.
        tx.commit().map_err(|e| sql_error(&self.path, e))
    }

    fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let mut conn = self.reader();
        // One read transaction: the parts come from the same committed state.
        let tx = conn.transaction().map_err(|e| sql_error(&self.path, e))?;
        read::load(&tx, &self.path, run_id)
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        read::runs(&self.reader(), &self.path)
    }

    fn location(&self) -> String {
        self.path.clone()
    }

    fn list(&self, query: &RunQuery) -> Result<Vec<ListedRun>, StoreError> {
        service::list(&self.reader(), &self.path, query)
    }

    fn stopped_before(&self, before_ms: u64, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        service::stopped_before(&self.reader(), &self.path, before_ms, limit)
    }

    fn delete_run(&self, run_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_error(&self.path, e))?;
        let removed = service::delete_run(&tx, &self.path, run_id)?;
        // On any error above, dropping `tx` keeps every row.
        tx.commit().map_err(|e| sql_error(&self.path, e))?;
        Ok(removed)
    }
}
