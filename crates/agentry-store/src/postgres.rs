//! The shared store: a PostgreSQL database the nodes of a cluster commit to.
//!
//! Guarantees are the SQLite store's: a batch is applied all or nothing and
//! is durable (the server's `synchronous_commit`, on by default) before
//! `commit` returns; large outputs are stored once by sha256; the schema is
//! versioned and migrated on connect; a newer schema is refused untouched.
//! Besides: a lost connection is opened again, however long the server is
//! away, and the operation goes on (`postgres/conn.rs`); a commit that was
//! in flight when the connection dropped is applied exactly once (its id is
//! written with it and looked up before a retry).
//!
//! Two connections, each on a thread of its own: one commits, one reads (a
//! load does not queue behind a commit).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use postgres::Config;

use crate::{ListedRun, RunQuery, RunRecord, RunSummary, Store, StoreError, StoredRun, Write};

mod conn;
mod database;
mod error;
mod read;
mod schema;
mod write;

pub use database::{Database, Listener, Notice};
pub use schema::POSTGRES_SCHEMA_VERSION;

use conn::{Session, Worker};
use error::{Failure, classify};
use read::Reader;

/// How long connecting waits for the server when the URL does not say
/// (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the server lets a session of ours sit idle inside a
/// transaction before it ends it (ours never pause there: their statements
/// go back to back).
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(2);
/// Landed commit ids older than this are forgotten (a retry comes within
/// one reconnect, far sooner).
const KEEP_COMMIT_IDS_MS: u64 = 60 * 60 * 1000;
/// Old commit ids are swept every this many commits.
const SWEEP_EVERY: u64 = 1000;

/// A [`Store`] in a PostgreSQL database (`postgres://user:password@host:port/db`),
/// shared by every process that connects to it. See the module docs.
pub struct PostgresStore {
    reader: Worker,
    writer: Worker,
    location: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

/// Whether `spec` names a Postgres store (`postgres://` or `postgresql://`)
/// rather than a file.
pub fn is_postgres_url(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}

impl PostgresStore {
    /// Connects to the database at `url` and brings its schema up to date.
    ///
    /// Fails with [`StoreError::Open`] naming the server (never the
    /// password) when the URL is malformed or the server cannot be reached
    /// or refuses the login, and [`StoreError::NewerSchema`] when a newer
    /// agentry migrated the database (it is then left untouched).
    pub fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let (config, location) = config_of(url)?;
        let writer = Worker::start(
            "agentry-pg-writer",
            Session::new(config.clone(), location.clone()),
        )?;
        let migrated_at = location.clone();
        writer.call(move |session| {
            session.run(|client, _, _| schema::migrate(client, schema::MIGRATIONS, &migrated_at))
        })?;
        let reader = Worker::start("agentry-pg-reader", Session::new(config, location.clone()))?;
        Ok(PostgresStore {
            reader,
            writer,
            location,
        })
    }

    /// Runs `read` on the reader connection, in one read-only snapshot.
    fn read<T: Send + 'static>(
        &self,
        read: impl Fn(&mut Reader<'_, postgres::Transaction<'_>>) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.reader.call(move |session| {
            let path = session.location().to_string();
            session.run(|client, statements, _| {
                let mut tx = client
                    .build_transaction()
                    .isolation_level(postgres::IsolationLevel::RepeatableRead)
                    .read_only(true)
                    .start()
                    .map_err(|e| classify(&path, e))?;
                let value = read(&mut Reader {
                    client: &mut tx,
                    statements,
                    path: &path,
                })?;
                tx.commit().map_err(|e| classify(&path, e))?;
                Ok(value)
            })
        })
    }
}

/// The client configuration for `url`, and the location messages name.
fn config_of(url: &str) -> Result<(Config, String), StoreError> {
    let location = shown(url);
    let mut config: Config = url.parse().map_err(|e| StoreError::Open {
        path: location.clone(),
        message: format!("not a valid PostgreSQL URL: {e}"),
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    // A peer that vanished (a partition) is noticed by the socket.
    config.keepalives(true);
    config.keepalives_idle(Duration::from_secs(10));
    config.application_name("agentry");
    // A process paused or cut off inside a transaction would hold its row
    // locks until it came back, and a node taking its runs over would wait
    // on them: the server ends such a session, and its transaction, soon.
    let ours = format!(
        "-c idle_in_transaction_session_timeout={}",
        IDLE_IN_TRANSACTION.as_millis()
    );
    let options = match config.get_options() {
        Some(theirs) if !theirs.is_empty() => format!("{theirs} {ours}"),
        Some(_) | None => ours,
    };
    config.options(&options);
    Ok((config, location))
}

/// Ids of commits, unique across processes and machines: host, pid, when
/// this process first committed, and a counter.
fn commit_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| std::env::var("HOSTNAME").unwrap_or_default());
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{host}:{}:{nanos}", std::process::id())
    });
    format!("{prefix}:{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `url` as messages show it: without its password or query parameters
/// (which may carry one).
fn shown(url: &str) -> String {
    let base = url.split(['?', '#']).next().unwrap_or(url);
    let Some((scheme, rest)) = base.split_once("://") else {
        return "a PostgreSQL URL".to_string();
    };
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => {
            let user = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{user}@{host}")
        }
        None => authority.to_string(),
    };
    if path.is_empty() {
        format!("{scheme}://{authority}")
    } else {
        format!("{scheme}://{authority}/{path}")
    }
}

