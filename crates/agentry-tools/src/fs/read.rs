//! `fs.read`: a UTF-8 text file beneath the working directory, with its sha256.

use std::sync::Arc;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_protocol::fingerprint::sha256_hex;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::args::ReadArgs;
use super::errors::{Op, path_error};
use super::resolve::{blocking, display_rel, resource_ref};
use super::{FS_TIMEOUT_MS, MAX_READ_BYTES, READ_TOOL};
use crate::tool::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// The `fs.read` tool: returns a UTF-8 text file (at most [`MAX_READ_BYTES`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadTool;

#[async_trait]
impl Tool for ReadTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            READ_TOOL,
            "Read a UTF-8 text file (at most 1 MiB) inside the working directory. \
             Returns its content, length and sha256.",
            schema_for::<ReadArgs>(),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope("fs.read")
        .timeout_ms(FS_TIMEOUT_MS)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ReadArgs = parse_args(args)?;
        let rel = args.path;
        let shown = display_rel(&rel);
        let root = Arc::clone(&ctx.root);
        let path = rel.clone();
        let bytes = blocking(move || root.read_file(&path, MAX_READ_BYTES, true))
            .await
            .map_err(|e| path_error(e, Op::Read, &rel))?;
        let len = bytes.len() as u64;
        let sha256 = sha256_hex(&bytes);
        let content = String::from_utf8(bytes).map_err(|e| {
            ToolError::new(
                ErrorCode::Einval,
                format!(
                    "file is not valid utf-8 text: {rel} (invalid byte at offset {}); fs.read only returns text",
                    e.utf8_error().valid_up_to()
                ),
            )
            .retryable(false)
        })?;

        Ok(ToolOutput {
            data: json!({
                "path": shown,
                "content": content,
                "bytes": len,
                "sha256": sha256,
            }),
            refs: vec![resource_ref(&shown, &sha256, len)],
        })
    }
}
