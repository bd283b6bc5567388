//! `fs.read`: a UTF-8 text file beneath the working directory, with its sha256;
//! whole (at most 1 MiB), or a part of it by byte `offset` and `limit`.

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
use super::root::{ByteRange, FilePart};
use super::{FS_TIMEOUT_MS, MAX_PART_FILE_BYTES, MAX_READ_BYTES, READ_TOOL};
use crate::tool::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// The `fs.read` tool: returns a UTF-8 text file (at most [`MAX_READ_BYTES`]),
/// or a part of one (at most [`MAX_READ_BYTES`] of a file of at most
/// [`MAX_PART_FILE_BYTES`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadTool;

#[async_trait]
impl Tool for ReadTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            READ_TOOL,
            "Read a UTF-8 text file (at most 1 MiB) inside the working directory. \
             Returns its content, length and sha256. For a part of a larger file give \
             `offset` and/or `limit` in bytes; the answer's `next_offset` is where the \
             next part starts.",
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
        let root = Arc::clone(&ctx.run.root);
        let path = rel.clone();
        if args.offset.is_some() || args.limit.is_some() {
            let range = byte_range(args.offset, args.limit)?;
            let part = blocking(move || root.read_part(&path, range, MAX_PART_FILE_BYTES, true))
                .await
                .map_err(|e| path_error(e, Op::Read, &rel))?;
            let text = text_part(&part, range.offset, &rel)?;
            return Ok(ToolOutput {
                refs: vec![resource_ref(&shown, &part.sha256, part.len)],
                data: json!({
                    "path": shown,
                    "content": text.content,
                    "offset": text.offset,
                    "next_offset": text.next_offset,
                    "eof": text.next_offset >= part.len,
                    "bytes": part.len,
                    "sha256": part.sha256,
                }),
            });
        }
        let bytes = blocking(move || root.read_file(&path, MAX_READ_BYTES, true))
            .await
            .map_err(|e| path_error(e, Op::Read, &rel))?;
        let len = bytes.len() as u64;
        let sha256 = sha256_hex(&bytes);
        let content = String::from_utf8(bytes).map_err(|e| not_utf8(&rel, e.utf8_error()))?;
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

/// `offset` (default 0) and `limit` (default and at most [`MAX_READ_BYTES`],
/// at least 1).
pub(crate) fn byte_range(offset: Option<u64>, limit: Option<u64>) -> Result<ByteRange, ToolError> {
    let limit = limit.unwrap_or(MAX_READ_BYTES);
    if limit == 0 || limit > MAX_READ_BYTES {
        return Err(ToolError::new(
            ErrorCode::Einval,
            format!("limit: expected 1 to {MAX_READ_BYTES} bytes, found {limit}"),
        )
        .with_action("read the file in parts of at most 1 MiB"));
    }
    Ok(ByteRange {
        offset: offset.unwrap_or(0),
        limit,
    })
}

/// A part of a file as text.
pub(crate) struct TextPart {
    pub(crate) content: String,
    /// Where the text starts: the requested offset, moved past a character
    /// the offset cut.
    pub(crate) offset: u64,
    /// Where the text ends and the next part starts.
    pub(crate) next_offset: u64,
}

/// The part as UTF-8 text, without a character cut at either end (a part that
/// starts inside a character starts after it; one that ends inside a character
/// ends before it). An offset past the end of the file is `EINVAL`.
pub(crate) fn text_part(part: &FilePart, offset: u64, what: &str) -> Result<TextPart, ToolError> {
    if offset > part.len {
        return Err(ToolError::new(
            ErrorCode::Einval,
            format!(
                "offset {offset} is past the end of {what} ({} bytes)",
                part.len
            ),
        )
        .with_action("give an offset below the length"));
    }
    let bytes = &part.bytes;
    // A continuation byte (0b10xx_xxxx) cannot start a character.
    let start = bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0xc0) == 0x80)
        .count();
    let at_eof = offset + bytes.len() as u64 >= part.len;
    let end = if at_eof {
        bytes.len()
    } else {
        complete_prefix_len(bytes).max(start)
    };
    let content = std::str::from_utf8(&bytes[start..end])
        .map_err(|e| not_utf8(what, e))?
        .to_string();
    Ok(TextPart {
        content,
        offset: offset + start as u64,
        next_offset: offset + end as u64,
    })
}

/// Length of `bytes` without a trailing, incomplete UTF-8 sequence.
fn complete_prefix_len(bytes: &[u8]) -> usize {
    let len = bytes.len();
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if byte & 0xc0 == 0x80 {
            continue;
        }
        let needed = match byte {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return len,
        };
        return if back < needed { len - back } else { len };
    }
    len
}

fn not_utf8(what: &str, e: std::str::Utf8Error) -> ToolError {
    ToolError::new(
        ErrorCode::Einval,
        format!(
            "file is not valid utf-8 text: {what} (invalid byte at offset {}); fs.read only returns text",
            e.valid_up_to()
        ),
    )
    .retryable(false)
}
