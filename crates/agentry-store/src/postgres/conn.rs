//! One connection to the server, on a thread of its own.
//!
//! `postgres::Client` drives tokio-postgres on a small runtime of its own
//! and must not be called from inside another tokio runtime (the runtime's
//! actors call the store from theirs). So each connection lives on a
//! [`Worker`] thread; a store call sends it a job and waits for the answer,
//! as a SQLite call waits for its file.
//!
//! A lost connection (the server restarted, the network dropped) is opened
//! again, waiting as long as it takes, and the job is tried again: a caller's
//! write waits and goes on instead of failing the run. A commit names itself
//! with an id written in its transaction, so a retry after a connection lost
//! while the server was committing never applies a batch twice.

use std::collections::HashMap;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::{Client, Config, GenericClient, NoTls, Statement};

use super::error::{Failure, classify, is_lost};
use crate::StoreError;

/// The first wait before connecting again; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two connect attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How often a store still waiting for its server says so.
const WARN_EVERY: Duration = Duration::from_secs(30);
/// Conflicts (deadlocks) retried before the operation fails.
const MAX_RETRIES: u32 = 50;

/// Prepared statements of one connection, by their text.
#[derive(Default)]
pub(super) struct Statements(HashMap<String, Statement>);

impl Statements {
    /// `sql`, prepared once per connection.
    pub(super) fn get(
        &mut self,
        client: &mut impl GenericClient,
        sql: &str,
    ) -> Result<Statement, postgres::Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = client.prepare(sql)?;
        self.0.insert(sql.to_string(), statement.clone());
        Ok(statement)
    }
}

/// How many times an operation has been tried, and whether a connection was
/// lost under an earlier attempt (which may then have landed).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Attempt {
    pub(super) lost_before: bool,
}

/// One connection, opened again whenever it is lost.
pub(super) struct Session {
    config: Config,
    location: String,
    client: Option<Client>,
    statements: Statements,
}

impl Session {
    pub(super) fn new(config: Config, location: String) -> Session {
        Session {
            config,
            location,
            client: None,
            statements: Statements::default(),
        }
    }

    pub(super) fn location(&self) -> &str {
        &self.location
    }

    /// Connects now, once: a server that cannot be reached is an error.
    pub(super) fn connect_now(&mut self) -> Result<(), StoreError> {
        match self.config.connect(NoTls) {
            Ok(client) => {
                self.client = Some(client);
                Ok(())
            }
            Err(e) => Err(StoreError::Open {
                path: self.location.clone(),
                message: super::error::detail(&e),
            }),
        }
    }

    /// Runs `op` until it succeeds or fails for a reason of its own: a lost
    /// connection is opened again (waiting as long as the server is away)
    /// and `op` tried again, as is a transaction conflict.
    pub(super) fn run<T>(
        &mut self,
        mut op: impl FnMut(&mut Client, &mut Statements, Attempt) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut attempt = Attempt::default();
        let mut conflicts = 0;
        let mut outage: Option<Outage> = None;
        loop {
            let result = match self.client.as_mut() {
                Some(client) => op(client, &mut self.statements, attempt),
                None => match self.config.connect(NoTls) {
                    Ok(client) => {
                        if let Some(outage) = outage.take() {
                            outage.over(&self.location);
                        }
                        self.client = Some(client);
                        continue;
                    }
                    Err(e) if is_lost(&e) => Err(Failure::Lost(e.to_string())),
                    Err(e) => Err(classify(&self.location, e)),
                },
            };
            match result {
                Ok(value) => return Ok(value),
                Err(Failure::Store(e)) => return Err(e),
                Err(Failure::Retry) if conflicts < MAX_RETRIES => conflicts += 1,
                Err(Failure::Retry) => {
                    return Err(StoreError::Io {
                        path: self.location.clone(),
                        message: format!("gave up after {MAX_RETRIES} transaction conflicts"),
                    });
                }
                Err(Failure::Lost(why)) => {
                    attempt.lost_before = true;
                    self.client = None;
                    self.statements = Statements::default();
                    outage
                        .get_or_insert_with(Outage::default)
                        .wait(&self.location, &why);
                }
            }
        }
    }
}

/// A time the server could not be reached: backs off and says so.
#[derive(Default)]
struct Outage {
    started: Option<Instant>,
    warned: Option<Instant>,
    backoff: Duration,
}

impl Outage {
    fn wait(&mut self, location: &str, why: &str) {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        if self.warned.is_none_or(|at| now - at >= WARN_EVERY) {
            tracing::warn!(
                store = location,
                error = why,
                waited_s = (now - started).as_secs(),
                "the store's server cannot be reached; its writes wait and go on when it returns"
            );
            self.warned = Some(now);
        }
        self.backoff = (self.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        std::thread::sleep(self.backoff);
    }

    fn over(&self, location: &str) {
        if let Some(started) = self.started {
            tracing::info!(
                store = location,
                waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "the store's server is back"
            );
        }
    }
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// A [`Session`] on a thread of its own, taking jobs in order.
pub(super) struct Worker {
    jobs: Option<crossbeam_channel::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
    location: String,
}

impl Worker {
    /// Starts the thread and connects; a server that cannot be reached now
    /// is [`StoreError::Open`].
    pub(super) fn start(name: &str, mut session: Session) -> Result<Worker, StoreError> {
        let location = session.location().to_string();
        let (jobs, rx) = crossbeam_channel::unbounded::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let connected = session.connect_now();
                let ok = connected.is_ok();
                let _ = ready_tx.send(connected);
                if ok {
                    for job in rx {
                        job(&mut session);
                    }
                }
            })
            .map_err(|e| StoreError::Open {
                path: location.clone(),
                message: format!("cannot start the store's connection thread: {e}"),
            })?;
        let connected = ready_rx.recv().unwrap_or_else(|_| {
            Err(StoreError::Open {
                path: location.clone(),
                message: "the store's connection thread died while connecting".into(),
            })
        });
        let worker = Worker {
            jobs: Some(jobs),
            thread: Some(thread),
            location,
        };
        connected.map(|()| worker)
    }

    /// Runs `job` on the connection's thread and waits for its answer.
    pub(super) fn call<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Session) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let gone = || StoreError::Io {
            path: self.location.clone(),
            message: "the store's connection thread is gone".into(),
        };
        let (tx, rx) = mpsc::sync_channel(1);
        let jobs = self.jobs.as_ref().ok_or_else(gone)?;
        jobs.send(Box::new(move |session: &mut Session| {
            let _ = tx.send(job(session));
        }))
        .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the jobs already queued;
        // its connection closes with it.
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
