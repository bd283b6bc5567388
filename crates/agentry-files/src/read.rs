//! A named file read whole, under its kind's cap.

use std::io::Read;
use std::path::Path;

use crate::error::{FileError, FileProblem};
use crate::kind::FileKind;
use crate::open::open_regular;

/// The bytes of the regular file `path`, at most `kind`'s cap: a larger file
/// is refused before a byte is read, one that grows past the cap while read
/// is refused when it does.
pub fn read(path: &Path, kind: FileKind) -> Result<Vec<u8>, FileError> {
    read_capped(path, kind).map_err(|problem| FileError {
        kind: kind.name(),
        path: path.to_path_buf(),
        problem,
    })
}

/// [`read`], as UTF-8 text.
pub fn read_to_string(path: &Path, kind: FileKind) -> Result<String, FileError> {
    let bytes = read(path, kind)?;
    String::from_utf8(bytes).map_err(|e| FileError {
        kind: kind.name(),
        path: path.to_path_buf(),
        problem: FileProblem::NotUtf8(e.utf8_error()),
    })
}

fn read_capped(path: &Path, kind: FileKind) -> Result<Vec<u8>, FileProblem> {
    let too_large = |bytes: u64| FileProblem::TooLarge {
        kind: kind.name(),
        bytes,
        cap: kind.cap(),
    };
    let (file, len) = open_regular(path)?;
    if len > kind.cap() {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // One byte past the cap tells a file that grew since `fstat`.
    file.take(kind.cap() + 1)
        .read_to_end(&mut bytes)
        .map_err(FileProblem::Read)?;
    let read = bytes.len() as u64;
    if read > kind.cap() {
        return Err(too_large(read));
    }
    Ok(bytes)
}