impl Store for PostgresStore {
    fn commit(&self, writes: &[Write]) -> Result<(), StoreError> {
        if writes.is_empty() {
            return Ok(());
        }
        let writes = writes.to_vec();
        let id = commit_id();
        self.writer.call(move |session| {
            let path = session.location().to_string();
            session.run(|client, statements, attempt| {
                commit_once(client, statements, &path, &id, &writes, attempt)
            })?;
            sweep_commit_ids(session);
            Ok(())
        })
    }

    fn load(&self, run_id: &str) -> Result<Option<StoredRun>, StoreError> {
        let run_id = run_id.to_string();
        self.read(move |reader| reader.load(&run_id))
    }

    fn runs(&self) -> Result<Vec<RunSummary>, StoreError> {
        self.read(|reader| reader.runs())
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    fn list(&self, query: &RunQuery) -> Result<Vec<ListedRun>, StoreError> {
        let query = query.clone();
        self.read(move |reader| reader.list(&query))
    }

    fn stopped_before(&self, before_ms: u64, limit: usize) -> Result<Vec<RunSummary>, StoreError> {
        self.read(move |reader| reader.stopped_before(before_ms, limit))
    }

    fn delete_run(&self, run_id: &str) -> Result<Vec<RunRecord>, StoreError> {
        let run_id = run_id.to_string();
        self.writer.call(move |session| {
            let path = session.location().to_string();
            session.run(|client, statements, _| {
                let mut tx = client.transaction().map_err(|e| classify(&path, e))?;
                let removed = Reader {
                    client: &mut tx,
                    statements,
                    path: &path,
                }
                .delete_run(&run_id)?;
                // On any error above, dropping `tx` keeps every row.
                tx.commit().map_err(|e| classify(&path, e))?;
                Ok(removed)
            })
        })
    }
}

/// One attempt at committing `writes` under the id `id`. After a lost
/// connection (`attempt.lost_before`) the id is looked up first: found, the
/// earlier attempt landed and nothing is applied again.
fn commit_once(
    client: &mut postgres::Client,
    statements: &mut conn::Statements,
    path: &str,
    id: &str,
    writes: &[Write],
    attempt: conn::Attempt,
) -> Result<(), Failure> {
    let fail = |e| classify(path, e);
    let mut tx = client.transaction().map_err(fail)?;
    if attempt.lost_before
        && !tx
            .query("SELECT 1 FROM agentry.commits WHERE id = $1", &[&id])
            .map_err(fail)?
            .is_empty()
    {
        return Ok(());
    }
    write::apply(&mut tx, statements, path, writes)?;
    let now = crate::rows::int(agentry_protocol::now_millis());
    let record = statements
        .get(
            &mut tx,
            "INSERT INTO agentry.commits (id, at_ms) VALUES ($1, $2)",
        )
        .map_err(fail)?;
    tx.execute(&record, &[&id, &now]).map_err(fail)?;
    tx.commit().map_err(fail)
}

/// Forgets landed commit ids older than [`KEEP_COMMIT_IDS_MS`], every
/// [`SWEEP_EVERY`] commits of this process. A failure is only retried later:
/// the ids are bookkeeping, not run state.
fn sweep_commit_ids(session: &mut Session) {
    static COMMITS: AtomicU64 = AtomicU64::new(0);
    if !COMMITS
        .fetch_add(1, Ordering::Relaxed)
        .is_multiple_of(SWEEP_EVERY)
    {
        return;
    }
    let before =
        crate::rows::int(agentry_protocol::now_millis().saturating_sub(KEEP_COMMIT_IDS_MS));
    let _ = session.run(|client, _, _| {
        client
            .execute("DELETE FROM agentry.commits WHERE at_ms < $1", &[&before])
            .map(drop)
            .map_err(|e| match classify("", e) {
                Failure::Lost(why) => Failure::Lost(why),
                Failure::Retry | Failure::Store(_) => Failure::Store(StoreError::Io {
                    path: String::new(),
                    message: "sweep skipped".into(),
                }),
            })
    });
}

#[cfg(test)]
mod tests;
