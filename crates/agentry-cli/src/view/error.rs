//! What can go wrong writing a page.

use std::path::PathBuf;

/// What can go wrong writing a page.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ViewError {
    /// A trace file could not be opened or read.
    #[error("cannot read the trace {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: agentry_files::FileProblem,
    },
    /// A line is not a trace record.
    #[error("{}:{line}: not a trace line: {source}", path.display())]
    BadLine {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    /// A trace file holds no record.
    #[error("the trace {} is empty: no step, input or stop line", path.display())]
    Empty { path: PathBuf },
    /// The default output would overwrite the trace itself.
    #[error("the output {} is the trace itself: give -o FILE", path.display())]
    OutputIsTrace { path: PathBuf },
    /// The page could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The page's data could not be encoded.
    #[error("cannot encode the page's data: {0}")]
    Encode(#[source] serde_json::Error),
}

impl From<agentry::insight::tracefile::TraceFileError> for ViewError {
    fn from(e: agentry::insight::tracefile::TraceFileError) -> Self {
        use agentry::insight::tracefile::TraceFileError;
        match e {
            TraceFileError::Read { path, source } => ViewError::Read { path, source },
            TraceFileError::BadLine { path, line, source } => ViewError::BadLine {
                path,
                line: usize::try_from(line).unwrap_or(usize::MAX),
                source,
            },
        }
    }
}
