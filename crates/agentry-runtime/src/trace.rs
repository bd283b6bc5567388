//! The JSONL trace writer.
//!
//! Records are handed to a dedicated writer thread over a crossbeam channel, so a
//! slow disk never stalls the conductor; [`TraceWriter::finish`] waits until every
//! record is on disk before a run reports its outcome.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use agentry_protocol::trace::TraceLine;
use crossbeam_channel::{Sender, unbounded};
use tokio::sync::oneshot;

use crate::error::RuntimeError;

/// Writes one JSON object per line to a file.
#[derive(Debug)]
pub struct TraceWriter {
    path: PathBuf,
    tx: Sender<TraceLine>,
    done: oneshot::Receiver<std::io::Result<()>>,
}

impl TraceWriter {
    /// Creates (truncates) the trace file and starts its writer thread.
    pub fn create(path: &Path) -> Result<Self, RuntimeError> {
        Self::open(path, false)
    }

    /// Opens the trace file, appending to it when `append` (a resumed run goes on
    /// with the trace it started), and starts its writer thread.
    pub fn open(path: &Path, append: bool) -> Result<Self, RuntimeError> {
        let trace_err = |source| RuntimeError::Trace {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(trace_err)?;
        }
        let file = if append {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        } else {
            File::create(path)
        }
        .map_err(trace_err)?;
        let (tx, rx) = unbounded::<TraceLine>();
        let (done_tx, done) = oneshot::channel();
        std::thread::Builder::new()
            .name("agentry-trace".into())
            .spawn(move || {
                let mut out = BufWriter::new(file);
                let result = (|| {
                    for line in rx {
                        serde_json::to_writer(&mut out, &line)?;
                        out.write_all(b"\n")?;
                    }
                    out.flush()
                })();
                let _ = done_tx.send(result);
            })
            .map_err(trace_err)?;
        Ok(TraceWriter {
            path: path.to_path_buf(),
            tx,
            done,
        })
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues a record.
    pub fn write(&self, line: TraceLine) {
        // The writer thread only goes away after `finish`, or after an I/O error
        // that `finish` reports.
        let _ = self.tx.send(line);
    }

    /// Closes the channel and waits until everything is written and flushed.
    pub async fn finish(self) -> std::io::Result<()> {
        drop(self.tx);
        self.done
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("trace writer thread died")))
    }
}
