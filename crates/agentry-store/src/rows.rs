//! How run state is laid out in a database's rows, whatever the database:
//! the integer and name encodings, large outputs stored once by content hash,
//! and the errors of encoding and decoding. Both `SqliteStore` and
//! `PostgresStore` store rows this way, so a value reads back the same from
//! either.

use agentry_protocol::state::RunStatus;
use agentry_protocol::stop::StopReason;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::{INLINE_LIMIT, RunSummary, StoreError};

/// The key that replaces an envelope's `data` when it is stored by reference.
/// No envelope field starts with `$`, so it cannot be confused with real data.
pub(crate) const BLOB_KEY: &str = "$data_blob";

/// Stores a `u64` in a signed 64-bit column, bit for bit (round-trips exactly;
/// no timestamp, step or version comes near `i64::MAX`, so ordering holds).
pub(crate) fn int(v: u64) -> i64 {
    v as i64
}

/// Reads a signed 64-bit column back into the `u64` it was written from.
pub(crate) fn uint(v: i64) -> u64 {
    v as u64
}

/// A value this build could not encode (should not happen for the store's
/// own types, but serde can refuse e.g. maps with non-string keys).
pub(crate) fn encode_error(path: &str, what: &str, e: serde_json::Error) -> StoreError {
    StoreError::Io {
        path: path.to_string(),
        message: format!("cannot encode {what}: {e}"),
    }
}

/// A stored row this build cannot read back.
pub(crate) fn decode_error(path: &str, what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        path: path.to_string(),
        message: format!("cannot read {what}: {e}"),
    }
}

/// What a decode error names: "the {part} of run {run_id:?}".
pub(crate) fn what(part: &str, run_id: &str) -> String {
    format!("the {part} of run {run_id:?}")
}

/// Parses a stored JSON text.
pub(crate) fn parse<T: DeserializeOwned>(
    path: &str,
    what: &str,
    json: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(json).map_err(|e| decode_error(path, what, e))
}

/// A status's stored name (its serde name, e.g. `awaiting_approval`).
pub(crate) fn status_name(status: RunStatus, path: &str) -> Result<String, StoreError> {
    match serde_json::to_value(status) {
        Ok(Value::String(s)) => Ok(s),
        Ok(other) => Err(StoreError::Io {
            path: path.to_string(),
            message: format!("run status serialized as {other}, not a string"),
        }),
        Err(e) => Err(encode_error(path, "a run status", e)),
    }
}

/// A stored snake_case name (status, stop reason) back into its enum.
fn from_name<T: DeserializeOwned>(
    path: &str,
    run_id: &str,
    what: &str,
    name: String,
) -> Result<T, StoreError> {
    serde_json::from_value(Value::String(name))
        .map_err(|e| decode_error(path, &format!("the {what} of run {run_id:?}"), e))
}

/// A `runs` row's summary columns as stored, before their names are parsed.
pub(crate) struct RawSummary {
    pub(crate) run_id: String,
    pub(crate) task_id: String,
    pub(crate) parent_id: Option<String>,
    pub(crate) status: String,
    pub(crate) stop_reason: Option<String>,
    pub(crate) version: i64,
    pub(crate) created: i64,
    pub(crate) updated: i64,
}

impl RawSummary {
    /// The summary, its status and stop reason parsed.
    pub(crate) fn parse(self, path: &str) -> Result<RunSummary, StoreError> {
        let status: RunStatus = from_name(path, &self.run_id, "status", self.status)?;
        let stop_reason: Option<StopReason> = self
            .stop_reason
            .map(|s| from_name(path, &self.run_id, "stop reason", s))
            .transpose()?;
        Ok(RunSummary {
            run_id: self.run_id,
            task_id: self.task_id,
            parent_id: self.parent_id,
            status,
            stop_reason,
            version: uint(self.version),
            created_at_ms: uint(self.created),
            updated_at_ms: uint(self.updated),
        })
    }
}

/// Serializes `row`, whose envelope (the object under `key`) may have `data`;
/// data above [`INLINE_LIMIT`] bytes is handed to `put` (sha256 hex, bytes)
/// to be stored once, and the row keeps only the hash under [`BLOB_KEY`].
pub(crate) fn encode_by_reference<E: From<StoreError>>(
    path: &str,
    row: &impl serde::Serialize,
    key: &str,
    mut put: impl FnMut(&str, &[u8]) -> Result<(), E>,
) -> Result<String, E> {
    let encode = |e| encode_error(path, "a row with a tool result", e);
    let mut value = serde_json::to_value(row).map_err(encode)?;
    if let Some(envelope) = value.get_mut(key).and_then(Value::as_object_mut)
        && let Some(data) = envelope.remove("data")
    {
        let bytes = serde_json::to_vec(&data).map_err(encode)?;
        if bytes.len() > INLINE_LIMIT {
            let sha = hex::encode(Sha256::digest(&bytes));
            put(&sha, &bytes)?;
            envelope.insert(BLOB_KEY.to_string(), Value::String(sha));
        } else {
            envelope.insert("data".to_string(), data);
        }
    }
    Ok(serde_json::to_string(&value).map_err(encode)?)
}

