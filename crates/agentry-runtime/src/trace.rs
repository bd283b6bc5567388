//! The JSONL trace writer.
//!
//! Records are handed to a dedicated writer thread, so a slow disk never stalls
//! the conductor; [`TraceWriter::finish`] waits until every record is on disk
//! before a run reports its outcome.
//!
//! The hand-over is a queue the writer drains in batches. A sender wakes the
//! writer only when it is in its long sleep or the queue is long; otherwise the
//! writer polls every millisecond while the run is active. Waking a parked thread
//! on every record cost a futex call and a context switch per step, more than
//! the step itself.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use agentry_protocol::trace::TraceLine;
use tokio::sync::oneshot;

use crate::error::RuntimeError;

/// Writes one JSON object per line to a file.
#[derive(Debug)]
pub struct TraceWriter {
    path: PathBuf,
    queue: TraceSender,
    done: oneshot::Receiver<std::io::Result<()>>,
}

/// Queues records on a run's trace (the state keeper writes step records with
/// it); closed with the trace by [`TraceWriter::finish`].
#[derive(Debug, Clone)]
pub struct TraceSender(Arc<Queue>);

impl TraceSender {
    /// Queues a record.
    pub fn write(&self, line: TraceLine) {
        self.0.push(line);
    }
}

/// Records waiting for the writer thread.
#[derive(Debug, Default)]
struct Queue {
    state: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Pending {
    lines: Vec<TraceLine>,
    closed: bool,
    /// The writer sleeps until woken (nothing came for a while).
    asleep: bool,
    /// Records already written, handed back to be dropped by the next sender.
    /// A record is allocated on the run's thread; freed on the writer's, glibc
    /// sends its chunks back across arenas and the run's thread allocates every
    /// next record on its slow path (W1 with the trace: see BENCHMARKS.md).
    written: Vec<TraceLine>,
}

/// How often the writer looks for records while they keep coming.
const POLL: Duration = Duration::from_millis(1);
/// Empty polls before the writer sleeps until woken (an idle run costs nothing).
const IDLE_POLLS: u32 = 50;
/// A queue this long wakes the writer at once (bounds the memory held).
const WAKE_AT: usize = 1024;

impl Queue {
    fn push(&self, line: TraceLine) {
        let (wake, written) = match self.state.lock() {
            Ok(mut p) => {
                p.lines.push(line);
                let written = std::mem::take(&mut p.written);
                (p.asleep || p.lines.len() >= WAKE_AT, written)
            }
            Err(_) => (false, Vec::new()),
        };
        if wake {
            self.wake.notify_one();
        }
        // Dropped here, on the sender's thread, outside the lock.
        drop(written);
    }

    /// Hands written records back to the senders' side (see `Pending::written`).
    fn give_back(&self, lines: &mut Vec<TraceLine>) {
        if let Ok(mut p) = self.state.lock() {
            p.written.append(lines);
        }
    }

    fn close(&self) {
        if let Ok(mut p) = self.state.lock() {
            p.closed = true;
        }
        self.wake.notify_one();
    }

    /// The next batch; `None` once closed and drained.
    fn take(&self) -> Option<Vec<TraceLine>> {
        let mut p = self.state.lock().ok()?;
        let mut idle = 0;
        loop {
            if !p.lines.is_empty() {
                return Some(std::mem::take(&mut p.lines));
            }
            if p.closed {
                return None;
            }
            if idle < IDLE_POLLS {
                idle += 1;
                p = self.wake.wait_timeout(p, POLL).ok()?.0;
            } else {
                p.asleep = true;
                p = self.wake.wait(p).ok()?;
                p.asleep = false;
                idle = 0;
            }
        }
    }
}

impl TraceWriter {
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
        let queue = Arc::new(Queue::default());
        let (done_tx, done) = oneshot::channel();
        let q = Arc::clone(&queue);
        std::thread::Builder::new()
            .name("agentry-trace".into())
            .spawn(move || {
                let mut out = BufWriter::new(file);
                // Serialized into a plain buffer first: serde_json makes many
                // tiny writes, which a Vec takes for less than a BufWriter.
                let mut buf = Vec::with_capacity(4096);
                let result = (|| {
                    while let Some(mut batch) = q.take() {
                        for line in &batch {
                            buf.clear();
                            serde_json::to_writer(&mut buf, line)?;
                            buf.push(b'\n');
                            out.write_all(&buf)?;
                        }
                        q.give_back(&mut batch);
                    }
                    out.flush()
                })();
                // A writer that failed stops taking records; close so pushes are
                // dropped quietly and `finish` reports the error.
                q.close();
                let _ = done_tx.send(result);
            })
            .map_err(trace_err)?;
        Ok(TraceWriter {
            path: path.to_path_buf(),
            queue: TraceSender(queue),
            done,
        })
    }

