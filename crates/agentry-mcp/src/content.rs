//! A `tools/call` result as an agentry envelope's data: structured content as
//! is, text as text, files (images, audio, embedded resources) saved under the
//! run's artifacts (`<artifacts>/mcp/<sha256>.<ext>`) and referenced, never
//! inlined; `isError: true` as an error carrying the server's text.

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::{ResourceRef, ToolError};
use agentry_tools::{ToolContext, ToolOutput, save_artifact};
use base64::Engine;
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde_json::{Value, json};

/// Folder under the run's artifacts where MCP files go.
pub const MCP_ARTIFACTS_DIR: &str = "mcp";

/// Maps `result` of tool `tool` (agentry name) to the call's output.
pub(crate) fn to_output(
    tool: &str,
    result: CallToolResult,
    ctx: &ToolContext,
) -> Result<ToolOutput, ToolError> {
    if result.is_error == Some(true) {
        let text = texts(&result.content);
        let message = if text.is_empty() {
            result
                .structured_content
                .as_ref()
                .map_or_else(|| "(no message)".to_string(), Value::to_string)
        } else {
            text
        };
        return Err(ToolError::new(
            ErrorCode::Einval,
            format!("{tool} reported an error: {message}"),
        )
        .retryable(false)
        .with_action("read the server's message; change the arguments or try another way"));
    }
    let mut refs = Vec::new();
    let mut items = Vec::new();
    for block in result.content {
        items.push(block_data(tool, block, ctx, &mut refs)?);
    }
    let data = match result.structured_content {
        Some(structured) => structured,
        None => match <[Value; 1]>::try_from(items) {
            // One text block is the data itself; anything else a list.
            Ok([single]) => single,
            Err(items) if items.is_empty() => Value::Null,
            Err(items) => Value::Array(items),
        },
    };
    Ok(ToolOutput { data, refs })
}

/// The text blocks, joined.
// rmcp's `ContentBlock` is non_exhaustive: kinds it adds are not text.
#[allow(clippy::wildcard_enum_match_arm)]
fn texts(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            ContentBlock::Image(_)
            | ContentBlock::Audio(_)
            | ContentBlock::Resource(_)
            | ContentBlock::ResourceLink(_)
            | _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One content block as data; files are saved and referenced.
fn block_data(
    tool: &str,
    block: ContentBlock,
    ctx: &ToolContext,
    refs: &mut Vec<ResourceRef>,
) -> Result<Value, ToolError> {
    let (kind, mime, bytes, uri) = match block {
        ContentBlock::Text(t) => return Ok(Value::String(t.text)),
        ContentBlock::ResourceLink(link) => {
            return Ok(json!({"type": "resource_link", "uri": link.uri, "name": link.name}));
        }
        ContentBlock::Image(image) => ("image", image.mime_type, decode(tool, &image.data)?, None),
        ContentBlock::Audio(audio) => ("audio", audio.mime_type, decode(tool, &audio.data)?, None),
        ContentBlock::Resource(embedded) => match embedded.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => (
                "resource",
                mime_type.unwrap_or_else(|| "text/plain".into()),
                text.into_bytes(),
                Some(uri),
            ),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => (
                "resource",
                mime_type.unwrap_or_else(|| "application/octet-stream".into()),
                decode(tool, &blob)?,
                Some(uri),
            ),
            other => return Ok(serde_json::to_value(other).unwrap_or(Value::Null)),
        },
        other => return Ok(serde_json::to_value(other).unwrap_or(Value::Null)),
    };
    let saved = save_artifact(
        &ctx.run.root,
        &ctx.run.workdir,
        &ctx.run.artifacts,
        MCP_ARTIFACTS_DIR,
        extension(&mime),
        &bytes,
    )
    .map_err(|e| {
        ToolError::new(
            ErrorCode::Einternal,
            format!("{tool} returned a {kind} ({mime}) that could not be saved: {e}"),
        )
    })?;
    let mut item = json!({
        "type": kind,
        "mime_type": mime,
        "path": saved.path,
        "bytes": saved.bytes,
        "sha256": saved.sha256,
    });
    if let Some(uri) = uri {
        item["uri"] = Value::String(uri);
    }
    refs.push(saved);
    Ok(item)
}

fn decode(tool: &str, data: &str) -> Result<Vec<u8>, ToolError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| {
            ToolError::new(
                ErrorCode::Einternal,
                format!("{tool} returned binary content that is not valid base64: {e}"),
            )
        })
}

/// A file extension for a MIME type (`bin` when unknown).
pub(crate) fn extension(mime: &str) -> &'static str {
    let essence = mime.split(';').next().unwrap_or("").trim();
    match essence.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "audio/wav" | "audio/x-wav" => "wav",
        "audio/mpeg" => "mp3",
        "audio/ogg" => "ogg",
        "application/json" => "json",
        "application/pdf" => "pdf",
        "text/plain" => "txt",
        "text/markdown" => "md",
        "text/html" => "html",
        "text/csv" => "csv",
        _ => "bin",
    }
}

#[cfg(test)]
mod tests {
    use super::extension;

    #[test]
    fn extensions_follow_the_mime_essence() {
        assert_eq!(extension("image/png"), "png");
        assert_eq!(extension("IMAGE/JPEG; q=1"), "jpg");
        assert_eq!(extension("application/x-unknown"), "bin");
        assert_eq!(extension(""), "bin");
    }
}
