//! A named file read line by line, under its kind's cap per line.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{FileError, FileProblem};
use crate::kind::LineKind;
use crate::open::open_regular;

/// The lines of a regular file, one at a time, each at most `kind`'s
/// `max_line` bytes. Memory is one line (and its buffer), however long the
/// file: a file of zeros without a newline fails at the cap, not at the end.
#[derive(Debug)]
pub struct Lines {
    reader: BufReader<std::fs::File>,
    kind: LineKind,
    path: PathBuf,
    number: u64,
    line: Vec<u8>,
}

impl Lines {
    /// Opens `path` as [`open_regular`] does.
    pub fn open(path: &Path, kind: LineKind) -> Result<Lines, FileError> {
        let (file, _) = open_regular(path).map_err(|problem| FileError {
            kind: kind.name(),
            path: path.to_path_buf(),
            problem,
        })?;
        Ok(Lines {
            reader: BufReader::new(file),
            kind,
            path: path.to_path_buf(),
            number: 0,
            line: Vec::new(),
        })
    }

    /// The next line without its newline (`\n`; a `\r` before it stays), or
    /// `None` at the end of the file. A last line without a newline counts.
    pub fn next_line(&mut self) -> Result<Option<&[u8]>, FileError> {
        self.line.clear();
        self.number += 1;
        // The newline is not counted, so the most one read takes is the cap
        // plus it; taking that much without meeting one means too long.
        let most = self.kind.max_line() + 1;
        let read = Read::take(&mut self.reader, most)
            .read_until(b'\n', &mut self.line)
            .map_err(|e| self.error(FileProblem::Read(e)))?;
        if read == 0 {
            return Ok(None);
        }
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
        } else if read as u64 == most {
            return Err(self.error(FileProblem::LineTooLong {
                kind: self.kind.name(),
                line: self.number,
                cap: self.kind.max_line(),
            }));
        }
        Ok(Some(&self.line))
    }

    /// The 1-based number of the line [`Lines::next_line`] gave last.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The file, as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, problem: FileProblem) -> FileError {
        FileError {
            kind: self.kind.name(),
            path: self.path.clone(),
            problem,
        }
    }
}
