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
//!
//! Every line passes the run's redactor after serialization, on the writer
//! thread, before it is written (or held).
//!
//! Sampling (`RunConfig.observe.sample`): a run whose trace id falls outside
//! the sampled share ([`Sampling::Deferred`]) holds its lines (see `held`)
//! until it ends; then its inputs and final record are written, and its step
//! records too unless it stopped `done`.

mod held;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use agentry_protocol::trace::TraceLine;
use agentry_redact::Redactor;
use tokio::sync::oneshot;

use self::held::Held;
use crate::error::RuntimeError;

/// Whether a run's trace keeps its step records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// Sampled in: every line is written as it comes.
    All,
    /// Sampled out: lines are held until the run ends, and its step records
    /// written only if it did not stop `done`.
    Deferred,
}

impl Sampling {
    /// The decision for a run of trace `trace_id` under share `sample`
    /// (0.0..=1.0): by a hash of the trace id, so a tree (one trace id) is all
    /// in or all out, and a resumed run decides as it did.
    pub(crate) fn of(sample: f64, trace_id: &str) -> Sampling {
        // NaN or 1 and above: everything.
        if sample.is_nan() || sample >= 1.0 {
            return Sampling::All;
        }
        // `as` saturates: the bound stays within u64.
        let bound = (sample.max(0.0) * u64::MAX as f64) as u64;
        if trace_hash(trace_id) < bound {
            Sampling::All
        } else {
            Sampling::Deferred
        }
    }
}

/// FNV-1a, then a SplitMix64 finalizer so similar ids spread over the range.
fn trace_hash(id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

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
    /// Whether the step records of a sampled-out run are kept, set as it ends
    /// (before its final record is queued).
    keep_steps: Option<bool>,
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

    fn keep_steps(&self, keep: bool) {
        if let Ok(mut p) = self.state.lock() {
            p.keep_steps = Some(keep);
        }
    }

    /// Whether held step records are kept: as decided, else (a run that
    /// never said) yes.
    fn kept(&self) -> bool {
        self.state
            .lock()
            .map_or(true, |p| p.keep_steps.unwrap_or(true))
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
    /// with the trace it started), and starts its writer thread, which redacts
    /// every line with `redactor` and samples step records by `sampling`.
    pub(crate) fn open(
        path: &Path,
        append: bool,
        redactor: Arc<Redactor>,
        sampling: Sampling,
    ) -> Result<Self, RuntimeError> {
        let trace_err = |source| RuntimeError::Trace {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(trace_err)?;
        }
        // Never blocks on a FIFO nobody reads (the run would hang before it starts).
        let file = agentry_files::create_output(path, append).map_err(trace_err)?;
        let queue = Arc::new(Queue::default());
        let (done_tx, done) = oneshot::channel();
        let q = Arc::clone(&queue);
        std::thread::Builder::new()
            .name("agentry-trace".into())
            .spawn(move || {
                let result = write_loop(&q, file, &redactor, sampling);
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

    /// Whether a sampled-out run's step records are written after all (it did
    /// not stop `done`); said before its final record is queued.
    pub(crate) fn keep_steps(&self, keep: bool) {
        self.queue.0.keep_steps(keep);
    }

    /// Closes the queue and waits until everything is written and flushed.
    pub async fn finish(self) -> std::io::Result<()> {
        self.queue.0.close();
        self.done
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("trace writer thread died")))
    }
}

/// The writer thread: serializes each line into a plain buffer (serde_json
/// makes many tiny writes, which a Vec takes for less than a BufWriter),
/// redacts it, and writes it, or holds it while the run is sampled out.
fn write_loop(
    q: &Queue,
    file: File,
    redactor: &Redactor,
    sampling: Sampling,
) -> std::io::Result<()> {
    let mut out = BufWriter::new(file);
    let mut buf = Vec::with_capacity(4096);
    let mut held = Held::default();
    while let Some(mut batch) = q.take() {
        for line in &batch {
            buf.clear();
            serde_json::to_writer(&mut buf, line)?;
            redactor.redact_json(&mut buf);
            buf.push(b'\n');
            match (sampling, line) {
                (Sampling::All, _) => out.write_all(&buf)?,
                (Sampling::Deferred, TraceLine::Stop(_)) => {
                    held.release(q.kept(), &mut out)?;
                    out.write_all(&buf)?;
                }
                (Sampling::Deferred, TraceLine::Step(_)) => held.push(true, &buf)?,
                (Sampling::Deferred, TraceLine::Input(_)) => held.push(false, &buf)?,
            }
        }
        q.give_back(&mut batch);
    }
    // Closed without a final record: nothing said the steps may go.
    held.release(true, &mut out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentry_protocol::trace::{RunInput, TraceInput};

    fn test_redactor() -> Arc<Redactor> {
        Arc::new(
            Redactor::builder()
                .env(Vec::<(String, String)>::new())
                .build()
                .unwrap(),
        )
    }

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
        let w = TraceWriter::open(&path, false, test_redactor(), Sampling::All).unwrap();
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
                sandboxes: Vec::new(),
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

    /// The decision is the trace id's alone (a tree decides as one, a resume
    /// as before), and keeps about the asked share.
    #[test]
    fn sampling_is_decided_by_the_trace_id_alone() {
        // The two ids tests/suite/trace.rs runs trees under.
        assert_eq!(
            Sampling::of(0.5, "4bf92f3577b34da6a3ce929d0e0e0000"),
            Sampling::All
        );
        assert_eq!(
            Sampling::of(0.5, "4bf92f3577b34da6a3ce929d0e0e0003"),
            Sampling::Deferred
        );
        assert_eq!(Sampling::of(1.0, "x"), Sampling::All);
        assert_eq!(Sampling::of(0.0, "x"), Sampling::Deferred);
        let ids: Vec<String> = (0..20_000).map(|i| format!("{i:032x}")).collect();
        let kept = ids
            .iter()
            .filter(|id| Sampling::of(0.3, id) == Sampling::All)
            .count();
        assert!((5_400..=6_600).contains(&kept), "{kept} of 20000 at 0.3");
        assert!(
            ids.iter()
                .all(|id| Sampling::of(0.3, id) == Sampling::of(0.3, id))
        );
    }

    /// Records written in a burst, after the writer fell asleep, and past the
    /// wake-up length all reach the file, in order, by `finish`.
    #[tokio::test]
    async fn every_record_lands_in_order_whether_the_writer_polls_or_sleeps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let w = TraceWriter::open(&path, false, test_redactor(), Sampling::All).unwrap();
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
