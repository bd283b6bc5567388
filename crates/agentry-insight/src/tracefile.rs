//! Reading a JSONL trace file: one typed [`TraceLine`] per non-empty line,
//! the first line that is not one named by its number. `agentry stats`,
//! `agentry view` and `agentry replay` all read traces through it.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use agentry_protocol::trace::TraceLine;

/// Why a trace file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceFileError {
    /// The file could not be opened or read.
    #[error("cannot read the trace {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
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
    let read_error = |source| TraceFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut lines = Vec::new();
    for (index, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(read_error)?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line).map_err(|source| TraceFileError::BadLine {
            path: path.to_path_buf(),
            line: index as u64 + 1,
            source,
        })?;
        lines.push(record);
    }
    Ok(lines)
}
