//! Postgres failures, sorted by what the store does about them.

use postgres::error::SqlState;

use crate::StoreError;

/// Why one attempt at an operation failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// The connection is gone, or the server is shutting down or starting:
    /// reconnect and try the operation again (a commit checks first whether
    /// its attempt landed).
    Lost(String),
    /// A conflict between concurrent transactions the server asks to retry
    /// (a deadlock, a serialization failure): the attempt was rolled back.
    Retry,
    /// The operation failed for a reason of its own: told to the caller.
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        Failure::Store(e)
    }
}

/// Sorts a failure of a statement on the store at `location`.
pub(super) fn classify(location: &str, e: postgres::Error) -> Failure {
    if is_lost(&e) {
        return Failure::Lost(e.to_string());
    }
    match e.code() {
        Some(code)
            if *code == SqlState::T_R_DEADLOCK_DETECTED
                || *code == SqlState::T_R_SERIALIZATION_FAILURE =>
        {
            Failure::Retry
        }
        Some(code) if *code == SqlState::DISK_FULL || *code == SqlState::OUT_OF_MEMORY => {
            Failure::Store(StoreError::Full {
                path: location.to_string(),
            })
        }
        Some(code) if *code == SqlState::FOREIGN_KEY_VIOLATION => Failure::Store(StoreError::Io {
            path: location.to_string(),
            message: format!("a row names a run the store does not hold: {}", detail(&e)),
        }),
        Some(_) | None => Failure::Store(StoreError::Io {
            path: location.to_string(),
            message: detail(&e),
        }),
    }
}

/// Whether `e` means the connection is gone (closed, an I/O error, a server
/// shutting down or not accepting connections yet), not that the statement
/// failed.
pub(super) fn is_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW;
    }
    // No server error: a failure of the socket (or of a connect attempt).
    std::iter::successors(std::error::Error::source(e), |s| s.source())
        .any(|s| s.is::<std::io::Error>())
        || e.to_string().contains("timed out")
}

/// True for a duplicate key.
pub(super) fn is_unique(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// True for a row naming a missing one (a run the store does not hold).
pub(super) fn is_foreign_key(e: &postgres::Error) -> bool {
    e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION)
}

/// The server's message with its detail, or the client's.
pub(super) fn detail(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(detail) => format!("{} ({detail})", db.message()),
            None => db.message().to_string(),
        },
        None => e.to_string(),
    }
}
