//! Checkpoints off the commit path. With `SyncMode::Normal` a commit costs a
//! write to the WAL; SQLite's automatic checkpoint would copy the WAL into
//! the file and fsync both inside whichever commit crosses its threshold,
//! a stall of milliseconds for that one commit. So in that mode the writer's
//! automatic checkpoint is off and a thread of the store's own runs a
//! passive checkpoint (it never blocks the writer or a reader) every
//! [`INTERVAL`] on a connection of its own.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::error::{open_error, sql_error};
use crate::StoreError;

/// How often the WAL is checkpointed.
pub(super) const INTERVAL: Duration = Duration::from_millis(200);

/// The checkpointing thread; stopped (and joined) when dropped.
pub(super) struct Checkpointer {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts checkpointing the store at `path` (already in WAL mode); its
    /// connection waits up to `busy` for another's lock.
    pub(super) fn start(
        path: &Path,
        shown: &str,
        busy: Duration,
    ) -> Result<Checkpointer, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(shown, e))?;
        conn.busy_timeout(busy).map_err(|e| sql_error(shown, e))?;
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("agentry-store-checkpoint".into())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(INTERVAL) {
                    // A failed checkpoint leaves the WAL as it is; the next tries again.
                    let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                }
            })
            .map_err(|e| StoreError::Open {
                path: shown.to_string(),
                message: format!("cannot start its checkpoint thread: {e}"),
            })?;
        Ok(Checkpointer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
