//! The store's writer thread: batches in, one transaction per group out.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use agentry_redact::Redactor;
use agentry_store::{RunOwner, Store, StoreError, Write};
use tokio::sync::oneshot;

use super::owner::{self, Claim, HEARTBEAT_EVERY};
use super::scrub;

/// One batch on its way to the writer thread, with whoever waits for it.
struct Job {
    writes: Vec<Write>,
    /// The run's redactor, applied on the writer thread before the commit;
    /// `None` only for writes that carry no content (claims, barriers).
    redactor: Option<Arc<Redactor>>,
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// Hands batches to the store's writer thread; cheap to clone.
#[derive(Clone)]
pub struct StoreWriter {
    tx: crossbeam_channel::Sender<Job>,
    store: Arc<dyn Store>,
    /// Set by [`StoreWriter::close`]: every later batch fails.
    closed: Arc<AtomicBool>,
}

impl std::fmt::Debug for StoreWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreWriter")
            .field("store", &self.store.location())
            .finish()
    }
}

/// Most batches one commit takes: bounds the latency one commit adds to the
/// first batch of its group.
const MAX_GROUP: usize = 512;

/// How long the writer lingers for more work when nobody waits for what it
/// holds: a step's decision and intents usually precede, by microseconds, the
/// step update someone does wait for, and one fsync then covers them all.
const LINGER: Duration = Duration::from_millis(2);

impl StoreWriter {
    /// Starts the writer thread. It ends when the last writer is dropped.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<StoreWriter> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let thread_store = Arc::clone(&store);
        let closed = Arc::new(AtomicBool::new(false));
        let thread_closed = Arc::clone(&closed);
        std::thread::Builder::new()
            .name("agentry-store".into())
            .spawn(move || writer_loop(&*thread_store, &rx, &thread_closed))?;
        Ok(StoreWriter { tx, store, closed })
    }

    /// Refuses every batch from now on and returns once a batch being
    /// committed has landed: after this, nothing more of this writer's runs
    /// reaches the store.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        // Answered after whatever the thread was committing.
        let _ = self.sync().await;
    }

    /// Identifies this writer (and its clones) among the claims of this process.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.closed) as usize
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Returns once everything queued before is on disk (or failed).
    pub(crate) async fn sync(&self) -> Result<(), StoreError> {
        self.commit(Vec::new(), None).await
    }

    /// Commits `claim` (compare-and-set on `replaces`, the owner read before)
    /// and waits: no content, nothing to redact.
    pub(crate) async fn claim(
        &self,
        claim: &Claim,
        replaces: Option<&RunOwner>,
    ) -> Result<(), StoreError> {
        self.commit(vec![claim.write(replaces)], None).await
    }

    /// Commits a batch (redacted by `redactor` first) and waits until it is on
    /// disk. Runs write through [`RunLog`](super::RunLog), which always passes
    /// its redactor.
    pub(super) async fn commit(
        &self,
        writes: Vec<Write>,
        redactor: Option<&Arc<Redactor>>,
    ) -> Result<(), StoreError> {
        self.begin_commit(writes, redactor)?.await
    }

    /// Queues a batch (redacted by `redactor` first) for a commit someone
    /// waits for: the [`Committing`] is ready once it is on disk.
    pub(super) fn begin_commit(
        &self,
        writes: Vec<Write>,
        redactor: Option<&Arc<Redactor>>,
    ) -> Result<Committing, StoreError> {
        let (done, rx) = oneshot::channel();
        self.send(Job {
            writes,
            redactor: redactor.cloned(),
            done: Some(done),
        })?;
        Ok(Committing {
            rx,
            writer: self.clone(),
        })
    }

    /// Queues a batch (redacted by `redactor` first) without waiting. A failure
    /// is remembered by the writer: every later batch fails with it, so nothing
    /// is acknowledged after a write that was lost.
    pub(super) fn submit(&self, writes: Vec<Write>, redactor: &Arc<Redactor>) {
        let job = Job {
            writes,
            redactor: Some(Arc::clone(redactor)),
            done: None,
        };
        if self.send(job).is_err() {
            tracing::error!(store = %self.store.location(), "store writer is gone; a write was dropped");
        }
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.tx.send(job).map_err(|_| self.gone())
    }

    fn gone(&self) -> StoreError {
        StoreError::Io {
            path: self.store.location(),
            message: "the store writer thread stopped".into(),
        }
    }
}

/// A batch queued for a commit that someone waits for: ready once the batch
/// is on disk (or failed). Queued apart from the wait, so a caller does its
/// own work between the two, and a future of its own (not an `async fn`'s),
/// so whoever awaits it holds no more than the receiver and the writer.
pub(crate) struct Committing {
    rx: oneshot::Receiver<Result<(), StoreError>>,
    writer: StoreWriter,
}

