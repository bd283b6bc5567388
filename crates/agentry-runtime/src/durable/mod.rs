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
//! - this file: [`Durability`], [`RunLog`], [`rerunnable`].

pub mod owner;
mod progress;
mod writer;

use std::sync::Arc;

use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use serde::{Deserialize, Serialize};

pub use self::progress::{Ending, InFlight, KEPT_FINGERPRINTS, Progress};
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
