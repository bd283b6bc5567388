//! [`FileError`]: which file of which kind could not be read, the
//! [`FileProblem`], and [`NonRegular`], what was opened instead of a file.

use std::path::PathBuf;

/// A named file that could not be read: its kind, its path and why.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the {kind} {}: {problem}", path.display())]
pub struct FileError {
    /// The kind's name (`task file`, `script`, `trace`).
    pub kind: &'static str,
    /// The file, as it was named.
    pub path: PathBuf,
    /// Why; a caller whose own error names the file keeps only this.
    #[source]
    pub problem: FileProblem,
}

/// Why a named file could not be read. Lowercase, without the file's name.
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    /// It could not be opened (missing, no permission).
    #[error("{0}")]
    Open(std::io::Error),
    /// What was opened is not a regular file: a FIFO, a device, a directory.
    #[error("not a regular file (a {what})")]
    NotRegular {
        /// What it is instead.
        what: NonRegular,
    },
    /// Larger than its kind's cap.
    #[error("too large for a {kind}: {bytes} bytes, at most {cap} are read")]
    TooLarge {
        /// The kind's name.
        kind: &'static str,
        /// Its size (at least; a file growing while read may be larger).
        bytes: u64,
        /// The kind's cap.
        cap: u64,
    },
    /// A line longer than its kind allows.
    #[error("line {line} is longer than {cap} bytes, the most a {kind} line may hold")]
    LineTooLong {
        /// The kind's name.
        kind: &'static str,
        /// The line's 1-based number.
        line: u64,
        /// The most one line may hold.
        cap: u64,
    },
    /// Reading it failed.
    #[error("{0}")]
    Read(std::io::Error),
    /// Text was expected and it is not UTF-8.
    #[error("not UTF-8 text: {0}")]
    NotUtf8(std::str::Utf8Error),
}

/// What an opened handle is when it is not a regular file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonRegular {
    /// A directory.
    Directory,
    /// A FIFO (named pipe).
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device (`/dev/zero`, a terminal).
    CharacterDevice,
    /// A block device.
    BlockDevice,
    /// A symbolic link (seen only through a handle opened on the link itself).
    Symlink,
    /// Anything else the kernel reports.
    Unknown,
}

impl NonRegular {
    /// Its name: "FIFO", "character device".
    pub fn name(self) -> &'static str {
        match self {
            NonRegular::Directory => "directory",
            NonRegular::Fifo => "FIFO",
            NonRegular::Socket => "socket",
            NonRegular::CharacterDevice => "character device",
            NonRegular::BlockDevice => "block device",
            NonRegular::Symlink => "symbolic link",
            NonRegular::Unknown => "special file",
        }
    }
}

impl std::fmt::Display for NonRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
