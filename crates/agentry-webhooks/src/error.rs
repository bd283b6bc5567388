//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong with webhooks.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The signing secret is unusable (its value is never shown).
    #[error("the webhook secret is unusable: {reason}")]
    Secret {
        /// Why.
        reason: &'static str,
    },
    /// The outbox's SQLite file could not be opened or written.
    #[error("the webhook outbox in {}: {source}", path.display())]
    Outbox {
        /// The store file.
        path: PathBuf,
        /// What SQLite said.
        source: rusqlite::Error,
    },
    /// The outbox's table in a Postgres store's database could not be made
    /// or written.
    #[error("the webhook outbox in {location}: {message}")]
    OutboxDatabase {
        /// The database (its URL without the password).
        location: String,
        /// What went wrong.
        message: String,
    },
    /// A host webhooks may go to is not one.
    #[error("webhook_hosts: {reason}")]
    Hosts {
        /// Why.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("the webhook client: {reason}")]
    Client {
        /// Why.
        reason: String,
    },
}
