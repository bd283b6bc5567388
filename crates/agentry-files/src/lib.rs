//! Reading a file someone named: the operator (`task.toml`, `--policy
//! script:FILE`, `SSL_CERT_FILE`, `ca_cert`, `agentry stats --trace`, `view`,
//! `replay`) or a client of `agentry mcp` (`"policy": "script:FILE"`).
//!
//! A name can point at anything: a FIFO nobody writes (a plain `open` blocks
//! forever), `/dev/zero` (a plain read never ends), a sparse file of many GiB
//! (read whole before anything looks at it). So every such file is read here,
//! the way the acceptance `file` check reads the working directory's files:
//!
//! - opened `O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, so opening a FIFO
//!   returns at once;
//! - then judged by `fstat` on what was opened: regular files only. A link is
//!   followed (an operator's `SSL_CERT_FILE` often is one), and what it led to
//!   is what is judged, with no window between the check and the read;
//! - read up to the cap of its [`FileKind`] (a file over it is refused before
//!   a byte is read, one that grows past it while read is refused too), or, for
//!   a file read line by line ([`Lines`], a trace), up to the cap of its
//!   [`LineKind`] per line: the file may be as long as it is, a line may not.
//!
//! Every failure is a [`FileError`] naming the kind, the file and the
//! [`FileProblem`] (with the cap when a cap was hit); a caller whose own error
//! already names the file keeps just the problem.
//!
//! ```
//! use agentry_files::{FileKind, FileProblem};
//!
//! let err = agentry_files::read("/dev/zero".as_ref(), FileKind::SCRIPT).unwrap_err();
//! assert!(matches!(err.problem, FileProblem::NotRegular { .. }));
//! assert_eq!(
//!     err.to_string(),
//!     "cannot read the script /dev/zero: not a regular file (a character device)"
//! );
//! ```
//!
//! # Layout
//! - `kind.rs`: [`FileKind`] and [`LineKind`], each with its name and cap; the
//!   kinds agentry reads ([`FileKind::TASK_FILE`], [`FileKind::SCRIPT`],
//!   [`FileKind::CA_FILE`], [`FileKind::TOKEN_FILE`], [`LineKind::TRACE`]).
//! - `output.rs`: [`create_output`], a named output (a trace) opened without
//!   waiting for a FIFO's reader.
//! - `open.rs`: [`open_regular`] and [`regular_len`] (also the acceptance
//!   check's and `result.read`'s test of what an open handle is).
//! - `read.rs`: [`read`] and [`read_to_string`], a whole file under its cap.
//! - `lines.rs`: [`Lines`], a file line by line under a cap per line.
//! - `error.rs`: [`FileError`] and [`FileProblem`], the crate's error, and
//!   [`NonRegular`], what was opened instead of a regular file.

mod error;
mod kind;
mod lines;
mod open;
mod output;
mod read;

#[cfg(test)]
mod tests;

pub use error::{FileError, FileProblem, NonRegular};
pub use kind::{FileKind, LineKind};
pub use lines::Lines;
pub use open::{open_regular, regular_len};
pub use output::create_output;
pub use read::{read, read_to_string};
