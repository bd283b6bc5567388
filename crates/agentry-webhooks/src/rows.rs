//! What the outbox keeps of a webhook, in either place (`outbox.rs`'s
//! SQLite file, `outbox_pg.rs`'s Postgres database). A leaf.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One webhook to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// The `webhook-id`: the same on every attempt (receivers deduplicate on it).
    pub id: String,
    /// Where it is POSTed.
    pub url: String,
    /// The JSON body, exactly as signed and sent.
    pub body: String,
}

/// A webhook waiting for its next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// The webhook.
    pub webhook: Webhook,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it was enqueued (milliseconds since the epoch).
    pub created_ms: u64,
}

/// Where a webhook stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Reserved for a run that has not stopped yet ([`Outbox::reserve`](crate::Outbox::reserve)):
    /// never attempted until [`Outbox::ready`](crate::Outbox::ready) gives it its body.
    Waiting,
    /// Waiting for an attempt.
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// Every attempt the schedule allows failed.
    GaveUp,
}

/// A webhook's state and the attempts it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Where it stands.
    pub state: State,
    /// Attempts made.
    pub attempts: u32,
}

/// How long a claimed webhook ([`Outbox::due`](crate::Outbox::due) in a Postgres database) is
/// no one else's: a pass's whole batch of attempts fits in it, each bounded
/// by its timeout. A claim whose taker died lapses after it.
pub const CLAIM: Duration = Duration::from_secs(10 * 60);

/// An attempt's outcome as a row keeps it: state, next attempt, error.
pub(crate) fn recorded(
    outcome: Result<(), &str>,
    retry_in: Option<Duration>,
) -> (&'static str, u64, Option<&str>) {
    let now = now_ms();
    match (outcome, retry_in) {
        (Ok(()), _) => ("delivered", now, None),
        (Err(error), Some(after)) => ("pending", now + after.as_millis() as u64, Some(error)),
        (Err(error), None) => ("gave_up", now, Some(error)),
    }
}

/// A state as a row keeps it.
pub(crate) fn state_of(text: &str) -> State {
    match text {
        "delivered" => State::Delivered,
        "gave_up" => State::GaveUp,
        "waiting" => State::Waiting,
        _ => State::Pending,
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
