//! The store's database, for tables a service keeps beside the store's (its
//! queue, its webhook outbox, a cluster's nodes and routed inputs): a
//! connection on a thread of its own that reconnects as the store's do, and
//! a listener for `NOTIFY`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::{Client, Config, NoTls};

use super::conn::{Session, Worker};
use super::error::{Failure, classify};
use super::schema::MIGRATION_LOCK;
use crate::StoreError;

/// A connection to a store's database (see the module docs). Cheap to share
/// behind an `Arc`; calls are served in order.
pub struct Database {
    worker: Worker,
    config: Config,
    location: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Connects to the database at `url` (as [`crate::PostgresStore::connect`]
    /// does, with the same errors; the store's schema is not touched).
    pub fn connect(url: &str) -> Result<Database, StoreError> {
        let (config, location) = super::config_of(url)?;
        let worker = Worker::start(
            "agentry-pg-tables",
            Session::new(config.clone(), location.clone()),
        )?;
        Ok(Database {
            worker,
            config,
            location,
        })
    }

    /// The server and database, as messages name them (no password).
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Runs `ddl` (statements such as `CREATE TABLE IF NOT EXISTS
    /// agentry.…`) under the lock the store's migrations hold, so nodes
    /// starting at once do not race to create the same table.
    pub fn ensure(&self, ddl: &'static str) -> Result<(), StoreError> {
        self.transaction(move |tx| {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
            tx.batch_execute("CREATE SCHEMA IF NOT EXISTS agentry")?;
            tx.batch_execute(ddl)
        })
    }

    /// Runs `op` in one transaction and commits it. A lost connection is
    /// opened again (waiting as long as the server is away) and `op` run
    /// again, as after a deadlock or a serialization failure: `op` must be
    /// safe to run twice (a commit lost with its connection may have landed).
    /// Any other failure is [`StoreError`] naming the database.
    pub fn transaction<T: Send + 'static>(
        &self,
        mut op: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T, postgres::Error>
        + Send
        + 'static,
    ) -> Result<T, StoreError> {
        self.worker.call(move |session| {
            let path = session.location().to_string();
            session.run(|client, _, _| {
                let mut tx = client.transaction().map_err(|e| classify(&path, e))?;
                let value = op(&mut tx).map_err(|e| classify(&path, e))?;
                tx.commit().map_err(|e| classify(&path, e))?;
                Ok(value)
            })
        })
    }

    /// Starts listening on `channel`: `on_notice` is called, on the
    /// listener's own thread, with each notification's payload, and with
    /// [`Notice::Reconnected`] when the connection was lost and is back
    /// (notifications sent meanwhile are gone: read what they would have
    /// said). Listening ends when the [`Listener`] is dropped.
    pub fn listen(
        &self,
        channel: &str,
        on_notice: impl Fn(Notice) + Send + 'static,
    ) -> Result<Listener, StoreError> {
        let valid = !channel.is_empty()
            && channel
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(StoreError::Io {
                path: self.location.clone(),
                message: format!("{channel:?} is not a channel name (a-z, 0-9 and _)"),
            });
        }
        let listen = format!("LISTEN {channel}");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let config = self.config.clone();
        let location = self.location.clone();
        // Connected on its own thread: the blocking client must not run on
        // the caller's (a tokio worker, often).
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("agentry-pg-listen".into())
            .spawn(move || {
                let mut client = match connect_listening(&config, &listen) {
                    Ok(client) => {
                        let _ = ready_tx.send(Ok(()));
                        client
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(open_error(&location, e)));
                        return;
                    }
                };
                while !stopped.load(Ordering::Relaxed) {
                    match pump(&mut client, &stopped, &on_notice) {
                        Pumped::Stopped => return,
                        Pumped::Lost(why) => tracing::warn!(store = %location, error = %why, "the listening connection was lost; connecting again"),
                    }
                    client = loop {
                        if stopped.load(Ordering::Relaxed) {
                            return;
                        }
                        match connect_listening(&config, &listen) {
                            Ok(client) => break client,
                            Err(_) => std::thread::sleep(RECONNECT_PAUSE),
                        }
                    };
                    on_notice(Notice::Reconnected);
                }
            })
            .map_err(|e| StoreError::Open {
                path: self.location.clone(),
                message: format!("cannot start the listening thread: {e}"),
            })?;
        let gone = || StoreError::Open {
            path: self.location.clone(),
            message: "the listening thread died while connecting".into(),
        };
        let connected = ready_rx.recv().unwrap_or_else(|_| Err(gone()));
        let listener = Listener {
            stop,
            thread: Some(thread),
        };
        connected.map(|()| listener)
    }
}

/// How long the listener waits for a notification before checking whether
/// it should stop (and the pause between connect attempts).
const POLL: Duration = Duration::from_millis(200);
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// A failed connect, as [`Database::listen`] reports it.
fn open_error(location: &str, e: postgres::Error) -> StoreError {
    match classify(location, e) {
        Failure::Store(e) => e,
        Failure::Lost(message) => StoreError::Open {
            path: location.to_string(),
            message,
        },
        Failure::Retry => StoreError::Open {
            path: location.to_string(),
            message: "the server asked to try again".into(),
        },
    }
}

fn connect_listening(config: &Config, listen: &str) -> Result<Client, postgres::Error> {
    let mut client = config.connect(NoTls)?;
    client.batch_execute(listen)?;
    Ok(client)
}

/// Why [`pump`] returned.
enum Pumped {
    /// The listener was dropped.
    Stopped,
    /// The connection is gone: why.
    Lost(String),
}

/// Hands every notification to `on_notice` until told to stop or the
/// connection is lost.
fn pump(client: &mut Client, stop: &AtomicBool, on_notice: &impl Fn(Notice)) -> Pumped {
    use postgres::fallible_iterator::FallibleIterator;
    while !stop.load(Ordering::Relaxed) {
        {
            let mut notifications = client.notifications();
            let mut iter = notifications.timeout_iter(POLL);
            loop {
                match iter.next() {
                    Ok(Some(notification)) => {
                        on_notice(Notice::Payload(notification.payload().to_string()));
                    }
                    Ok(None) => break,
                    Err(e) => return Pumped::Lost(e.to_string()),
                }
            }
        }
        // A connection closed under a quiet channel only shows on use.
        if client.is_closed() {
            return Pumped::Lost("the connection closed".into());
        }
    }
    Pumped::Stopped
}

/// What a [`Listener`] hands its callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A notification's payload.
    Payload(String),
    /// The connection was lost and is back: notifications may have been missed.
    Reconnected,
}

/// Listening on a channel ([`Database::listen`]); stops when dropped.
#[derive(Debug)]
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
