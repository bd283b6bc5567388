//! Reading a JSONL trace file: one typed [`TraceLine`] per non-empty line,
//! the first line that is not one named by its number. `agentry stats`,
//! `agentry view` and `agentry replay` all read traces through it.
//!
//! The file is read as every named file is (`agentry_files::Lines`): a FIFO
//! or a device is refused at once, and a line is capped
//! (`LineKind::TRACE`), not the file, so `/dev/zero` or a huge file without
//! a newline fails at the cap naming the line.

use std::path::{Path, PathBuf};

use agentry_files::{FileProblem, LineKind, Lines};

use agentry_protocol::trace::TraceLine;

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceFileError {
    /// The file could not be opened or read.
    #[error("cannot read the trace {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed: missing, not a regular file, a line over the cap.
        source: FileProblem,
    },
    /// A line is not a trace record.
    #[error("{}:{line}: not an agentry trace line: {source}", path.display())]
    BadLine {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        source: serde_json::Error,
    },
}

/// Every record of the trace at `path`, in file order (blank lines skipped).
pub fn read_trace(path: &Path) -> Result<Vec<TraceLine>, TraceFileError> {
    let read_error = |e: agentry_files::FileError| TraceFileError::Read {
        path: path.to_path_buf(),
        source: e.problem,
    };
    let mut file = Lines::open(path, LineKind::TRACE).map_err(read_error)?;
    let mut lines = Vec::new();
    while let Some(line) = file.next_line().map_err(read_error)? {
        if line.trim_ascii().is_empty() {
            continue;
        }
        let record = serde_json::from_slice(line).map_err(|source| TraceFileError::BadLine {
            path: path.to_path_buf(),
            line: file.number(),
            source,
        })?;
        lines.push(record);
    }
    Ok(lines)
}
