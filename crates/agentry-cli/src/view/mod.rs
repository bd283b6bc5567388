//! `agentry view`: one self-contained HTML page for a JSONL trace.
//!
//! `read` parses the trace lines (typed: a bad line is an error naming its file
//! and line), `model` folds them into what the page draws (a lane per agent,
//! each step's calls classified, its state as a diff against the step before;
//! repeated budget limits and full snapshots dropped), `page` embeds that as
//! JSON beside the page's own CSS and JS (`assets/`, nothing fetched). The file
//! is written to a temporary file beside the target and renamed over it, so a
//! failed write leaves no half page.
//!
//! Everything shown comes from the trace as written, which the run's redactor
//! has already passed.

mod diff;
mod error;
mod model;
mod page;
mod read;
mod step;

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::args::{ViewArgs, absolute};

pub(crate) use self::error::ViewError;

/// Reads the traces, writes the page and returns its path.
pub(crate) fn write(args: &ViewArgs) -> Result<PathBuf, ViewError> {
    let traces: Vec<PathBuf> = args.traces.iter().map(|p| absolute(p)).collect();
    let output = match &args.output {
        Some(path) => absolute(path),
        None => default_output(&traces)?,
    };
    let files = read::read_all(&traces)?;
    let model = model::Page::build(&files);
    let html = page::render(&model)?;
    write_whole(&output, html.as_bytes())?;
    Ok(output)
}

/// The first trace with `.html` for its extension.
fn default_output(traces: &[PathBuf]) -> Result<PathBuf, ViewError> {
    let first = traces.first().cloned().unwrap_or_default();
    let output = first.with_extension("html");
    if output == first {
        return Err(ViewError::OutputIsTrace { path: output });
    }
    Ok(output)
}

/// Writes `bytes` to a temporary file in `path`'s directory and renames it
/// over `path`: readers see the old file or the whole new one.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), ViewError> {
    let failed = |source| ViewError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut builder = tempfile::Builder::new();
    builder.prefix(".agentry-view-");
    // A page to open and share, not a secret (its content is redacted): the
    // usual mode, not the temp file's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let mut tmp = builder.tempfile_in(dir).map_err(failed)?;
    tmp.write_all(bytes).map_err(failed)?;
    tmp.as_file().sync_all().map_err(failed)?;
    tmp.persist(path).map_err(|e| failed(e.error))?;
    Ok(())
}
