//! Paths as the file tools see them: the lexical check, [`resolve_in_workdir`]
//! for handing a directory to another process, the form a path is shown in
//! results, and running the root's blocking work off the async threads.

use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::{ResourceRef, ToolError};

use super::errors::{LIST_ACTION, Op, eperm, escapes, io_error, path_error};
use super::root::{PathError, components};

/// Checks `rel` lexically and returns its normal components: absolute paths and
/// `..` are `EPERM`, an empty path is `EINVAL`; `.` components are dropped.
pub(super) fn lexical_components(rel: &str) -> Result<Vec<OsString>, ToolError> {
    components(rel).map_err(|e| path_error(e, Op::Read, rel))
}

/// The normalized relative form of `rel` used in results: normal components joined
/// with `/`, or `.` for the working directory itself. Call after
/// [`resolve_in_workdir`] succeeded.
pub(super) fn display_rel(rel: &str) -> String {
    let parts: Vec<String> = Path::new(rel)
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
            Component::Prefix(_)
            | Component::RootDir
            | Component::CurDir
            | Component::ParentDir => None,
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
/// through [`WorkRoot`](super::WorkRoot) instead, which has no such window. It remains for
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

    let current = walk_existing(&root, &components, rel, for_write)?;
    // Belt and braces: every step of the walk kept `current` under `root`.
    if !current.starts_with(&root) {
        return Err(escapes(rel));
    }
    if for_write {
        write_target(&current, &root, rel)?;
    }
    Ok(current)
}

/// Walks `components` from the canonical `root`, resolving every existing
/// symbolic link (it must stay under `root`), and returns the canonical deepest
/// existing ancestor followed by the components that do not exist yet.
fn walk_existing(
    root: &Path,
    components: &[OsString],
    rel: &str,
    for_write: bool,
) -> Result<PathBuf, ToolError> {
    let mut current = root.to_path_buf();
    let last = components.len().saturating_sub(1);
    let mut iter = components.iter().enumerate();
    for (index, name) in iter.by_ref() {
        let next = current.join(name);
        match std::fs::symlink_metadata(&next) {
            Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(&next) {
                Ok(real) => {
                    if !real.starts_with(root) {
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
    Ok(current)
}

/// Refuses the working directory itself and an existing directory as the
/// target of a write.
fn write_target(current: &Path, root: &Path, rel: &str) -> Result<(), ToolError> {
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
    Ok(())
}

/// The reference a result carries to the file it read or wrote.
pub(super) fn resource_ref(rel: &str, sha256: &str, bytes: u64) -> ResourceRef {
    ResourceRef {
        path: rel.to_string(),
        sha256: sha256.to_string(),
        bytes,
    }
}

/// Runs blocking file work on tokio's blocking pool. Every piece of it is
/// bounded (no open blocks: `O_NONBLOCK`; reads are capped).
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, PathError> + Send + 'static,
) -> Result<T, PathError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(PathError::Io(io::Error::other(e))))
}
