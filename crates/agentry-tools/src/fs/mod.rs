//! `fs.read`, `fs.write`, `fs.list`: file tools confined to the run's working directory.
//!
//! Every path a model supplies is resolved beneath the run's [`WorkRoot`], a
//! handle on the working directory opened once for the run (see `fs/root/`):
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
//! Results carry a [`ResourceRef`](agentry_protocol::envelope::ResourceRef) (relative path, sha256, length) so changes to a
//! file between two observations are detectable.
//!
//! # Layout
//! - `read.rs`, `write.rs`, `list.rs`: the three tools; `args.rs`: their arguments.
//! - `resolve.rs`: the lexical check, [`resolve_in_workdir`], how a path is shown.
//! - `errors.rs`: what the model is told when a path or an I/O call fails.
//! - `root/`: [`WorkRoot`], the working directory as a handle, and every
//!   operation beneath it.

mod args;
mod errors;
mod list;
pub(crate) mod read;
mod resolve;
mod root;
#[cfg(test)]
mod tests;
mod write;

pub use args::{ListArgs, ReadArgs, WriteArgs};
pub use list::ListTool;
pub use read::ReadTool;
pub use resolve::resolve_in_workdir;
pub use root::{
    ByteRange, Entry, EntryKind, FilePart, PathError, WorkRoot, components, create_exclusive,
    open_dir_nofollow, read_part, regular_size,
};
pub use write::WriteTool;

/// Name of the read tool.
pub const READ_TOOL: &str = "fs.read";
/// Name of the write tool.
pub const WRITE_TOOL: &str = "fs.write";
/// Name of the list tool.
pub const LIST_TOOL: &str = "fs.list";

/// Largest file `fs.read` returns, in bytes (1 MiB); the content is returned
/// inline. Also the largest part it returns with `offset`/`limit`.
pub const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Largest file `fs.read` reads a part of (256 MiB): it hashes the whole file.
pub const MAX_PART_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// Most entries `fs.list` returns; a longer listing is cut (after sorting) and the
/// data gets `"truncated": true`.
pub const MAX_LIST_ENTRIES: usize = 1000;

/// Per-call timeout of the file tools, in milliseconds.
const FS_TIMEOUT_MS: u64 = 10_000;
