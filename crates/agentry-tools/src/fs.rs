//! `fs.read`, `fs.write`, `fs.list`: file tools confined to the run's working directory.
//!
//! Every path a model supplies is resolved beneath the run's [`WorkRoot`], a
//! handle on the working directory opened once for the run (see `fs/root.rs`):
//! absolute paths and `..` components are refused, symbolic links are followed
//! only while they stay inside, and the check and the use are one operation, so
//! a model that swaps a file or a directory for a link mid-call cannot get a
//! read, a write or a listing outside. Reads take regular files only, opened
//! without blocking (a FIFO is refused, not waited on).
//!
//! `fs.write` never writes into agentry's artifact directory (`.agentry` by
//! default, where large process outputs are saved), so what a reference points
//! to is what agentry wrote; `fs.read` reads it as any other file.
//!
//! Results carry a [`ResourceRef`] (relative path, sha256, length) so changes to a
//! file between two observations are detectable.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::{ResourceRef, ToolError};
use agentry_protocol::fingerprint::sha256_hex;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

mod root;

pub use root::{
    Entry, EntryKind, PathError, WorkRoot, components, create_exclusive, open_dir_nofollow,
};

/// Name of the read tool.
pub const READ_TOOL: &str = "fs.read";
/// Name of the write tool.
pub const WRITE_TOOL: &str = "fs.write";
/// Name of the list tool.
pub const LIST_TOOL: &str = "fs.list";

/// Largest file `fs.read` returns, in bytes (1 MiB); the content is returned inline.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Most entries `fs.list` returns; a longer listing is cut (after sorting) and the
/// data gets `"truncated": true`.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// Per-call timeout of the file tools, in milliseconds.
const FS_TIMEOUT_MS: u64 = 10_000;

const ESCAPE_ACTION: &str = "use a relative path inside the working directory";
const LIST_ACTION: &str = "call fs.list to see what exists";

/// Arguments of `fs.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Path of the file, relative to the working directory.
    pub path: String,
}

/// Arguments of `fs.write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// Path of the file, relative to the working directory. Missing parent
    /// directories are created.
    pub path: String,
    /// The full new content of the file (UTF-8 text).
    pub content: String,
}

/// Arguments of `fs.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Directory to list, relative to the working directory; defaults to `"."`.
    #[serde(default)]
    pub path: Option<String>,
}

/// The `fs.read` tool: returns a UTF-8 text file (at most [`MAX_READ_BYTES`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct ReadTool;

/// The `fs.write` tool: replaces a file's content atomically, creating parent
/// directories as needed.
#[derive(Debug, Default, Clone, Copy)]
pub struct WriteTool;

/// The `fs.list` tool: lists a directory's entries, sorted by name.
#[derive(Debug, Default, Clone, Copy)]
pub struct ListTool;

fn eperm(message: String) -> ToolError {
    ToolError::new(ErrorCode::Eperm, message)
        .retryable(false)
        .with_action(ESCAPE_ACTION)
}

fn escapes(rel: &str) -> ToolError {
    eperm(format!("path escapes the working directory: {rel}"))
}

/// Maps an I/O error met while `doing` something with `rel` to a [`ToolError`].
fn io_error(doing: &str, rel: &str, e: &io::Error) -> ToolError {
    match e.kind() {
        io::ErrorKind::NotFound => ToolError::new(
            ErrorCode::Einval,
            format!("no such file or directory: {rel}"),
        )
        .with_action(LIST_ACTION),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => ToolError::new(
            ErrorCode::Eperm,
            format!("permission denied while {doing} {rel}"),
        )
        .retryable(false),
        io::ErrorKind::NotADirectory => ToolError::new(
            ErrorCode::Einval,
            format!("a component of the path is not a directory: {rel}"),
        )
        .with_action(LIST_ACTION),
        io::ErrorKind::IsADirectory => {
            ToolError::new(ErrorCode::Einval, format!("is a directory: {rel}"))
                .with_action(LIST_ACTION)
        }
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => {
            ToolError::new(ErrorCode::Einval, format!("invalid path: {rel}"))
                .with_action("fix the path and call again")
        }
        io::ErrorKind::Interrupted
        | io::ErrorKind::TimedOut
        | io::ErrorKind::WouldBlock
        | io::ErrorKind::ResourceBusy => ToolError::new(
            ErrorCode::Eunavail,
            format!("transient i/o error while {doing} {rel}: {e}"),
        ),
        _ => ToolError::new(
            ErrorCode::Einternal,
            format!("i/o error while {doing} {rel}: {e}"),
        ),
    }
}

