//! What the model is told when a file tool fails: every [`PathError`] and I/O
//! error becomes a typed [`ToolError`] naming the path, with the action to take.

use std::io;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;

use super::MAX_READ_BYTES;
use super::root::PathError;

pub(super) const ESCAPE_ACTION: &str = "use a relative path inside the working directory";
pub(super) const LIST_ACTION: &str = "call fs.list to see what exists";

pub(super) fn eperm(message: String) -> ToolError {
    ToolError::new(ErrorCode::Eperm, message)
        .retryable(false)
        .with_action(ESCAPE_ACTION)
}

pub(super) fn escapes(rel: &str) -> ToolError {
    eperm(format!("path escapes the working directory: {rel}"))
}

/// Maps an I/O error met while `doing` something with `rel` to a [`ToolError`].
// `io::ErrorKind` is non_exhaustive: every kind not listed is an internal error.
#[allow(clippy::wildcard_enum_match_arm)]
pub(super) fn io_error(doing: &str, rel: &str, e: &io::Error) -> ToolError {
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

/// The start of a path too long to repeat whole.
fn head(rel: &str) -> String {
    const SHOWN: usize = 200;
    if rel.len() <= SHOWN {
        return rel.to_string();
    }
    let cut: String = rel.chars().take(SHOWN).collect();
    format!("{cut}… ({} bytes)", rel.len())
}

pub(super) fn too_large(rel: &str, bytes: u64, cap: u64) -> ToolError {
    let error = ToolError::new(
        ErrorCode::Einval,
        format!("file too large: {rel} is {bytes} bytes, at most {cap} are read"),
    )
    .retryable(false);
    if cap == MAX_READ_BYTES {
        error.with_action(format!(
            "read it in parts: give offset and limit (at most {MAX_READ_BYTES} bytes a part)"
        ))
    } else {
        error
    }
}

/// Which tool met a [`PathError`]: the same cause reads differently to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
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
pub(super) fn path_error(e: PathError, op: Op, rel: &str) -> ToolError {
    // Size: one arm per `PathError` variant, each the model's words for it.
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
        PathError::TooLarge { bytes, cap } => too_large(rel, bytes, cap),
        PathError::Protected => eperm(format!(
            "{rel} is inside agentry's artifact directory, which only agentry writes"
        ))
        .with_action("write elsewhere; fs.read still reads the artifacts"),
        PathError::IsRoot => ToolError::new(
            ErrorCode::Einval,
            format!("cannot write to the working directory itself: {rel}"),
        )
        .with_action("give a file path, e.g. \"notes.txt\""),
        PathError::TooLong { bytes, max } => ToolError::new(
            ErrorCode::Einval,
            format!("path too long (ENAMETOOLONG): {bytes} bytes, the system allows at most {max} (PATH_MAX)"),
        )
        .retryable(false)
        .with_action("use a shorter path"),
        PathError::TooDeep { max } => ToolError::new(
            ErrorCode::Einval,
            format!("path too deep: more than {max} directories: {}", head(rel)),
        )
        .retryable(false)
        .with_action(format!("use a path at most {max} directories deep")),
        PathError::Changed => ToolError::new(
            ErrorCode::Eunavail,
            format!("the path kept changing while it was being opened: {rel}"),
        ),
        PathError::Io(e) => io_error(op.doing(), rel, &e),
    }
}
