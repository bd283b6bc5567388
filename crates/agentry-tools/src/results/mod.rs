//! Results larger than a run's result cap, saved whole for the model to read
//! back in parts: [`save_result`] (the executor calls it, then keeps only the
//! result's head and the ref in the envelope; the saved file is the only copy
//! of the whole) and `result.read` ([`ResultReadTool`]).
//!
//! A saved result is the `data` of an envelope as JSON text, in
//! `<artifacts>/results/<sha256>.json`, created like every artifact (its
//! directory opened beneath the run's root with no link followed, the file
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, as the process tools' output capture does). The name is the
//! content's hash, so `result.read` checks that what it reads is what was saved
//! (a tool that can write in the working directory could change the file).
//!
//! `result.read` is granted to every run: it shows the model only what the
//! run's own tools already returned to it.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::{ResourceRef, ToolError};
use agentry_protocol::fingerprint::sha256_hex;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use rustix::fs::{Mode, OFlags};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::fs::read::{byte_range, text_part};
use crate::fs::{FilePart, PathError, WorkRoot, create_exclusive, read_part, regular_size};
use crate::tool::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// Name of the tool that reads saved results.
pub const RESULT_READ_TOOL: &str = "result.read";

/// The folder of saved results, in the run's artifact directory.
pub const RESULTS_DIR: &str = "results";

/// Largest saved result `result.read` reads (it hashes the whole file).
const MAX_SAVED_BYTES: u64 = 256 * 1024 * 1024;

/// Saves `text` (a result's data as JSON) as `<artifacts>/results/<sha256>.json`;
/// its reference shows the path relative to `workdir` when inside it.
pub fn save_result(
    root: &WorkRoot,
    workdir: &Path,
    artifacts: &Path,
    text: &[u8],
) -> Result<ResourceRef, PathError> {
    save_artifact(root, workdir, artifacts, RESULTS_DIR, "json", text)
}

/// Saves `bytes` as `<artifacts>/<dir>/<sha256>.<ext>`, created like every
/// artifact (see the module docs), for tools that return files by reference
/// (an MCP server's images); the reference shows the path relative to
/// `workdir` when inside it.
pub fn save_artifact(
    root: &WorkRoot,
    workdir: &Path,
    artifacts: &Path,
    dir: &str,
    ext: &str,
    bytes: &[u8],
) -> Result<ResourceRef, PathError> {
    let sha256 = sha256_hex(bytes);
    let dir = artifacts.join(dir);
    let name = format!("{sha256}.{ext}");
    let dir_fd = crate::artifacts::open_artifact_dir(root, &dir)?;
    let mut file = create_exclusive(dir_fd.as_fd(), &OsString::from(&name))?;
    file.write_all(bytes)?;
    Ok(ResourceRef {
        path: crate::artifacts::shown_path(workdir, &dir.join(&name)),
        sha256,
        bytes: bytes.len() as u64,
    })
}

/// Arguments of `result.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultReadArgs {
    /// The ref a cut result names (`<sha256>.json`).
    #[serde(rename = "ref")]
    pub reference: String,
    /// Read from this byte of the result's JSON text (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// Read at most this many bytes (1 to 1048576; default 1048576).
    #[serde(default)]
    pub limit: Option<u64>,
}

/// `result.read`: a part of a saved result.
#[derive(Debug, Default, Clone, Copy)]
pub struct ResultReadTool;

#[async_trait]
impl Tool for ResultReadTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            RESULT_READ_TOOL,
            "Read the rest of a tool result that was shown cut: give the `ref` it names \
             and the byte `offset` to read from (and optionally `limit`). Returns that part \
             of the result's JSON text and `next_offset`.",
            schema_for::<ResultReadArgs>(),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope(RESULT_READ_TOOL)
        .timeout_ms(10_000)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: ResultReadArgs = parse_args(args)?;
        let sha256 = saved_name(&args.reference)?.to_string();
        let range = byte_range(args.offset, args.limit)?;
        let root = Arc::clone(&ctx.run.root);
        let dir = ctx.run.artifacts.join(RESULTS_DIR);
        let name = args.reference.clone();
        let part = tokio::task::spawn_blocking(move || read_saved(&root, &dir, &name, range))
            .await
            .map_err(|e| ToolError::new(ErrorCode::Einternal, e.to_string()))?
            .map_err(|e| read_error(&args.reference, e))?;
        if part.sha256 != sha256 {
            return Err(ToolError::new(
                ErrorCode::Eprecond,
                format!(
                    "the saved result {} was changed after it was saved",
                    args.reference
                ),
            )
            .retryable(false));
        }
        let text = text_part(&part, range.offset, &args.reference)?;
        Ok(ToolOutput {
            data: json!({
                "ref": args.reference,
                "content": text.content,
                "offset": text.offset,
                "next_offset": text.next_offset,
                "eof": text.next_offset >= part.len,
                "bytes": part.len,
            }),
            refs: Vec::new(),
        })
    }
}

/// The hash in a ref: `<64 hex digits>.json`, nothing else.
fn saved_name(reference: &str) -> Result<&str, ToolError> {
    reference
        .strip_suffix(".json")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .ok_or_else(|| {
            ToolError::new(
                ErrorCode::Einval,
                format!(
                    "ref: expected the ref a cut result names (<sha256>.json), found {reference:?}"
                ),
            )
            .retryable(false)
        })
}

/// Reads `range` of the saved result `name` in `dir`, never through a link.
fn read_saved(
    root: &WorkRoot,
    dir: &Path,
    name: &str,
    range: crate::fs::ByteRange,
) -> Result<FilePart, PathError> {
    if let Some(parts) = root.relative(dir) {
        let mut rel: Vec<String> = parts
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        rel.push(name.to_string());
        return root.read_part(&rel.join("/"), range, MAX_SAVED_BYTES, false);
    }
    let dir_fd = crate::artifacts::open_artifact_dir(root, dir)?;
    let fd = rustix::fs::openat(
        dir_fd.as_fd(),
        name,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::NOENT => PathError::NotFound,
        rustix::io::Errno::LOOP => PathError::IsALink,
        other => other.into(),
    })?;
    let size = regular_size(&fd)?;
    if size > MAX_SAVED_BYTES {
        return Err(PathError::TooLarge {
            bytes: size,
            cap: MAX_SAVED_BYTES,
        });
    }
    read_part(std::fs::File::from(fd), range, MAX_SAVED_BYTES)
}

fn read_error(reference: &str, e: PathError) -> ToolError {
    match e {
        PathError::NotFound => ToolError::new(
            ErrorCode::Einval,
            format!("no saved result {reference}: give the ref a cut result names"),
        )
        .retryable(false),
        other @ (PathError::Empty
        | PathError::Nul
        | PathError::Absolute
        | PathError::ParentDir
        | PathError::Escapes
        | PathError::DanglingLink
        | PathError::TooManyLinks
        | PathError::NotADirectory
        | PathError::IsADirectory
        | PathError::IsALink
        | PathError::NotRegular { .. }
        | PathError::TooLarge { .. }
        | PathError::Protected
        | PathError::IsRoot
        | PathError::TooLong { .. }
        | PathError::TooDeep { .. }
        | PathError::Changed
        | PathError::Io(_)) => ToolError::new(
            ErrorCode::Eunavail,
            format!("cannot read the saved result {reference}: {other}"),
        ),
    }
}

#[cfg(test)]
mod tests;