/// Checks `rel` lexically and returns its normal components: absolute paths and
/// `..` are `EPERM`, an empty path is `EINVAL`; `.` components are dropped.
fn lexical_components(rel: &str) -> Result<Vec<OsString>, ToolError> {
    components(rel).map_err(|e| path_error(e, Op::Read, rel))
}

/// The normalized relative form of `rel` used in results: normal components joined
/// with `/`, or `.` for the working directory itself. Call after
/// [`resolve_in_workdir`] succeeded.
fn display_rel(rel: &str) -> String {
    let parts: Vec<String> = Path::new(rel)
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    }
}

/// Resolves `rel` against `workdir`, refusing anything that would leave it.
///
/// - an empty path is `EINVAL`;
/// - an absolute path, or one with a `..` component, is `EPERM`;
/// - the path is then walked one component at a time from the canonical working
///   directory; every existing symbolic link is resolved (following chains) and
///   must stay inside the canonical working directory, else `EPERM` ("path escapes
///   the working directory: ..."). A symbolic link whose target does not exist is
///   `EPERM` too when it is an intermediate component or the target of a write
///   (the write would land somewhere unverified); as the final component of a read
///   or list it is `EINVAL` ("no such file").
///
/// With `for_write`, the working directory itself and an existing directory are
/// refused (`EINVAL`) as write targets.
///
/// Returns the resolved path: the canonical location of the deepest existing
/// ancestor followed by the not-yet-existing components. `EPERM` errors are not
/// retryable.
///
/// This checks a *path*, which can change before it is used: file operations go
/// through [`WorkRoot`] instead, which has no such window. It remains for
/// handing a directory to another process (`proc.run`'s `cwd`), where the window
/// is moot: a process tool runs arbitrary code in the working directory anyway.
///
/// This does blocking metadata calls (`std::fs`), a few per path component.
pub fn resolve_in_workdir(
    workdir: &Path,
    rel: &str,
    for_write: bool,
) -> Result<PathBuf, ToolError> {
    let components = lexical_components(rel)?;
    let root = std::fs::canonicalize(workdir).map_err(|e| {
        ToolError::new(
            ErrorCode::Einternal,
            format!(
                "the working directory {} is not accessible: {e}",
                workdir.display()
            ),
        )
    })?;

    let mut current = root.clone();
    let last = components.len().saturating_sub(1);
    let mut iter = components.iter().enumerate();
    for (index, name) in iter.by_ref() {
        let next = current.join(name);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(&next) {
                Ok(real) => {
                    if !real.starts_with(&root) {
                        return Err(escapes(rel));
                    }
                    current = real;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if index == last && !for_write {
                        return Err(ToolError::new(
                            ErrorCode::Einval,
                            format!("no such file (dangling symbolic link): {rel}"),
                        )
                        .with_action(LIST_ACTION));
                    }
                    return Err(eperm(format!(
                        "path goes through a symbolic link whose target does not exist: {rel}"
                    )));
                }
                Err(_) => {
                    return Err(eperm(format!(
                        "cannot resolve a symbolic link in the path: {rel}"
                    )));
                }
            },
            Ok(_) => current = next,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // `next` and everything below it do not exist yet: nothing left to
                // resolve, and `current` (canonical, inside) is the deepest existing
                // ancestor.
                current = next;
                break;
            }
            Err(e) => return Err(io_error("resolving", rel, &e)),
        }
    }
    for (_, name) in iter {
        current.push(name);
    }

    // Belt and braces: every step above kept `current` under `root`.
    if !current.starts_with(&root) {
        return Err(escapes(rel));
    }
    if for_write {
        if current == root {
            return Err(ToolError::new(
                ErrorCode::Einval,
                format!("cannot write to the working directory itself: {rel}"),
            )
            .with_action("give a file path, e.g. \"notes.txt\""));
        }
        if current.is_dir() {
            return Err(ToolError::new(
                ErrorCode::Einval,
                format!("is a directory, cannot write it as a file: {rel}"),
            )
            .with_action("choose a file path inside that directory"));
        }
    }
    Ok(current)
}