/// Parses a row whose envelope (the object under `key`) may hold its `data`
/// by reference, putting the data back; `get` reads a blob by its hash.
pub(crate) fn decode_inline<T: DeserializeOwned, E: From<StoreError>>(
    path: &str,
    what: &str,
    json: &str,
    key: &str,
    mut get: impl FnMut(&str) -> Result<Option<Vec<u8>>, E>,
) -> Result<T, E> {
    // Most rows hold no reference: parse them directly.
    if !json.contains(BLOB_KEY) {
        return Ok(parse(path, what, json)?);
    }
    let mut value: Value = parse(path, what, json)?;
    if let Some(envelope) = value.get_mut(key).and_then(Value::as_object_mut)
        && let Some(Value::String(sha)) = envelope.remove(BLOB_KEY)
    {
        let bytes =
            get(&sha)?.ok_or_else(|| decode_error(path, what, format!("blob {sha} is missing")))?;
        let data: Value = serde_json::from_slice(&bytes)
            .map_err(|e| decode_error(path, &format!("blob {sha}"), e))?;
        envelope.insert("data".to_string(), data);
    }
    Ok(serde_json::from_value(value).map_err(|e| decode_error(path, what, e))?)
}

/// The hashes stored under [`BLOB_KEY`] anywhere in a row's JSON.
pub(crate) fn blob_refs(text: &str) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, inner) in map {
                    if let (true, Some(sha)) = (key == BLOB_KEY, inner.as_str()) {
                        out.push(sha.to_string());
                    } else {
                        walk(inner, out);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(value) = serde_json::from_str(text) {
        walk(&value, &mut out);
    }
    out
}

/// What a backend does with each write of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step<'a> {
    /// Apply it.
    Apply,
    /// Skip it, superseded later in the same batch: within one transaction
    /// only a run's last checkpoint and a call's last ledger row survive, and
    /// a group commit carries several of each (a step's decision, then the
    /// step). Its run must still exist (else the batch fails `NoRun`).
    CheckRun(&'a str),
}

/// The [`Step`] of each write of a batch.
pub(crate) fn plan(writes: &[crate::Write]) -> Vec<Step<'_>> {
    use std::collections::HashMap;

    use crate::Write;
    let mut last_checkpoint: HashMap<&str, usize> = HashMap::new();
    let mut last_row: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, w) in writes.iter().enumerate() {
        match w {
            Write::Checkpoint { run_id, .. } => {
                last_checkpoint.insert(run_id, i);
            }
            Write::Ledger { run_id, entry } => {
                last_row.insert((run_id, &entry.call_id), i);
            }
            // Only checkpoints and ledger rows supersede earlier ones.
            Write::CreateRun(_)
            | Write::AppendSession { .. }
            | Write::LedgerProcess { .. }
            | Write::LedgerRemote { .. }
            | Write::SetTimer { .. }
            | Write::ClearTimer { .. }
            | Write::Enqueue { .. }
            | Write::Dequeue { .. }
            | Write::Claim { .. }
            | Write::Heartbeat { .. }
            | Write::Release { .. }
            | Write::Fence { .. } => {}
        }
    }
    fn step(last: bool, run_id: &str) -> Step<'_> {
        if last {
            Step::Apply
        } else {
            Step::CheckRun(run_id)
        }
    }
    writes
        .iter()
        .enumerate()
        .map(|(i, w)| match w {
            Write::Checkpoint { run_id, .. } => {
                step(last_checkpoint.get(run_id.as_str()) == Some(&i), run_id)
            }
            Write::Ledger { run_id, entry } => step(
                last_row.get(&(run_id.as_str(), entry.call_id.as_str())) == Some(&i),
                run_id,
            ),
            Write::CreateRun(_)
            | Write::AppendSession { .. }
            | Write::LedgerProcess { .. }
            | Write::LedgerRemote { .. }
            | Write::SetTimer { .. }
            | Write::ClearTimer { .. }
            | Write::Enqueue { .. }
            | Write::Dequeue { .. }
            | Write::Claim { .. }
            | Write::Heartbeat { .. }
            | Write::Release { .. }
            | Write::Fence { .. } => Step::Apply,
        })
        .collect()
}
