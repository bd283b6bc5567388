//! The `NOTIFY` channels of the cluster's inbox, and what a notification on
//! them tells the holder's applier.

pub(super) const INBOX_CHANNEL: &str = "agentry_inbox";
/// A wake-up for the rows sent to one node (a new run placed there), not
/// for one run's: `node:NODE_ID`.
pub(super) const TARGET_PREFIX: &str = "node:";
pub(super) const ANSWER_CHANNEL: &str = "agentry_answer";

/// What wakes the holder's applier.
#[derive(Debug)]
pub(super) enum Wake {
    /// A row for this run was written.
    Run(String),
    /// Look at every run with rows waiting (a sweep, or a listener that
    /// reconnected and may have missed some).
    All,
}