fn resource_ref(rel: &str, sha256: &str, bytes: u64) -> ResourceRef {
    ResourceRef {
        path: rel.to_string(),
        sha256: sha256.to_string(),
        bytes,
    }
}

fn too_large(rel: &str, bytes: u64) -> ToolError {
    ToolError::new(
        ErrorCode::Einval,
        format!(
            "file too large: {rel} is {bytes} bytes, fs.read returns at most {MAX_READ_BYTES} bytes"
        ),
    )
    .retryable(false)
}

/// Which tool met a [`PathError`]: the same cause reads differently to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
    List,
}

impl Op {
    fn doing(self) -> &'static str {
        match self {
            Op::Read => "reading",
            Op::Write => "writing",
            Op::List => "listing",
        }
    }
}

/// Maps a [`PathError`] met by `op` on `rel` to the model-facing [`ToolError`].
fn path_error(e: PathError, op: Op, rel: &str) -> ToolError {
    match e {
        PathError::Empty => ToolError::new(ErrorCode::Einval, "path is empty")
            .with_action("give a relative path inside the working directory, e.g. \"notes.txt\""),
        PathError::Nul => ToolError::new(
            ErrorCode::Einval,
            format!("path contains a nul byte: {rel:?}"),
        )
        .with_action("fix the path and call again"),
        PathError::Absolute => eperm(format!(
            "absolute paths are not allowed: {rel} (path escapes the working directory)"
        )),
        PathError::ParentDir => eperm(format!(
            "'..' is not allowed in paths: {rel} (path escapes the working directory)"
        )),
        PathError::Escapes => escapes(rel),
        PathError::DanglingLink if op == Op::Read => ToolError::new(
            ErrorCode::Einval,
            format!("no such file (dangling symbolic link): {rel}"),
        )
        .with_action(LIST_ACTION),
        PathError::DanglingLink => eperm(format!(
            "path goes through a symbolic link whose target does not exist: {rel}"
        )),
        PathError::TooManyLinks | PathError::IsALink => ToolError::new(
            ErrorCode::Einval,
            format!("too many levels of symbolic links: {rel}"),
        )
        .retryable(false),
        PathError::NotFound => {
            let what = if op == Op::List { "directory" } else { "file" };
            ToolError::new(ErrorCode::Einval, format!("no such {what}: {rel}"))
                .with_action(LIST_ACTION)
        }
        PathError::NotADirectory if op == Op::List => {
            ToolError::new(ErrorCode::Einval, format!("not a directory: {rel}"))
                .with_action("call fs.read to read a file")
        }
        PathError::NotADirectory => ToolError::new(
            ErrorCode::Einval,
            format!("a component of the path is not a directory: {rel}"),
        )
        .with_action(LIST_ACTION),
        PathError::IsADirectory if op == Op::Write => ToolError::new(
            ErrorCode::Einval,
            format!("is a directory, cannot write it as a file: {rel}"),
        )
        .with_action("choose a file path inside that directory"),
        PathError::IsADirectory => ToolError::new(
            ErrorCode::Einval,
            format!("is a directory, not a file: {rel}"),
        )
        .with_action("call fs.list with this path to see its entries"),
        PathError::NotRegular { kind } => ToolError::new(
            ErrorCode::Einval,
            format!("not a regular file: {rel} (a {kind})"),
        )
        .retryable(false),
        PathError::TooLarge { bytes, .. } => too_large(rel, bytes),
        PathError::Protected => eperm(format!(
            "{rel} is inside agentry's artifact directory, which only agentry writes"
        ))
        .with_action("write elsewhere; fs.read still reads the artifacts"),
        PathError::IsRoot => ToolError::new(
            ErrorCode::Einval,
            format!("cannot write to the working directory itself: {rel}"),
        )
        .with_action("give a file path, e.g. \"notes.txt\""),
        PathError::Changed => ToolError::new(
            ErrorCode::Eunavail,
            format!("the path kept changing while it was being opened: {rel}"),
        ),
        PathError::Io(e) => io_error(op.doing(), rel, &e),
    }
}

/// Runs blocking file work on tokio's blocking pool. Every piece of it is
/// bounded (no open blocks: `O_NONBLOCK`; reads are capped).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PathError> + Send + 'static,
) -> Result<T, PathError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(PathError::Io(io::Error::other(e))))
}

