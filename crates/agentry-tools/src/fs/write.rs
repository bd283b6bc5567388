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
    ctx.root.relative(&ctx.artifacts).unwrap_or_default()
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
        let root = Arc::clone(&ctx.root);
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
}
