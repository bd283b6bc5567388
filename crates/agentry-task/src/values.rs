//! Checks of single values in task.toml, shared by every table: each returns
//! the value or a [`FieldError`] naming the field, what was expected and what
//! was found (`budget.max_steps: expected a positive integer, found "ten"`).

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::Value;

use crate::{MAX_COST, MAX_COUNT, MAX_DURATION};

/// What is wrong with one field of task.toml, naming it. The text is what the
/// user reads after the file name (`TaskError::Invalid`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError(pub(crate) String);

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `Err(FieldError(format!(...)))`, the shape of every refusal in this crate.
macro_rules! field_error {
    ($($arg:tt)*) => {
        $crate::values::FieldError(format!($($arg)*))
    };
}
pub(crate) use field_error;

/// Checks a table's keys. `path` names the table in the error.
pub(crate) fn section<T: DeserializeOwned>(path: &str, v: Value) -> Result<T, FieldError> {
    if !v.is_table() {
        return Err(field_error!(
            "{path}: expected a table, found {}",
            describe(&v)
        ));
    }
    v.try_into()
        .map_err(|e: toml::de::Error| field_error!("{path}: {}", e.message().trim()))
}

/// A TOML syntax error with its line and column.
pub(crate) fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!(
                "not valid TOML at line {line}, column {column}: {}",
                e.message().trim()
            )
        }
        None => format!("not valid TOML: {}", e.message().trim()),
    }
}

/// A list of tool patterns (names, scopes, `prefix.*`, `*`), as in `tools.grant`.
pub(crate) fn patterns(field: &str, value: Value) -> Result<Vec<String>, FieldError> {
    let Value::Array(items) = value else {
        return Err(field_error!(
            "{field}: expected an array of strings, found {}",
            describe(&value)
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let Value::String(p) = item else {
            return Err(field_error!(
                "{at}: expected a string, found {}",
                describe(item)
            ));
        };
        // Mirrors the runtime's grant matching: a pattern that can never match is
        // a typo, and a silent one would surface only as EPERM mid-run.
        let star = p.find('*');
        let valid = !p.is_empty()
            && !p.chars().any(char::is_whitespace)
            && (star.is_none() || p == "*" || (p.ends_with(".*") && star == Some(p.len() - 1)));
        if !valid {
            return Err(field_error!(
                "{at}: {p:?} is not a grant pattern; use a tool name, an auth scope, \"prefix.*\" or \"*\""
            ));
        }
        out.push(p.clone());
    }
    Ok(out)
}

/// A positive integer, at most [`MAX_COUNT`].
pub(crate) fn positive(at: &str, v: &Value) -> Result<u64, FieldError> {
    match v.as_integer() {
        Some(n) if n > 0 => bounded_count(at, n),
        Some(_) | None => Err(field_error!(
            "{at}: expected a positive integer, found {}",
            describe(v)
        )),
    }
}

/// A non-negative integer (0 disables), at most [`MAX_COUNT`].
pub(crate) fn non_negative(at: &str, v: &Value) -> Result<u64, FieldError> {
    match v.as_integer() {
        Some(n) if n >= 0 => bounded_count(at, n),
        Some(_) | None => Err(field_error!(
            "{at}: expected a non-negative integer (0 disables), found {}",
            describe(v)
        )),
    }
}

/// A non-negative TOML integer, at most [`MAX_COUNT`].
fn bounded_count(at: &str, n: i64) -> Result<u64, FieldError> {
    match u64::try_from(n) {
        Ok(n) if n <= MAX_COUNT => Ok(n),
        _ => Err(field_error!("{at}: at most {MAX_COUNT}, found {n}")),
    }
}

/// Money as a positive number, at most [`MAX_COST`], stored in micro-units.
pub(crate) fn money(at: &str, v: &Value) -> Result<u64, FieldError> {
    let amount = match v {
        Value::Float(f) => *f,
        Value::Integer(n) => *n as f64,
        Value::String(_)
        | Value::Boolean(_)
        | Value::Datetime(_)
        | Value::Array(_)
        | Value::Table(_) => {
            return Err(field_error!(
                "{at}: expected a positive number, found {}",
                describe(v)
            ));
        }
    };
    if amount.is_nan() || amount <= 0.0 || amount.is_infinite() {
        return Err(field_error!(
            "{at}: expected a positive number, found {}",
            describe(v)
        ));
    }
    if amount > MAX_COST {
        return Err(field_error!(
            "{at}: at most {MAX_COST:.0} (money is counted in millionths), found {}",
            describe(v)
        ));
    }
    let micros = (amount * 1_000_000.0).round();
    if micros < 1.0 {
        return Err(field_error!(
            "{at}: at least 0.000001 (money is counted in millionths), found {}",
            describe(v)
        ));
    }
    // In range: at most 1e18, below u64::MAX.
    Ok(micros as u64)
}

/// A duration string (`"30s"`), longer than zero, at most [`MAX_DURATION`].
pub(crate) fn duration(at: &str, v: &Value) -> Result<Duration, FieldError> {
    let Value::String(s) = v else {
        return Err(field_error!(
            "{at}: expected a duration string such as \"30s\", \"500ms\" or \"2m\", found {}",
            describe(v)
        ));
    };
    match humantime::parse_duration(s) {
        Ok(d) if d > MAX_DURATION => Err(field_error!(
            "{at}: at most 365 days (\"365d\"), found {s:?}"
        )),
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(field_error!("{at}: must be longer than zero, found {s:?}")),
        Err(e) => Err(field_error!(
            "{at}: expected a duration such as \"30s\", \"500ms\" or \"2m\", found {s:?} ({e})"
        )),
    }
}

/// Whole milliseconds, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A non-empty relative path with no `..`: it must stay inside its base directory.
pub(crate) fn relative_path(at: &str, v: &Value) -> Result<String, FieldError> {
    let Value::String(s) = v else {
        return Err(field_error!(
            "{at}: expected a relative path, found {}",
            describe(v)
        ));
    };
    let inside = !s.is_empty()
        && Path::new(s)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(s.clone())
    } else {
        Err(field_error!(
            "{at}: expected a relative path without \"..\", found {s:?}"
        ))
    }
}

/// The task id: the directory's name (of its canonical path for `.` and such).
pub(crate) fn task_id(dir: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(dir)
        .or_else(|| std::fs::canonicalize(dir).ok().and_then(|p| name(&p)))
        .unwrap_or_else(|| "task".to_string())
}

/// A value as it is written in TOML, short, for "found ..." in errors.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Integer(n) => n.to_string(),
        // Debug, not Display: Display writes 1.8446744073709552e19 as
        // "18446744073709552000", an integer the user never wrote.
        Value::Float(f) => format!("{f:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => format!("the date-time {d}"),
        Value::Array(_) => "an array".to_string(),
        Value::Table(_) => "a table".to_string(),
    }
}

/// A file of CA certificates (`policy.ca_cert` for the model client,
/// `tools.mcp[i].ca_cert` for an MCP server's), relative to the task
/// directory `dir` (or absolute), which must exist now; the client that
/// trusts it checks that it is PEM when it is built.
pub(crate) fn ca_file(at: &str, v: &Value, dir: &Path) -> Result<PathBuf, FieldError> {
    let path = match v.as_str() {
        Some(s) if !s.trim().is_empty() => dir.join(s),
        Some(_) | None => {
            return Err(field_error!(
                "{at}: expected the path of a PEM file, found {}",
                describe(v)
            ));
        }
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(field_error!(
            "{at}: {} does not exist or is not a file (a relative path is taken from the task directory)",
            path.display()
        ))
    }
}
