//! The store's writer thread: batches in, one transaction per group out.

use std::collections::HashSet;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use agentry_redact::Redactor;
use agentry_store::{RunOwner, Store, StoreError, Write};
use tokio::sync::oneshot;

use super::owner::{self, Claim, Lease};
use super::scrub;

/// One batch on its way to the writer thread, with whoever waits for it.
struct Job {
    writes: Vec<Write>,
    /// The run's redactor, applied on the writer thread before the commit;
    /// `None` only for writes that carry no content (claims, barriers).
    redactor: Option<Arc<Redactor>>,
    /// The run's lease: the batch is fenced by its token (`None`: claims,
    /// barriers).
    lease: Option<Arc<Lease>>,
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// What a run's batch goes with ([`RunLog`](super::RunLog) makes it).
pub(super) struct Sender<'a> {
    pub(super) redactor: &'a Arc<Redactor>,
    pub(super) lease: &'a Arc<Lease>,
}

/// Hands batches to the store's writer thread; cheap to clone.
#[derive(Clone)]
pub struct StoreWriter {
    tx: crossbeam_channel::Sender<Job>,
    store: Arc<dyn Store>,
    /// Set by [`StoreWriter::close`]: every later batch fails.
    closed: Arc<AtomicBool>,
    /// How often the thread beats for this process's runs (ms): a third of
    /// the lease in lease mode.
    beat_ms: Arc<AtomicU64>,
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
        let beat_ms = Arc::new(AtomicU64::new(millis(owner::beat_every(None))));
        let thread = Thread {
            closed: Arc::clone(&closed),
            beat_ms: Arc::clone(&beat_ms),
        };
        std::thread::Builder::new()
            .name("agentry-store".into())
            .spawn(move || writer_loop(&*thread_store, &rx, &thread))?;
        Ok(StoreWriter {
            tx,
            store,
            closed,
            beat_ms,
        })
    }

    /// Beats for this writer's runs as lease mode with `lease` asks (every
    /// third of it; `None`: the default rhythm).
    pub(crate) fn set_lease(&self, lease: Option<Duration>) {
        self.beat_ms
            .store(millis(owner::beat_every(lease)), Ordering::Relaxed);
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
        self.commit(vec![claim.write(replaces)], None).await?;
        claim.lease().claimed();
        Ok(())
    }

    /// Lets go of a claim no run took up (a resume that failed after it
    /// claimed): the owner row goes if `token` still holds it. A failure
    /// is logged: the row then expires as a dead owner's would.
    pub(crate) async fn release(&self, run_id: &str, token: &str) {
        let release = Write::Release {
            run_id: run_id.to_string(),
            token: token.to_string(),
        };
        if let Err(e) = self.commit(vec![release], None).await {
            tracing::warn!(run_id, error = %e, "a resume that failed could not let go of its claim");
        }
    }

    /// Commits a batch (fenced by the sender's lease and redacted by its
    /// redactor first) and waits until it is on disk. Runs write through
    /// [`RunLog`](super::RunLog), which always passes both.
    pub(super) async fn commit(
        &self,
        writes: Vec<Write>,
        sender: Option<Sender<'_>>,
    ) -> Result<(), StoreError> {
        self.begin_commit(writes, sender)?.await
    }

    /// Queues a batch (fenced and redacted first) for a commit someone
    /// waits for: the [`Committing`] is ready once it is on disk.
    pub(super) fn begin_commit(
        &self,
        writes: Vec<Write>,
        sender: Option<Sender<'_>>,
    ) -> Result<Committing, StoreError> {
        let (done, rx) = oneshot::channel();
        self.send(Job {
            writes,
            redactor: sender.as_ref().map(|s| Arc::clone(s.redactor)),
            lease: sender.map(|s| Arc::clone(s.lease)),
            done: Some(done),
        })?;
        Ok(Committing {
            rx,
            writer: self.clone(),
        })
    }

    /// Queues a batch (fenced and redacted first) without waiting. A failure
    /// is remembered by the writer: every later batch fails with it, so nothing
    /// is acknowledged after a write that was lost (a batch refused because
    /// its run was taken over is the run's alone: its lease remembers it).
    pub(super) fn submit(&self, writes: Vec<Write>, sender: Sender<'_>) {
        let job = Job {
            writes,
            redactor: Some(Arc::clone(sender.redactor)),
            lease: Some(Arc::clone(sender.lease)),
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

/// What the writer thread shares with its [`StoreWriter`]s.
struct Thread {
    closed: Arc<AtomicBool>,
    beat_ms: Arc<AtomicU64>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn writer_loop(store: &dyn Store, rx: &crossbeam_channel::Receiver<Job>, thread: &Thread) {
    // The first failure that may have lost a queued write poisons the writer.
    let mut poisoned: Option<StoreError> = None;
    let mut last_beat = std::time::Instant::now();
    loop {
        let every = Duration::from_millis(thread.beat_ms.load(Ordering::Relaxed));
        let first = match rx.recv_timeout(every) {
            Ok(job) => Some(job),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        if last_beat.elapsed() >= every {
            last_beat = std::time::Instant::now();
            heartbeat(store, &poisoned, Arc::as_ptr(&thread.closed) as usize);
        }
        let Some(first) = first else { continue };
        if thread.closed.load(Ordering::SeqCst) && poisoned.is_none() {
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
/// failure poisons the writer, except a run's being taken over, which fails
/// that run's batches only.
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
    // A run taken over writes nothing more: its batches fail at once.
    group.retain_mut(|job| match job.lease.as_ref().and_then(|l| l.lost()) {
        Some(lost) => {
            reply(job.done.take(), Err(lost.clone()));
            false
        }
        None => true,
    });
    // A run's creation and a claim commit alone: their conflict (a
    // duplicate id, a lost race for a run) is the caller's error and must
    // not fail other runs' batches. Not fenced: the claim is itself the
    // compare-and-set on the owner.
    let (creates, rest): (Vec<Job>, Vec<Job>) = group
        .into_iter()
        .partition(|j| j.writes.iter().any(Write::is_conditional));
    for job in creates {
        let result = check(poisoned).and_then(|()| store.commit(&job.writes));
        reply(job.done, result);
    }
    if rest.is_empty() {
        return;
    }
    let (mut all, mut pending) = fenced(rest);
    loop {
        let result = check(poisoned).and_then(|()| store.commit(&all));
        if let Err(StoreError::Fenced { run_id, .. }) = &result
            && pending.iter().any(|p| p.is_of(run_id))
        {
            // Only that run's batches go; the rest of the group is retried.
            let run_id = run_id.clone();
            let (kept, refused) = drop_run(all, pending, &run_id);
            let Err(e) = result else { return };
            for p in refused {
                if let Some(lease) = &p.lease {
                    lease.lose(e.clone());
                }
                reply(p.done, Err(e.clone()));
            }
            (all, pending) = kept;
            if pending.is_empty() {
                return;
            }
            continue;
        }
        if let Err(e) = &result {
            tracing::error!(error = %e, "store commit failed");
            if poisoned.is_none() {
                *poisoned = Some(e.clone());
            }
        }
        for p in pending {
            reply(p.done, result.clone());
        }
        return;
    }
}

/// One batch of a group commit: where its writes are in the group's list.
struct Pending {
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
    lease: Option<Arc<Lease>>,
    writes: Range<usize>,
}

impl Pending {
    fn is_of(&self, run_id: &str) -> bool {
        self.lease.as_ref().is_some_and(|l| &**l.run_id() == run_id)
    }
}

/// The group's writes as one list, each run's first batch opened by its
/// lease's `Write::Fence` (one check per run and transaction: the
/// transaction holds the write lock, so the owner cannot change within it).
/// Moved, not cloned: the group's writes are large (checkpoints).
fn fenced(group: Vec<Job>) -> (Vec<Write>, Vec<Pending>) {
    let mut all = Vec::with_capacity(group.iter().map(|j| j.writes.len() + 1).sum());
    let mut seen: HashSet<*const Lease> = HashSet::new();
    let mut pending = Vec::with_capacity(group.len());
    for mut job in group {
        let start = all.len();
        if let Some(lease) = &job.lease
            && seen.insert(Arc::as_ptr(lease))
        {
            all.push(lease.fence());
        }
        all.append(&mut job.writes);
        pending.push(Pending {
            done: job.done,
            lease: job.lease,
            writes: start..all.len(),
        });
    }
    (all, pending)
}

/// The group without run `run_id`'s batches, and those batches.
fn drop_run(
    all: Vec<Write>,
    pending: Vec<Pending>,
    run_id: &str,
) -> ((Vec<Write>, Vec<Pending>), Vec<Pending>) {
    let mut writes = all.into_iter();
    let mut kept_writes = Vec::new();
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for mut p in pending {
        let batch = writes.by_ref().take(p.writes.len());
        if p.is_of(run_id) {
            batch.for_each(drop);
            refused.push(p);
        } else {
            let start = kept_writes.len();
            kept_writes.extend(batch);
            p.writes = start..kept_writes.len();
            kept.push(p);
        }
    }
    ((kept_writes, kept), refused)
}

/// Refreshes the heartbeat of every run this process owns. Alone, and never
/// poisoning the writer: a missed heartbeat loses no run state. A beat the
/// store refuses because its run was taken over loses that run's lease (the
/// run stops) and the others are sent again.
fn heartbeat(store: &dyn Store, poisoned: &Option<StoreError>, writer_key: usize) {
    if poisoned.is_some() {
        return;
    }
    let (mut beats, mut leases): (Vec<Write>, Vec<Arc<Lease>>) =
        owner::heartbeats(writer_key).into_iter().unzip();
    while !beats.is_empty() {
        let e = match store.commit(&beats) {
            Ok(()) => return,
            Err(e) => e,
        };
        let lost = if let StoreError::Fenced { run_id, .. } = &e {
            leases.iter().position(|l| &**l.run_id() == run_id)
        } else {
            None
        };
        let Some(i) = lost else {
            tracing::warn!(error = %e, "could not refresh the heartbeat of this process's runs");
            return;
        };
        beats.swap_remove(i);
        leases.swap_remove(i).lose(e);
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
