//! `fs.write`: replaces a file beneath the working directory atomically, never
//! inside agentry's artifact directory.

use std::ffi::OsString;
use std::sync::Arc;

use agentry_protocol::envelope::ToolError;
use agentry_protocol::fingerprint::sha256_hex;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::args::WriteArgs;
use super::errors::{Op, path_error};
use super::resolve::{blocking, display_rel, resource_ref};
use super::{FS_TIMEOUT_MS, WRITE_TOOL};
use crate::tool::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// The `fs.write` tool: replaces a file's content atomically, creating parent
/// directories as needed.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteTool;

/// The artifact directory's path under the root, which `fs.write` refuses.
fn protected(ctx: &ToolContext) -> Vec<OsString> {
    ctx.run
        .root
        .relative(&ctx.run.artifacts)
        .unwrap_or_default()
}

#[async_trait]
impl Tool for WriteTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            WRITE_TOOL,
            "Write a UTF-8 text file inside the working directory, replacing its content \
             atomically and creating missing parent directories. Returns the new length and sha256.",
            schema_for::<WriteArgs>(),
        )
        .effect(Effect::Reversible)
        .idempotency(Idempotency::Idempotent)
        .scope("fs.write")
        .timeout_ms(FS_TIMEOUT_MS)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: WriteArgs = parse_args(args)?;
        let rel = args.path;
        let shown = display_rel(&rel);
        let len = args.content.len() as u64;
        let sha256 = sha256_hex(args.content.as_bytes());
        let root = Arc::clone(&ctx.run.root);
        let protected = protected(ctx);
        let path = rel.clone();
        blocking(move || root.write_file(&path, args.content.as_bytes(), &protected))
            .await
            .map_err(|e| path_error(e, Op::Write, &rel))?;
        Ok(ToolOutput {
            data: json!({
                "path": shown,
                "bytes": len,
                "sha256": sha256,
            }),
            refs: vec![resource_ref(&shown, &sha256, len)],
        })
    }

    /// A unified diff from the file as it is (empty when it does not exist)
    /// to the content the call would write; `None` for a file that is not
    /// UTF-8 text of at most [`MAX_READ_BYTES`](super::MAX_READ_BYTES).
    fn preview(&self, args: &Value, ctx: &ToolContext) -> Option<String> {
        let args: WriteArgs = serde_json::from_value(args.clone()).ok()?;
        let before = match ctx
            .run
            .root
            .read_file(&args.path, super::MAX_READ_BYTES, false)
        {
            Ok(bytes) => String::from_utf8(bytes).ok()?,
            Err(super::PathError::NotFound) => String::new(),
            Err(_) => return None,
        };
        let shown = display_rel(&args.path);
        Some(unified_diff(&shown, &before, &args.content))
    }
}

/// The most of a diff a preview carries; past it, a line says how much more.
const MAX_PREVIEW_BYTES: usize = 64 * 1024;

/// `before` → `after` as a unified diff of `path` (three lines of context).
fn unified_diff(path: &str, before: &str, after: &str) -> String {
    let mut diff = similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string();
    if diff.len() > MAX_PREVIEW_BYTES {
        let mut cut = MAX_PREVIEW_BYTES;
        while !diff.is_char_boundary(cut) {
            cut -= 1;
        }
        let more = diff.len() - cut;
        diff.truncate(cut);
        diff.push_str(&format!("\n… {more} more bytes of diff not shown\n"));
    }
    diff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_is_a_unified_diff_of_the_file_and_is_capped() {
        let diff = unified_diff("notes.txt", "kept\nold\n", "kept\nnew\n");
        assert!(
            diff.starts_with("--- a/notes.txt\n+++ b/notes.txt\n@@"),
            "{diff}"
        );
        assert!(diff.contains("\n kept\n-old\n+new\n"), "{diff}");
        let created = unified_diff("new.txt", "", "hello\n");
        assert!(created.contains("+hello\n"), "{created}");
        let big = "é".repeat(MAX_PREVIEW_BYTES);
        let capped = unified_diff("big.txt", "", &big);
        assert!(capped.len() < MAX_PREVIEW_BYTES + 100, "{}", capped.len());
        assert!(capped.ends_with("more bytes of diff not shown\n"));
    }
}
