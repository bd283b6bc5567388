//! Reading trace files: one typed record per non-empty line.

use std::path::{Path, PathBuf};

use agentry::protocol::trace::TraceLine;

use super::error::ViewError;

/// One trace file's records, in file order.
pub(super) struct TraceFile {
    /// The file's name, for the page's header (not its directory).
    pub(super) name: String,
    /// Its records.
    pub(super) lines: Vec<TraceLine>,
}

/// Reads every file; the first error names its file and line.
pub(super) fn read_all(paths: &[PathBuf]) -> Result<Vec<TraceFile>, ViewError> {
    paths.iter().map(|p| read_one(p)).collect()
}

fn read_one(path: &Path) -> Result<TraceFile, ViewError> {
    let lines = agentry::insight::tracefile::read_trace(path)?;
    if lines.is_empty() {
        return Err(ViewError::Empty {
            path: path.to_path_buf(),
        });
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(TraceFile { name, lines })
}
