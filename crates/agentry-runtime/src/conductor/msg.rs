//! What the conductor is sent, and how senders outside it count what they send.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use agentry_protocol::stop::StopReason;
use agentry_protocol::trace::RunInput;
use ractor::ActorRef;

/// Messages the conductor accepts.
pub enum ConductorMsg {
    /// Run the next step.
    Step,
    /// Stop the run: cancel in-flight calls and end with this reason.
    Abort(StopReason),
    /// An input from outside (message, event, pause, resume), applied at the next
    /// safe point: between steps.
    Input(RunInput),
    /// Timer tick `n` is due (time-driven agents).
    Tick(u64),
    /// An input a durable run kept in the store (a fired timer, an inbox
    /// entry); it leaves the store with the input's commit.
    StoredInput {
        /// Where it was kept.
        source: crate::state::InputSource,
        /// The input.
        input: RunInput,
    },
    /// The run's token was cancelled (deadline, abort, shutdown) while no step was
    /// running to notice it.
    TokenCancelled,
    /// Take no step again (handled between steps, so the one in progress has
    /// finished); answered on the sender. See `RunHandle::drain`.
    Drain(tokio::sync::oneshot::Sender<()>),
    /// An event-driven run has slept for `hibernate_after` since its sleep
    /// numbered so: it hibernates if it still sleeps (see `hibernate.rs`).
    Hibernate(u64),
}

/// How many messages other than its own `Step` wake-ups were posted to a
/// conductor. Every sender outside the conductor adds one before it casts; the
/// conductor counts what it handled. While the two agree nothing is waiting in
/// its mailbox, so a pull-driven run takes its next step in the same handler
/// instead of casting a `Step` to itself: a message to itself would be one more
/// hop per step, and a task that wakes itself while running is requeued by tokio
/// behind a wake-up of another worker thread. A post whose cast fails leaves the
/// counts apart for good, which only turns the batching off.
#[derive(Debug, Clone, Default)]
pub struct Posted(Arc<AtomicU64>);

impl Posted {
    /// Read before every batched step.
    #[inline]
    pub(super) fn count(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// The conductor as every sender outside it holds it: each cast is counted in
/// its [`Posted`], so none can be sent uncounted.
#[derive(Debug, Clone)]
pub(crate) struct ConductorPost {
    actor: ActorRef<ConductorMsg>,
    posted: Posted,
}

impl ConductorPost {
    pub(crate) fn new(actor: ActorRef<ConductorMsg>, posted: Posted) -> Self {
        ConductorPost { actor, posted }
    }

    /// Casts `msg`, counted.
    pub(crate) fn cast(&self, msg: ConductorMsg) -> Result<(), ractor::MessagingErr<ConductorMsg>> {
        self.posted.0.fetch_add(1, Ordering::Release);
        self.actor.cast(msg)
    }
}