/// The artifact directory's path under the root, which `fs.write` refuses.
fn protected(ctx: &ToolContext) -> Vec<OsString> {
    ctx.root.relative(&ctx.artifacts).unwrap_or_default()
}

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
        let root = Arc::clone(&ctx.root);
        let path = rel.clone();
        let mut entries = blocking(move || root.list(&path))
            .await
            .map_err(|e| path_error(e, Op::List, &rel))?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let truncated = entries.len() > MAX_LIST_ENTRIES;
        entries.truncate(MAX_LIST_ENTRIES);

        let entries: Vec<Value> = entries
            .into_iter()
            .map(|entry| {
                let kind = match entry.kind {
                    EntryKind::File => "file",
                    EntryKind::Dir => "dir",
                    EntryKind::Symlink => "symlink",
                    EntryKind::Other => "other",
                };
                json!({ "name": entry.name, "kind": kind, "bytes": entry.bytes })
            })
            .collect();
        let mut data = json!({ "path": shown, "entries": entries });
        if truncated && let Some(obj) = data.as_object_mut() {
            obj.insert("truncated".to_string(), Value::Bool(true));
        }
        Ok(ToolOutput::data(data))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::symlink;
    use tokio_util::sync::CancellationToken;

    fn ctx(workdir: &Path) -> ToolContext {
        ToolContext {
            run_id: Arc::from("run-1"),
            call_id: "call-1".to_string(),
            workdir: Arc::from(workdir),
            root: Arc::new(WorkRoot::open(workdir).unwrap()),
            artifacts: Arc::from(workdir.join(".agentry").as_path()),
            cancel: CancellationToken::new(),
            attempt: 1,
            operation_id: Arc::from("op-test"),
            agents: None,
        }
    }

    fn assert_eperm(result: Result<ToolOutput, ToolError>) -> ToolError {
        let err = result.expect_err("expected EPERM");
        assert_eq!(err.code, ErrorCode::Eperm, "{err}");
        assert!(!err.retryable);
        assert!(err.suggested_action.is_some());
        err
    }

    #[tokio::test]
    async fn write_then_read_round_trips_with_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let content = "hello, wörld\n";
        let expected = sha256_hex(content.as_bytes());

        let out = WriteTool
            .call(json!({"path": "notes.txt", "content": content}), &c)
            .await
            .unwrap();
        assert_eq!(out.data["path"], "notes.txt");
        assert_eq!(out.data["bytes"], content.len() as u64);
        assert_eq!(out.data["sha256"], expected.as_str());
        assert_eq!(
            out.refs,
            vec![ResourceRef {
                path: "notes.txt".into(),
                sha256: expected.clone(),
                bytes: content.len() as u64
            }]
        );

        let out = ReadTool
            .call(json!({"path": "./notes.txt"}), &c)
            .await
            .unwrap();
        assert_eq!(out.data["path"], "notes.txt");
        assert_eq!(out.data["content"], content);
        assert_eq!(out.data["bytes"], content.len() as u64);
        assert_eq!(out.data["sha256"], expected.as_str());
        assert_eq!(out.refs.len(), 1);
        assert_eq!(out.refs[0].sha256, expected);

        // Overwrite replaces the content and leaves no temp file behind.
        WriteTool
            .call(json!({"path": "notes.txt", "content": "v2"}), &c)
            .await
            .unwrap();
        let out = ReadTool
            .call(json!({"path": "notes.txt"}), &c)
            .await
            .unwrap();
        assert_eq!(out.data["content"], "v2");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("notes.txt")]);
    }

    #[tokio::test]
    async fn write_creates_nested_directories() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let out = WriteTool
            .call(json!({"path": "a/b/c/d.txt", "content": "deep"}), &c)
            .await
            .unwrap();
        assert_eq!(out.data["path"], "a/b/c/d.txt");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c/d.txt")).unwrap(),
            "deep"
        );
    }

    #[tokio::test]
    async fn list_is_sorted_with_kinds_and_sizes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.txt"), "12345").unwrap();
        std::fs::write(dir.path().join("a.txt"), "1").unwrap();
        std::fs::create_dir(dir.path().join("c")).unwrap();
        symlink(dir.path().join("a.txt"), dir.path().join("d")).unwrap();
        let c = ctx(dir.path());

        let out = ListTool.call(json!({}), &c).await.unwrap();
        assert_eq!(out.data["path"], ".");
        assert_eq!(
            out.data["entries"],
            json!([
                {"name": "a.txt", "kind": "file", "bytes": 1},
                {"name": "b.txt", "kind": "file", "bytes": 5},
                {"name": "c", "kind": "dir", "bytes": 0},
                {"name": "d", "kind": "symlink", "bytes": 0},
            ])
        );
        assert!(out.data.get("truncated").is_none());

        let out = ListTool.call(json!({"path": "c"}), &c).await.unwrap();
        assert_eq!(out.data["path"], "c");
        assert_eq!(out.data["entries"], json!([]));
    }

    #[tokio::test]
    async fn absolute_paths_are_eperm() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        assert_eperm(ReadTool.call(json!({"path": "/etc/passwd"}), &c).await);
        assert_eperm(
            WriteTool
                .call(json!({"path": "/tmp/x", "content": "x"}), &c)
                .await,
        );
        assert_eperm(ListTool.call(json!({"path": "/"}), &c).await);
        // Even an absolute path that points inside the workdir.
        let inside = dir.path().join("x.txt");
        std::fs::write(&inside, "x").unwrap();
        assert_eperm(
            ReadTool
                .call(json!({"path": inside.to_str().unwrap()}), &c)
                .await,
        );
    }

    #[tokio::test]
    async fn parent_components_are_eperm() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let c = ctx(dir.path());
        let err = assert_eperm(ReadTool.call(json!({"path": "../x"}), &c).await);
        assert!(err.message.contains("../x"), "{}", err.message);
        assert_eperm(ReadTool.call(json!({"path": "a/../../x"}), &c).await);
        // `..` is refused even when it would stay inside.
        assert_eperm(ReadTool.call(json!({"path": "a/../x"}), &c).await);
        assert_eperm(
            WriteTool
                .call(json!({"path": "a/../../x", "content": "x"}), &c)
                .await,
        );
        assert_eperm(ListTool.call(json!({"path": ".."}), &c).await);
    }

    #[tokio::test]
    async fn empty_path_is_einval() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_in_workdir(dir.path(), "", false).unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
    }

    #[tokio::test]
    async fn symlink_to_outside_is_eperm_for_read_write_and_list() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        symlink(outside.path(), dir.path().join("out")).unwrap();
        symlink(
            outside.path().join("secret.txt"),
            dir.path().join("secret-link"),
        )
        .unwrap();
        let c = ctx(dir.path());

        let err = assert_eperm(ReadTool.call(json!({"path": "out/secret.txt"}), &c).await);
        assert!(
            err.message.contains("escapes the working directory"),
            "{}",
            err.message
        );
        assert!(err.message.contains("out/secret.txt"), "{}", err.message);
        assert_eperm(ReadTool.call(json!({"path": "secret-link"}), &c).await);
        assert_eperm(
            WriteTool
                .call(json!({"path": "out/new.txt", "content": "x"}), &c)
                .await,
        );
        assert_eperm(
            WriteTool
                .call(json!({"path": "out/sub/new.txt", "content": "x"}), &c)
                .await,
        );
        assert_eperm(
            WriteTool
                .call(json!({"path": "secret-link", "content": "pwned"}), &c)
                .await,
        );
        assert_eperm(ListTool.call(json!({"path": "out"}), &c).await);

        // Nothing leaked out.
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
            "secret"
        );
        assert!(!outside.path().join("new.txt").exists());
        assert!(!outside.path().join("sub").exists());
    }

    #[tokio::test]
    async fn dangling_symlink_to_outside_cannot_be_written_through() {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let target = outside.path().join("created.txt");
        symlink(&target, dir.path().join("dangling")).unwrap();
        let c = ctx(dir.path());
        assert_eperm(
            WriteTool
                .call(json!({"path": "dangling", "content": "x"}), &c)
                .await,
        );
        assert!(!target.exists());
        let err = ReadTool
            .call(json!({"path": "dangling"}), &c)
            .await
            .unwrap_err();
        assert!(matches!(err.code, ErrorCode::Einval | ErrorCode::Eperm));
    }

    #[tokio::test]
    async fn symlink_inside_the_workdir_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::write(dir.path().join("real/f.txt"), "inside").unwrap();
        symlink(dir.path().join("real"), dir.path().join("alias")).unwrap();
        let c = ctx(dir.path());
        let out = ReadTool
            .call(json!({"path": "alias/f.txt"}), &c)
            .await
            .unwrap();
        assert_eq!(out.data["content"], "inside");
        let out = ListTool.call(json!({"path": "alias"}), &c).await.unwrap();
        assert_eq!(out.data["entries"][0]["name"], "f.txt");
    }

    #[tokio::test]
    async fn workdir_reached_through_a_symlink_still_works() {
        let real = tempfile::tempdir().unwrap();
        let holder = tempfile::tempdir().unwrap();
        let link = holder.path().join("wd");
        symlink(real.path(), &link).unwrap();
        let c = ctx(&link);
        WriteTool
            .call(json!({"path": "x.txt", "content": "ok"}), &c)
            .await
            .unwrap();
        let out = ReadTool.call(json!({"path": "x.txt"}), &c).await.unwrap();
        assert_eq!(out.data["content"], "ok");
    }

    #[tokio::test]
    async fn missing_file_is_einval_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let err = ReadTool
            .call(json!({"path": "nope/missing.txt"}), &c)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        assert_eq!(err.message, "no such file: nope/missing.txt");
        assert_eq!(err.suggested_action.as_deref(), Some(LIST_ACTION));

        let err = ListTool
            .call(json!({"path": "nope"}), &c)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        assert!(err.message.contains("nope"), "{}", err.message);
    }

    #[tokio::test]
    async fn non_utf8_and_oversized_files_are_einval() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bin"), [0x66, 0x6f, 0xff, 0xfe]).unwrap();
        std::fs::write(
            dir.path().join("big"),
            vec![b'a'; (MAX_READ_BYTES + 1) as usize],
        )
        .unwrap();
        std::fs::write(
            dir.path().join("exact"),
            vec![b'a'; MAX_READ_BYTES as usize],
        )
        .unwrap();
        let c = ctx(dir.path());

        let err = ReadTool.call(json!({"path": "bin"}), &c).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        assert!(err.message.contains("utf-8"), "{}", err.message);
        assert!(err.message.contains("bin"), "{}", err.message);

        let err = ReadTool.call(json!({"path": "big"}), &c).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        assert!(err.message.starts_with("file too large"), "{}", err.message);

        let out = ReadTool.call(json!({"path": "exact"}), &c).await.unwrap();
        assert_eq!(out.data["bytes"], MAX_READ_BYTES);
    }

    #[tokio::test]
    async fn directories_are_not_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let c = ctx(dir.path());
        let err = ReadTool.call(json!({"path": "d"}), &c).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        let err = WriteTool
            .call(json!({"path": "d", "content": "x"}), &c)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        let err = WriteTool
            .call(json!({"path": ".", "content": "x"}), &c)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        let err = ListTool.call(json!({"path": "f"}), &c).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        let err = WriteTool
            .call(json!({"path": "f/under-a-file", "content": "x"}), &c)
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval, "{err}");
    }

    #[test]
    fn schemas_forbid_additional_properties() {
        for tool in [
            Arc::new(ReadTool) as Arc<dyn Tool>,
            Arc::new(WriteTool),
            Arc::new(ListTool),
        ] {
            let contract = tool.contract();
            assert_eq!(
                contract.input_schema["additionalProperties"],
                json!(false),
                "{}",
                contract.name
            );
            assert_eq!(contract.timeout_ms, 10_000);
            assert_eq!(contract.idempotency, Idempotency::Idempotent);
        }
        let read = ReadTool.contract();
        assert_eq!(read.name, "fs.read");
        assert_eq!(read.effect, Effect::ReadOnly);
        assert_eq!(read.auth_scope, "fs.read");
        let write = WriteTool.contract();
        assert_eq!(write.name, "fs.write");
        assert_eq!(write.effect, Effect::Reversible);
        assert_eq!(write.auth_scope, "fs.write");
        let list = ListTool.contract();
        assert_eq!(list.name, "fs.list");
        assert_eq!(list.effect, Effect::ReadOnly);
        assert_eq!(list.auth_scope, "fs.read");
        assert_eq!(
            list.input_schema["required"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0),
            0
        );
    }
}