impl Future for Committing {
    type Output = Result<(), StoreError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        Pin::new(&mut this.rx)
            .poll(cx)
            .map(|done| done.unwrap_or_else(|_| Err(this.writer.gone())))
    }
}

fn writer_loop(store: &dyn Store, rx: &crossbeam_channel::Receiver<Job>, closed: &Arc<AtomicBool>) {
    // The first failure that may have lost a queued write poisons the writer.
    let mut poisoned: Option<StoreError> = None;
    let mut last_beat = std::time::Instant::now();
    loop {
        let first = match rx.recv_timeout(HEARTBEAT_EVERY) {
            Ok(job) => Some(job),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        if last_beat.elapsed() >= HEARTBEAT_EVERY {
            last_beat = std::time::Instant::now();
            heartbeat(store, &poisoned, Arc::as_ptr(closed) as usize);
        }
        let Some(first) = first else { continue };
        if closed.load(Ordering::SeqCst) && poisoned.is_none() {
            poisoned = Some(StoreError::Io {
                path: store.location(),
                message: "this runtime let go of its runs (Runtime::abandon)".into(),
            });
        }
        let group = gather(rx, first);
        commit_group(store, group, &mut poisoned);
    }
}

/// `first` and the batches queued behind it, lingering for more while nobody
/// waits for any of them.
fn gather(rx: &crossbeam_channel::Receiver<Job>, first: Job) -> Vec<Job> {
    let mut group = vec![first];
    loop {
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        if group.len() >= MAX_GROUP || group.iter().any(|j| j.done.is_some()) {
            break;
        }
        match rx.recv_timeout(LINGER) {
            Ok(job) => group.push(job),
            Err(_) => break,
        }
    }
    group
}

/// Commits a group as one transaction and answers each batch; the first
/// failure poisons the writer.
fn commit_group(store: &dyn Store, mut group: Vec<Job>, poisoned: &mut Option<StoreError>) {
    // Nothing reaches the store before it passed the run's redactor; a batch
    // that cannot be redacted is not written, and poisons the writer like a
    // lost write.
    for job in &mut group {
        if let Some(redactor) = &job.redactor
            && let Err(e) = scrub::writes(redactor, &mut job.writes)
            && poisoned.is_none()
        {
            tracing::error!(error = %e, "a store write could not be redacted; not written");
            *poisoned = Some(StoreError::Io {
                path: store.location(),
                message: format!("a write could not be redacted: {e}"),
            });
        }
    }
    // A run's creation and a claim commit alone: their conflict (a
    // duplicate id, a lost race for a run) is the caller's error and must
    // not fail other runs' batches.
    let (creates, mut rest): (Vec<Job>, Vec<Job>) = group
        .into_iter()
        .partition(|j| j.writes.iter().any(Write::is_conditional));
    for job in creates {
        let result = check(poisoned).and_then(|()| store.commit(&job.writes));
        reply(job.done, result);
    }
    if rest.is_empty() {
        return;
    }
    let result = check(poisoned).and_then(|()| {
        if rest.len() == 1 {
            store.commit(&rest[0].writes)
        } else {
            // Moved, not cloned: the group's writes are large (checkpoints).
            let all: Vec<Write> = rest
                .iter_mut()
                .flat_map(|j| std::mem::take(&mut j.writes))
                .collect();
            store.commit(&all)
        }
    });
    if let Err(e) = &result {
        tracing::error!(error = %e, "store commit failed");
        if poisoned.is_none() {
            *poisoned = Some(e.clone());
        }
    }
    for job in rest {
        reply(job.done, result.clone());
    }
}

/// Refreshes the heartbeat of every run this process owns. Alone, and never
/// poisoning the writer: a missed heartbeat loses no run state.
fn heartbeat(store: &dyn Store, poisoned: &Option<StoreError>, writer_key: usize) {
    let beats = owner::heartbeats(writer_key);
    if beats.is_empty() || poisoned.is_some() {
        return;
    }
    if let Err(e) = store.commit(&beats) {
        tracing::warn!(error = %e, "could not refresh the heartbeat of this process's runs");
    }
}

fn check(poisoned: &Option<StoreError>) -> Result<(), StoreError> {
    match poisoned {
        Some(e) => Err(e.clone()),
        None => Ok(()),
    }
}

fn reply(done: Option<oneshot::Sender<Result<(), StoreError>>>, result: Result<(), StoreError>) {
    if let Some(done) = done {
        let _ = done.send(result);
    }
}
