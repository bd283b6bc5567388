//! Durability: the bridge between a run's actors and a [`Store`].
//!
//! One writer thread per runtime owns the store's write side. Actors hand it
//! batches of [`Write`]s, in the order they must land; the thread drains every
//! batch queued while the previous commit was on disk and commits them as one
//! transaction (one fsync), then acknowledges each. Order is preserved, so a
//! batch the sender did not wait for is still on disk before any later batch
//! that someone does wait for.
//!
//! What waits for its commit (see ARCHITECTURE.md, "Durable runs"):
//! - the run's creation, every input from outside, every pause/park, the stop;
//! - a step's update in [`Durability::Strict`] mode (the default), and in
//!   [`Durability::Grouped`] mode when the step started a call that must not run
//!   twice;
//! - a call's `intent` when its tool must not run twice (not `read_only`, no
//!   idempotency key, not idempotent).
//!
//! Everything else (a step's decision before it acts, intents of re-runnable
//! calls, outcomes) is queued without waiting: if the process dies before it
//! lands, resuming repeats only work that is safe to repeat.

use std::sync::Arc;
use std::time::Duration;

use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::PolicyOutput;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use agentry_store::{Store, StoreError, Write};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

/// When a state update counts as acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Every step's update is on disk before the state keeper acknowledges it
    /// (at least one fsync per step; concurrent runs share fsyncs).
    #[default]
    Strict,
    /// A step that only did re-runnable work (read-only, idempotent or keyed
    /// calls, or none) is acknowledged at once and committed with the next group;
    /// a crash may lose such steps, and resuming runs them again. Steps with
    /// side effects that must not repeat, inputs, parks and the stop are still
    /// committed before they are acknowledged.
    Grouped,
}

/// True when running the call again after a crash is safe by its contract.
pub fn rerunnable(contract: &ToolContract) -> bool {
    contract.effect == Effect::ReadOnly
        || matches!(
            contract.idempotency,
            Idempotency::Idempotent | Idempotency::RequiredKey
        )
}

struct Job {
    writes: Vec<Write>,
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// Hands batches to the store's writer thread; cheap to clone.
#[derive(Clone)]
pub struct StoreWriter {
    tx: crossbeam_channel::Sender<Job>,
    store: Arc<dyn Store>,
    /// Set by [`StoreWriter::close`]: every later batch fails.
    closed: Arc<std::sync::atomic::AtomicBool>,
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

impl StoreWriter {
    /// Starts the writer thread. It ends when the last writer is dropped.
    pub fn start(store: Arc<dyn Store>) -> std::io::Result<StoreWriter> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let thread_store = Arc::clone(&store);
        let closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
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
        self.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        // Answered after whatever the thread was committing.
        let _ = self.commit(Vec::new()).await;
    }

    /// Identifies this writer (and its clones) among the claims of this process.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.closed) as usize
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Commits a batch and waits until it is on disk.
    pub async fn commit(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        let (done, rx) = oneshot::channel();
        self.send(Job {
            writes,
            done: Some(done),
        })?;
        rx.await.unwrap_or_else(|_| Err(self.gone()))
    }

    /// Queues a batch without waiting. A failure is remembered by the writer:
    /// every later batch fails with it, so nothing is acknowledged after a write
    /// that was lost.
    pub fn submit(&self, writes: Vec<Write>) {
        if self.send(Job { writes, done: None }).is_err() {
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

/// How long the writer lingers for more work when nobody waits for what it
/// holds: a step's decision and intents usually precede, by microseconds, the
/// step update someone does wait for, and one fsync then covers them all.
const LINGER: Duration = Duration::from_millis(2);

fn writer_loop(
    store: &dyn Store,
    rx: &crossbeam_channel::Receiver<Job>,
    closed: &Arc<std::sync::atomic::AtomicBool>,
) {
    // The first failure that may have lost a queued write poisons the writer.
    let mut poisoned: Option<StoreError> = None;
    let mut last_beat = std::time::Instant::now();
    loop {
        let first = match rx.recv_timeout(crate::owner::HEARTBEAT_EVERY) {
            Ok(job) => Some(job),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        };
        if last_beat.elapsed() >= crate::owner::HEARTBEAT_EVERY {
            last_beat = std::time::Instant::now();
            heartbeat(store, &poisoned, Arc::as_ptr(closed) as usize);
        }
        let Some(first) = first else { continue };
        let mut group = vec![first];
        if closed.load(std::sync::atomic::Ordering::SeqCst) && poisoned.is_none() {
            poisoned = Some(StoreError::Io {
                path: store.location(),
                message: "this runtime let go of its runs (Runtime::abandon)".into(),
            });
        }
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
        // A run's creation and a claim commit alone: their conflict (a
        // duplicate id, a lost race for a run) is the caller's error and must
        // not fail other runs' batches.
        let (creates, mut rest): (Vec<Job>, Vec<Job>) = group
            .into_iter()
            .partition(|j| j.writes.iter().any(Write::is_conditional));
        for job in creates {
            let result = check(&poisoned).and_then(|()| store.commit(&job.writes));
            reply(job.done, result);
        }
        if rest.is_empty() {
            continue;
        }
        let result = check(&poisoned).and_then(|()| {
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
                poisoned = Some(e.clone());
            }
        }
        for job in rest {
            reply(job.done, result.clone());
        }
    }
}

/// Refreshes the heartbeat of every run this process owns. Alone, and never
/// poisoning the writer: a missed heartbeat loses no run state.
fn heartbeat(store: &dyn Store, poisoned: &Option<StoreError>, writer_key: usize) {
    let beats = crate::owner::heartbeats(writer_key);
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

/// One run's view of the writer.
#[derive(Debug, Clone)]
pub struct RunLog {
    /// Run id.
    pub run_id: Arc<str>,
    /// The writer.
    pub writer: StoreWriter,
    /// Acknowledgement mode.
    pub mode: Durability,
    /// The token of this process's claim on the run, released with its stop.
    pub owner_token: Arc<str>,
}

/// A step decided but not yet applied: resuming acts on this decision again
/// instead of asking the policy anew (the ledger says which calls already ran).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// Step number.
    pub step: u64,
    /// What the policy said.
    pub output: PolicyOutput,
    /// The budget when the step started.
    pub before: BudgetSnapshot,
}

/// What the conductor needs besides the state to continue a run; kept by the
/// state keeper and stored in each checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Steps taken.
    pub steps: u64,
    /// Tool calls this run made itself.
    pub tool_calls: u64,
    /// The most recent step fingerprints (no-progress window), oldest first.
    pub fingerprints: Vec<u64>,
    /// A decided step not yet applied.
    pub in_flight: Option<InFlight>,
    /// The last applied step ends the run (an answer to verify, or a stop already
    /// decided) but the stop is not on disk yet: a resumed run does only that.
    #[serde(default)]
    pub ending: Option<Ending>,
}

/// How the last applied step ends the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// The model finished with this answer: run the acceptance checks.
    Verify {
        /// The answer.
        answer: String,
    },
    /// The step already decided the stop.
    Stop {
        /// Why.
        reason: agentry_protocol::stop::StopReason,
        /// The sentence explaining it.
        detail: String,
    },
}

/// Fingerprints kept in [`Progress`]: more than any sensible no-progress window.
pub const KEPT_FINGERPRINTS: usize = 32;
