//! The pieces under [`WorkRoot`](super::WorkRoot): [`PathError`], the lexical
//! check ([`components`]), link-refusing opens and creates, and the atomic
//! replace a write ends with.

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// How often a resolution is retried when the tree changed under it.
pub(super) const MAX_TRIES: usize = 4;

/// Longest path a tool may give, in bytes: the kernel's `PATH_MAX` (4096)
/// less its NUL. A longer one could not be named to any process either.
pub const MAX_PATH_BYTES: usize = 4095;

/// Most directories a resolution enters. The walk holds a handle on each (to
/// go back up through `..`), so an unbounded depth would run out of file
/// descriptors; a real tree is far shallower.
pub const MAX_DEPTH: usize = 256;

/// What went wrong resolving or using a path beneath the root.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path is empty.
    #[error("path is empty")]
    Empty,
    /// The path contains a NUL byte.
    #[error("path contains a nul byte")]
    Nul,
    /// The path is absolute.
    #[error("absolute paths are not allowed")]
    Absolute,
    /// The path has a `..` component.
    #[error("'..' is not allowed in paths")]
    ParentDir,
    /// Resolving the path (through a symbolic link) would leave the root.
    #[error("path escapes the working directory")]
    Escapes,
    /// A symbolic link on the way leads nowhere.
    #[error("path goes through a symbolic link whose target does not exist")]
    DanglingLink,
    /// More than 40 links on one path (the kernel's limit), or a loop.
    #[error("too many levels of symbolic links")]
    TooManyLinks,
    /// Nothing at that path.
    #[error("no such file or directory")]
    NotFound,
    /// A component that must be a directory is not one.
    #[error("not a directory")]
    NotADirectory,
    /// A file was expected.
    #[error("is a directory")]
    IsADirectory,
    /// The entry is a symbolic link where none may be followed.
    #[error("is a symbolic link")]
    IsALink,
    /// Not a regular file: a FIFO, a socket, a device.
    #[error("not a regular file (a {kind})")]
    NotRegular {
        /// What it is instead.
        kind: &'static str,
    },
    /// Larger than the cap.
    #[error("too large: {bytes} bytes, at most {cap} are read")]
    TooLarge {
        /// Its size (at least; a growing file may be larger).
        bytes: u64,
        /// The cap.
        cap: u64,
    },
    /// The path lies in agentry's artifact directory, which file tools do not write.
    #[error("the path is inside agentry's artifact directory, which only agentry writes")]
    Protected,
    /// The working directory itself, where a file was expected.
    #[error("the working directory itself")]
    IsRoot,
    /// Longer than `MAX_PATH_BYTES` (`ENAMETOOLONG`).
    #[error("path is {bytes} bytes long, longer than the system allows ({max} bytes, PATH_MAX)")]
    TooLong {
        /// Its length.
        bytes: usize,
        /// `MAX_PATH_BYTES`.
        max: usize,
    },
    /// More than `MAX_DEPTH` directories deep.
    #[error("path is more than {max} directories deep")]
    TooDeep {
        /// `MAX_DEPTH`.
        max: usize,
    },
    /// The tree kept changing while the path was resolved.
    #[error("the path kept changing while it was being opened")]
    Changed,
    /// Any other I/O error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<Errno> for PathError {
    fn from(e: Errno) -> Self {
        PathError::Io(e.into())
    }
}

/// Creates `name` in `dir` for writing, never through a link and never reusing
/// what is there: `O_CREAT | O_EXCL | O_NOFOLLOW`. An entry already there (a
/// link planted by a tool, or the file of an earlier attempt) is removed first
/// (`unlinkat` removes a link itself, not its target); a directory is refused.
pub fn create_exclusive(dir: BorrowedFd<'_>, name: &OsStr) -> Result<std::fs::File, PathError> {
    for _ in 0..MAX_TRIES {
        match rustix::fs::openat(
            dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_bits_truncate(0o644),
        ) {
            Ok(fd) => return Ok(std::fs::File::from(fd)),
            Err(Errno::EXIST) => match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::ISDIR | Errno::PERM) => return Err(PathError::IsADirectory),
                Err(e) => return Err(e.into()),
            },
            Err(e) => return Err(e.into()),
        }
    }
    Err(PathError::Changed)
}

/// The length of the regular file open at `fd`; anything else is refused
/// (the test every named file gets, `agentry_files::regular_len`).
pub fn regular_size(fd: &OwnedFd) -> Result<u64, PathError> {
    use agentry_files::NonRegular;
    match agentry_files::regular_len(fd.as_fd())? {
        Ok(len) => Ok(len),
        Err(NonRegular::Directory) => Err(PathError::IsADirectory),
        Err(
            other @ (NonRegular::Fifo
            | NonRegular::Socket
            | NonRegular::CharacterDevice
            | NonRegular::BlockDevice
            | NonRegular::Symlink
            | NonRegular::Unknown),
        ) => Err(PathError::NotRegular { kind: other.name() }),
    }
}

/// Which bytes of a file to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub offset: u64,
    /// Most bytes.
    pub limit: u64,
}

/// Part of a file, and what identifies the whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    /// The bytes of the range (fewer at the end of the file).
    pub bytes: Vec<u8>,
    /// Length of the whole file.
    pub len: u64,
    /// Hex sha256 of the whole file.
    pub sha256: String,
}

