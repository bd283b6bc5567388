//! `[[accept]]`: acceptance checks, a file's content or a command's exit code.

use agentry_protocol::accept::AcceptCheck;
use toml::Value;

use crate::DEFAULT_CHECK_TIMEOUT;
use crate::raw::RawAccept;
use crate::values::{FieldError, describe, duration, field_error, millis, relative_path};

/// One `[[accept]]` table; `at` names it (`accept[0]`).
pub(crate) fn accept(at: &str, mut raw: RawAccept) -> Result<AcceptCheck, FieldError> {
    match (raw.file.take(), raw.command.take()) {
        (Some(file), None) => file_check(at, file, raw),
        (None, Some(command)) => command_check(at, command, raw),
        (Some(_), Some(_)) => Err(field_error!(
            "{at}: has both `file` and `command`; use one [[accept]] table for each"
        )),
        (None, None) => Err(field_error!("{at}: expected `file` or `command`")),
    }
}

/// `file` with `equals` and/or `contains`; `raw`'s other fields.
fn file_check(at: &str, file: Value, raw: RawAccept) -> Result<AcceptCheck, FieldError> {
    if raw.timeout.is_some() {
        return Err(field_error!(
            "{at}.timeout: only command checks take a timeout"
        ));
    }
    let file = relative_path(&format!("{at}.file"), &file)?;
    let equals = text(at, "equals", raw.equals)?;
    let contains = text(at, "contains", raw.contains)?;
    if contains.as_deref() == Some("") {
        return Err(field_error!("{at}.contains: must not be empty"));
    }
    if equals.is_none() && contains.is_none() {
        return Err(field_error!(
            "{at}: a file check needs `equals` or `contains` (or both)"
        ));
    }
    Ok(AcceptCheck::File {
        file,
        equals,
        contains,
    })
}

/// `command` (a shell line or an argv) with an optional `timeout`; `raw`'s other fields.
fn command_check(at: &str, command: Value, raw: RawAccept) -> Result<AcceptCheck, FieldError> {
    for (field, v) in [("equals", &raw.equals), ("contains", &raw.contains)] {
        if v.is_some() {
            return Err(field_error!(
                "{at}.{field}: only file checks compare content"
            ));
        }
    }
    let argv = match command {
        Value::String(s) if !s.trim().is_empty() => {
            vec!["sh".to_string(), "-c".to_string(), s]
        }
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v.as_str() {
                Some(s) if !s.is_empty() => Ok(s.to_string()),
                Some(_) | None => Err(field_error!(
                    "{at}.command[{i}]: expected a non-empty string, found {}",
                    describe(v)
                )),
            })
            .collect::<Result<_, _>>()?,
        v @ (Value::String(_)
        | Value::Array(_)
        | Value::Integer(_)
        | Value::Float(_)
        | Value::Boolean(_)
        | Value::Datetime(_)
        | Value::Table(_)) => {
            return Err(field_error!(
                "{at}.command: expected a non-empty string (run with sh -c) or a non-empty array of strings (argv), found {}",
                describe(&v)
            ));
        }
    };
    let timeout = match raw.timeout {
        Some(v) => duration(&format!("{at}.timeout"), &v)?,
        None => DEFAULT_CHECK_TIMEOUT,
    };
    Ok(AcceptCheck::Command {
        argv,
        timeout_ms: millis(timeout),
    })
}

/// An optional string field of a file check.
fn text(at: &str, field: &str, v: Option<Value>) -> Result<Option<String>, FieldError> {
    match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(field_error!(
            "{at}.{field}: expected a string, found {}",
            describe(&v)
        )),
    }
}
