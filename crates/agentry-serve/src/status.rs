//! The service's operational state, shared by every clone of the `App`:
//! whether it drains, and the store file (or Postgres database) `GET
//! /healthz` checks. A leaf: `table.rs` holds it, `ops.rs` acts on it.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct Ops {
    draining: AtomicBool,
    /// The store's file and the identity it had when the service started.
    store_file: Option<StoreFile>,
    /// A query of the store's database is in flight (`/healthz`): while it
    /// waits for a server that is away, no other is sent.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    probing: Arc<AtomicBool>,
}

/// A file and its device and inode numbers.
#[derive(Debug)]
struct StoreFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl Ops {
    /// For a service whose store lives in `store_file` (as it is now).
    pub(super) fn new(store_file: Option<&Path>) -> Ops {
        let store_file = store_file.and_then(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some(StoreFile {
                path: path.to_path_buf(),
                dev: meta.dev(),
                ino: meta.ino(),
            })
        });
        Ops {
            draining: AtomicBool::new(false),
            store_file,
            probing: Arc::default(),
        }
    }

    /// The service drains from now on.
    pub(super) fn set_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the service drains.
    pub(super) fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// The store's file must still be the one the service opened: removed or
    /// replaced, every commit goes to a file no later start will see.
    pub(super) fn check_store_file(&self) -> Result<(), StoreProblem> {
        let Some(file) = &self.store_file else {
            return Ok(());
        };
        match std::fs::metadata(&file.path) {
            Ok(meta) if meta.dev() == file.dev && meta.ino() == file.ino => Ok(()),
            Ok(_) => Err(StoreProblem::FileReplaced {
                path: file.path.clone(),
            }),
            Err(source) => Err(StoreProblem::FileGone {
                path: file.path.clone(),
                source,
            }),
        }
    }
}

impl Ops {
    /// A trivial query of the store's Postgres database, answered within
    /// `within`. One at a time: a query still waiting (the server is away)
    /// makes the next check fail at once rather than wait beside it.
    #[cfg(feature = "postgres")]
    pub(super) async fn probe_database(
        &self,
        database: Arc<agentry::store::Database>,
        within: std::time::Duration,
    ) -> Result<(), StoreProblem> {
        let silent = StoreProblem::Silent {
            what: "a query of the database",
            within,
        };
        if self.probing.swap(true, Ordering::SeqCst) {
            return Err(silent);
        }
        let probing = Arc::clone(&self.probing);
        let probe = tokio::task::spawn_blocking(move || {
            let answered = database.transaction(|tx| tx.query_one("SELECT 1", &[]).map(|_| ()));
            probing.store(false, Ordering::SeqCst);
            answered
        });
        tokio::time::timeout(within, probe)
            .await
            .map_err(|_| silent)?
            .map_err(StoreProblem::ReadFailed)?
            .map_err(StoreProblem::Unreadable)
    }
}

/// Why `GET /healthz` says the store does not answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum StoreProblem {
    /// The store's file is no longer there.
    #[error(
        "the store file {} is gone ({source}): this service writes to a file no later start will read",
        .path.display()
    )]
    FileGone {
        /// The file.
        path: PathBuf,
        /// What `stat` said.
        source: std::io::Error,
    },
    /// Another file is at the store's path.
    #[error(
        "the store file {} was replaced: this service writes to a file no later start will read",
        .path.display()
    )]
    FileReplaced {
        /// The file.
        path: PathBuf,
    },
    /// A commit failed, and the writer refuses every later one.
    #[error("the store takes no writes: {0}")]
    NoWrites(agentry::RuntimeError),
    /// The store could not be read.
    #[error("the store cannot be read: {0}")]
    Unreadable(agentry::store::StoreError),
    /// The read's task failed.
    #[error("the store's read failed: {0}")]
    ReadFailed(tokio::task::JoinError),
    /// The writer or a read took longer than `within`.
    #[error("the store did not answer {what} within {within:?}")]
    Silent {
        /// What was asked.
        what: &'static str,
        /// How long it was waited for.
        within: std::time::Duration,
    },
}