    /// The file path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues a record.
    pub fn write(&self, line: TraceLine) {
        self.queue.write(line);
    }

    /// A handle that queues records on this trace from another actor.
    pub fn sender(&self) -> TraceSender {
        self.queue.clone()
    }

    /// Closes the queue and waits until everything is written and flushed.
    pub async fn finish(self) -> std::io::Result<()> {
        self.queue.0.close();
        self.done
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("trace writer thread died")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::trace::{RunInput, TraceInput};

    fn input(seq: u64) -> TraceLine {
        TraceLine::Input(Box::new(TraceInput {
            run_id: "r".into(),
            seq,
            state_version: seq,
            input: RunInput::Pause,
            at: 0,
        }))
    }

    /// A written record is dropped by the next sender, on the sender's thread,
    /// not by the writer thread (which would free the run thread's allocations
    /// across glibc arenas on every step).
    #[tokio::test]
    async fn a_written_record_is_dropped_by_the_next_sender() {
        use agentry_protocol::budget::BudgetSnapshot;
        use agentry_protocol::decision::Decision;
        use agentry_protocol::trace::TraceStep;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let w = TraceWriter::open(&path, false).unwrap();
        let decision = Arc::new(Decision::Final {
            answer: "42".into(),
        });
        let step = |seq: u64| {
            TraceLine::Step(Box::new(TraceStep {
                run_id: "r".into(),
                task_id: "t".into(),
                parent_id: None,
                traceparent: "00-0-0-01".into(),
                step: seq,
                attempt: 1,
                model: "m".into(),
                prompt_hash: None,
                usage: Default::default(),
                compaction: None,
                decision: Arc::clone(&decision),
                results: Vec::new(),
                attempts: Vec::new(),
                interrupted: None,
                budget_before: BudgetSnapshot::default(),
                budget_after: BudgetSnapshot::default(),
                state_version: seq,
                fingerprint: String::new(),
                state: Default::default(),
                at: 0,
            }))
        };
        w.write(step(1));
        // Wait until the writer has written it and handed it back.
        let handed_back = || w.queue.0.state.lock().map(|p| p.written.len()).unwrap_or(0);
        for _ in 0..5000 {
            if handed_back() == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(handed_back(), 1);
        // Written, and still held: the writer did not drop it.
        assert_eq!(Arc::strong_count(&decision), 2);
        w.write(step(2));
        // The push dropped record 1 on this thread; record 2 (queued, being
        // written or handed back) holds the only other reference.
        assert!(Arc::strong_count(&decision) <= 2);
        w.finish().await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
    }

    /// Records written in a burst, after the writer fell asleep, and past the
    /// wake-up length all reach the file, in order, by `finish`.
    #[tokio::test]
    async fn every_record_lands_in_order_whether_the_writer_polls_or_sleeps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let w = TraceWriter::open(&path, false).unwrap();
        w.write(input(1));
        // Long enough for the writer to give up polling and sleep.
        tokio::time::sleep(POLL * (IDLE_POLLS + 30)).await;
        w.write(input(2));
        for seq in 3..(3 + WAKE_AT as u64 + 10) {
            w.write(input(seq));
        }
        w.finish().await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let seqs: Vec<u64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, (1..(3 + WAKE_AT as u64 + 10)).collect::<Vec<_>>());
    }
}