/// Reads `range` of `file` while hashing all of it, at most `cap` bytes (a file
/// that grew past `cap` since it was measured is refused). Memory is the range
/// plus one buffer, whatever the file's size.
pub fn read_part(
    mut file: std::fs::File,
    range: ByteRange,
    cap: u64,
) -> Result<FilePart, PathError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let mut hasher = Sha256::new();
    let end = range.offset.saturating_add(range.limit);
    let mut bytes = Vec::with_capacity(usize::try_from(range.limit.min(1 << 20)).unwrap_or(0));
    let mut buf = vec![0u8; 64 * 1024];
    let mut at: u64 = 0;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        let chunk = &buf[..n];
        hasher.update(chunk);
        let chunk_end = at + n as u64;
        if chunk_end > cap {
            return Err(PathError::TooLarge {
                bytes: chunk_end,
                cap,
            });
        }
        // The overlap of [at, chunk_end) with [offset, end).
        let from = range.offset.clamp(at, chunk_end);
        let to = end.clamp(at, chunk_end);
        if from < to {
            bytes.extend_from_slice(&chunk[(from - at) as usize..(to - at) as usize]);
        }
        at = chunk_end;
    }
    Ok(FilePart {
        bytes,
        len: at,
        sha256: hex::encode(hasher.finalize()),
    })
}

/// Opens the directory `name` in `dir` as a handle, refusing a link.
pub fn open_dir_nofollow(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, PathError> {
    match rustix::fs::openat(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(PathError::IsALink),
        Err(Errno::NOTDIR) => match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                Err(PathError::IsALink)
            }
            Ok(_) | Err(_) => Err(PathError::NotADirectory),
        },
        Err(Errno::NOENT) => Err(PathError::NotFound),
        Err(e) => Err(e.into()),
    }
}

/// Checks `rel` lexically and returns its normal components: absolute paths,
/// `..`, an empty path, NUL bytes, a path longer than `MAX_PATH_BYTES` and
/// one of more than `MAX_DEPTH` components are refused; `.` components are
/// dropped.
pub fn components(rel: &str) -> Result<Vec<OsString>, PathError> {
    if rel.trim().is_empty() {
        return Err(PathError::Empty);
    }
    if rel.contains('\0') {
        return Err(PathError::Nul);
    }
    if rel.len() > MAX_PATH_BYTES {
        return Err(PathError::TooLong {
            bytes: rel.len(),
            max: MAX_PATH_BYTES,
        });
    }
    let path = Path::new(rel);
    if path.is_absolute() || path.has_root() {
        return Err(PathError::Absolute);
    }
    let mut out = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => return Err(PathError::ParentDir),
            Component::RootDir | Component::Prefix(_) => return Err(PathError::Absolute),
        }
    }
    // The final component is a file or a directory; those before it are entered.
    if out.len() > MAX_DEPTH + 1 {
        return Err(PathError::TooDeep { max: MAX_DEPTH });
    }
    Ok(out)
}

/// `Protected` when `parent/name` lies under `protected` (root-relative).
pub(super) fn guard(
    parent: &[OsString],
    name: &OsStr,
    protected: &[OsString],
) -> Result<(), PathError> {
    if protected.is_empty() {
        return Ok(());
    }
    let mut path = parent.iter().map(OsString::as_os_str).chain([name]);
    if protected.iter().all(|p| path.next() == Some(p.as_os_str())) {
        Err(PathError::Protected)
    } else {
        Ok(())
    }
}

pub(super) fn names(stack: &[(OwnedFd, OsString)]) -> Vec<OsString> {
    stack.iter().map(|(_, name)| name.clone()).collect()
}

/// `parts` joined with `/`, or `.` for none.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn join(parts: &[OsString]) -> OsString {
    if parts.is_empty() {
        return OsString::from(".");
    }
    let mut joined = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            joined.push(b'/');
        }
        joined.extend_from_slice(part.as_bytes());
    }
    OsString::from_vec(joined)
}

/// Distinguishes temp files of concurrent writes in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to a fresh temporary file in `dir` and renames it over `name`.
pub(super) fn replace(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    content: &[u8],
    mode: Option<Mode>,
) -> Result<(), PathError> {
    // Keep the temp name well under NAME_MAX even for long file names.
    let short: String = name.to_string_lossy().chars().take(64).collect();
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = OsString::from(format!(".{short}.agentry-tmp-{}-{n}", std::process::id()));
    let fd = rustix::fs::openat(
        dir,
        temp.as_os_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_bits_truncate(0o666),
    )?;
    let written = (|| -> io::Result<()> {
        let mut file = std::fs::File::from(fd);
        file.write_all(content)?;
        if let Some(mode) = mode {
            rustix::fs::fchmod(&file, mode)?;
        }
        file.sync_all()?;
        drop(file);
        rustix::fs::renameat(dir, temp.as_os_str(), dir, name)?;
        Ok(())
    })();
    if let Err(e) = written {
        // Best effort: do not leave the temp file behind.
        let _ = rustix::fs::unlinkat(dir, temp.as_os_str(), AtFlags::empty());
        return Err(match Errno::from_io_error(&e) {
            Some(Errno::ISDIR) => PathError::IsADirectory,
            Some(_) | None => PathError::Io(e),
        });
    }
    Ok(())
}
