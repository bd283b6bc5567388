//! Mapping SQLite and JSON failures to [`StoreError`].

use rusqlite::ErrorCode;

use crate::StoreError;

/// A failure of a statement on the store at `path`.
pub(super) fn sql_error(path: &str, e: rusqlite::Error) -> StoreError {
    let path = path.to_string();
    if is_bad_value(&e) {
        return StoreError::Corrupt {
            path,
            message: format!("a stored value cannot be read back: {e}"),
        };
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => StoreError::Corrupt {
            path,
            message: e.to_string(),
        },
        Some(ErrorCode::DiskFull) => StoreError::Full { path },
        // SQLite says `SQLITE_FULL` only for ENOSPC; a write past a file-size
        // limit (EFBIG) or a quota is a bare "disk I/O error".
        _ if is_write_error(&e) => StoreError::Io {
            path,
            message: format!(
                "writing the file failed ({e}): the disk may be full or a file-size limit or quota reached; nothing of this write was committed"
            ),
        },
        _ => StoreError::Io {
            path,
            message: e.to_string(),
        },
    }
}

/// A column holding a value of the wrong type, out of range or not UTF-8:
/// damage to the file (or a hand edit), not a failing disk.
fn is_bad_value(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..)
    )
}

/// True for a failed write or flush of the file (its data, journal or WAL).
fn is_write_error(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_extended_error_code(),
        Some(rusqlite::ffi::SQLITE_IOERR_WRITE | rusqlite::ffi::SQLITE_IOERR_FSYNC)
    )
}

/// A failure to open the file at all.
pub(super) fn open_error(path: &str, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly) => {
            StoreError::Open {
                path: path.to_string(),
                message: e.to_string(),
            }
        }
        _ => sql_error(path, e),
    }
}

/// True for a failed foreign-key check (a row naming a run that is not there).
pub(super) fn is_foreign_key(e: &rusqlite::Error) -> bool {
    e.sqlite_extended_error_code() == Some(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

/// True for a duplicate primary key.
pub(super) fn is_primary_key(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_extended_error_code(),
        Some(rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY | rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE)
    )
}
