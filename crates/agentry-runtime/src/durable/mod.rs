//! Durability: the bridge between a run's actors and a [`Store`](agentry_store::Store).
//!
//! One writer thread per runtime owns the store's write side. Actors hand it
//! batches of [`Write`](agentry_store::Write)s, in the order they must land; the
//! thread drains every batch queued while the previous commit was on disk and
//! commits them as one transaction (one fsync), then acknowledges each. Order is
//! preserved, so a batch the sender did not wait for is still on disk before any
//! later batch that someone does wait for.
//!
//! What waits for its commit (see ARCHITECTURE.md, "State keeper"):
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
//!
//! # Layout
//! - `owner`: run ownership (one process runs a durable run at a time).
//! - `writer`: [`StoreWriter`] and its thread.
//! - `progress`: [`Progress`], what a checkpoint keeps besides the state.
//! - `scrub`: redaction of a batch on the writer thread.
//! - this file: [`Durability`], [`RunLog`], [`rerunnable`].

pub mod owner;
mod progress;
mod scrub;
mod writer;

use std::sync::Arc;

use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use agentry_redact::Redactor;
use agentry_store::{Store, StoreError, Write};
use serde::{Deserialize, Serialize};

pub use self::progress::{Ending, InFlight, KEPT_FINGERPRINTS, Progress, RESUMED_EVENT_GAP};
pub(crate) use self::writer::Committing;
pub use self::writer::StoreWriter;

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
#[inline]
pub fn rerunnable(contract: &ToolContract) -> bool {
    contract.effect == Effect::ReadOnly
        || matches!(
            contract.idempotency,
            Idempotency::Idempotent | Idempotency::RequiredKey
        )
}

/// One run's view of the writer. Every write of a run goes through here, with
/// the run's redactor: nothing reaches the store before it passed it (the
/// writer's `commit`/`submit` are private to this module).
#[derive(Debug, Clone)]
pub struct RunLog {
    /// Run id.
    pub run_id: Arc<str>,
    writer: StoreWriter,
    /// Acknowledgement mode.
    pub mode: Durability,
    /// This process's claim on the run: its token (released with the stop)
    /// fences every batch, and the writer marks it lost when the store says
    /// another process took the run over.
    pub(crate) lease: Arc<owner::Lease>,
    /// The run's fence mark: kept in its record, set on every process its
    /// tools start (`AGENTRY_RUN_MARK`), what a resume fences by.
    pub mark: Arc<str>,
    redactor: Arc<Redactor>,
}

impl RunLog {
    /// Run `run_id`'s view of `writer`, redacting with `redactor`; `mark` is
    /// the run's fence mark.
    pub(crate) fn new(
        run_id: Arc<str>,
        writer: StoreWriter,
        mode: Durability,
        lease: Arc<owner::Lease>,
        mark: Arc<str>,
        redactor: Arc<Redactor>,
    ) -> RunLog {
        RunLog {
            run_id,
            writer,
            mode,
            lease,
            mark,
            redactor,
        }
    }

    /// The token of this process's claim on the run.
    pub fn owner_token(&self) -> &str {
        self.lease.token()
    }

    /// What goes with each batch: the run's redactor and its lease (the
    /// writer thread opens the batch with the lease's `Write::Fence`).
    fn sender(&self) -> writer::Sender<'_> {
        writer::Sender {
            redactor: &self.redactor,
            lease: &self.lease,
        }
    }

    /// Commits a batch, fenced and redacted on the writer thread, and waits
    /// until it is on disk.
    pub(crate) async fn commit(&self, writes: Vec<Write>) -> Result<(), StoreError> {
        self.writer.commit(writes, Some(self.sender())).await
    }

    /// Queues a batch, fenced and redacted on the writer thread, for a commit
    /// the caller waits for (the [`Committing`] is ready once it is on disk).
    pub(crate) fn begin_commit(&self, writes: Vec<Write>) -> Result<Committing, StoreError> {
        self.writer.begin_commit(writes, Some(self.sender()))
    }

    /// Queues a batch, fenced and redacted on the writer thread, without waiting.
    pub(crate) fn submit(&self, writes: Vec<Write>) {
        self.writer.submit(writes, self.sender());
    }

    /// Returns once everything queued before is on disk.
    pub(crate) async fn sync(&self) -> Result<(), StoreError> {
        self.writer.sync().await
    }

    /// The store (for reads).
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        self.writer.store()
    }
}
