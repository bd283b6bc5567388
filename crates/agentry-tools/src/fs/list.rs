//! `fs.list`: a directory's entries beneath the working directory, sorted by name.

use std::sync::Arc;

use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::args::ListArgs;
use super::errors::{Op, path_error};
use super::resolve::{blocking, display_rel};
use super::root::{Entry, EntryKind};
use super::{FS_TIMEOUT_MS, LIST_TOOL, MAX_LIST_ENTRIES};
use crate::tool::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// The `fs.list` tool: lists a directory's entries, sorted by name.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListTool;

#[async_trait]
impl Tool for ListTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            LIST_TOOL,
            "List a directory inside the working directory (default: the working directory \
             itself). Returns entries sorted by name, each with kind (file, dir, symlink or \
             other) and size in bytes (0 for anything but files).",
            schema_for::<ListArgs>(),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope("fs.read")
        .timeout_ms(FS_TIMEOUT_MS)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ListArgs = parse_args(args)?;
        let rel = args.path.unwrap_or_else(|| ".".to_string());
        let shown = display_rel(&rel);
        let root = Arc::clone(&ctx.run.root);
        let path = rel.clone();
        let mut entries = blocking(move || root.list(&path))
            .await
            .map_err(|e| path_error(e, Op::List, &rel))?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let truncated = entries.len() > MAX_LIST_ENTRIES;
        entries.truncate(MAX_LIST_ENTRIES);

        let entries: Vec<Value> = entries
            .into_iter()
            .map(|entry| ListRow::from(entry).to_json())
            .collect();
        let mut data = json!({ "path": shown, "entries": entries });
        if truncated && let Some(obj) = data.as_object_mut() {
            obj.insert("truncated".to_string(), Value::Bool(true));
        }
        Ok(ToolOutput::data(data))
    }
}

/// One row of `fs.list`'s `entries`, as the model reads it.
struct ListRow {
    name: String,
    /// `file`, `dir`, `symlink` or `other`.
    kind: &'static str,
    /// Length in bytes for a file, else 0.
    bytes: u64,
}

impl From<Entry> for ListRow {
    fn from(entry: Entry) -> Self {
        let kind = match entry.kind {
            EntryKind::File => "file",
            EntryKind::Dir => "dir",
            EntryKind::Symlink => "symlink",
            EntryKind::Other => "other",
        };
        ListRow {
            name: entry.name,
            kind,
            bytes: entry.bytes,
        }
    }
}

impl ListRow {
    fn to_json(&self) -> Value {
        json!({ "name": self.name, "kind": self.kind, "bytes": self.bytes })
    }
}
