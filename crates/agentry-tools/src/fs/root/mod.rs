//! [`WorkRoot`]: the run's working directory as a directory handle, and every
//! file operation on a model-given path done beneath it, with no window between
//! the check and the use.
//!
//! The old way — check a path, then open it again by name — loses to a model that
//! swaps a file or a directory for a symbolic link in between. Here nothing is
//! ever opened by an absolute name: the root is opened once, and a path is
//! resolved from that handle.
//!
//! - **Fast path** (Linux): one `openat2(root, path, RESOLVE_BENEATH |
//!   RESOLVE_NO_MAGICLINKS)`: the kernel follows symbolic links but refuses any
//!   resolution that leaves the root (`EXDEV`), atomically.
//! - **Slow path**, taken when the kernel refuses or fails (an absolute link,
//!   which may still point inside; an escape; a missing file, for a precise
//!   error; no `openat2`): a walk over handles. Each component is opened with
//!   `O_PATH | O_NOFOLLOW` relative to the handle of its parent, a link is read
//!   from its own handle (`readlinkat(fd, "")`) and its target walked the same
//!   way (`..` pops a handle; popping the root is an escape; an absolute target
//!   must lie under the root's canonical path and is walked from the root
//!   handle). The final open uses `O_NOFOLLOW`, so if the entry became a link
//!   after the walk the open fails instead of following it, and the walk is
//!   retried a few times.
//!
//! Writes always walk (to create directories and to see where they land), write
//! a temporary file with `O_CREAT | O_EXCL | O_NOFOLLOW` in the parent's handle
//! and `renameat` it over the name (a rename replaces a link, never follows it).
//! Reads open with `O_NONBLOCK` and accept regular files only, so a FIFO or a
//! device cannot block the host, and read at most a cap.

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

mod ops;
#[cfg(test)]
mod tests;
mod walk;

pub use ops::{
    ByteRange, FilePart, PathError, components, create_exclusive, open_dir_nofollow, read_part,
    regular_size,
};

use ops::{MAX_TRIES, guard, join, replace};
use walk::{Walk, walk};

/// The kind of a listed entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of [`WorkRoot::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name (lossy UTF-8).
    pub name: String,
    /// What it is, without following a link.
    pub kind: EntryKind,
    /// Length in bytes for a file, else 0.
    pub bytes: u64,
}

/// The run's working directory, opened once; see the module docs.
#[derive(Debug)]
pub struct WorkRoot {
    dir: OwnedFd,
    /// Canonical path of the root, to read absolute link targets against.
    canonical: PathBuf,
    /// The path it was opened by (shown back, and matched by artifact paths).
    given: PathBuf,
}

impl WorkRoot {
    /// Opens `path` (an operator's path: followed as given) as the root.
    pub fn open(path: &Path) -> io::Result<Self> {
        let canonical = std::fs::canonicalize(path)?;
        let dir = rustix::fs::open(
            &canonical,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(WorkRoot {
            dir,
            canonical,
            given: path.to_path_buf(),
        })
    }

    /// The path the root was opened by.
    pub fn path(&self) -> &Path {
        &self.given
    }

    /// `path` as root-relative normal components, when it lies under the root
    /// (lexically, by the given or the canonical path).
    pub fn relative(&self, path: &Path) -> Option<Vec<OsString>> {
        let rest = path
            .strip_prefix(&self.given)
            .or_else(|_| path.strip_prefix(&self.canonical))
            .ok()?;
        rest.components()
            .map(|c| match c {
                Component::Normal(name) => Some(name.to_os_string()),
                Component::CurDir
                | Component::ParentDir
                | Component::RootDir
                | Component::Prefix(_) => None,
            })
            .collect()
    }

    /// Reads a regular file of at most `cap` bytes. With `follow_final` false a
    /// link at the path itself is refused (`IsALink`); links before it are
    /// followed beneath the root either way.
    pub fn read_file(&self, rel: &str, cap: u64, follow_final: bool) -> Result<Vec<u8>, PathError> {
        let (file, size) = self.open_regular(rel, follow_final)?;
        if size > cap {
            return Err(PathError::TooLarge { bytes: size, cap });
        }
        // One byte past the cap, in case the file grew since `fstat`.
        let mut bytes = Vec::new();
        file.take(cap + 1).read_to_end(&mut bytes)?;
        let len = bytes.len() as u64;
        if len > cap {
            return Err(PathError::TooLarge { bytes: len, cap });
        }
        Ok(bytes)
    }

    /// Reads `range` of a regular file of at most `cap` bytes, hashing the
    /// whole file (see [`read_part`]). `follow_final` as for
    /// [`WorkRoot::read_file`].
    pub fn read_part(
        &self,
        rel: &str,
        range: ByteRange,
        cap: u64,
        follow_final: bool,
    ) -> Result<FilePart, PathError> {
        let (file, size) = self.open_regular(rel, follow_final)?;
        if size > cap {
            return Err(PathError::TooLarge { bytes: size, cap });
        }
        read_part(file, range, cap)
    }

    /// Opens a regular file beneath the root without blocking; its size.
    fn open_regular(
        &self,
        rel: &str,
        follow_final: bool,
    ) -> Result<(std::fs::File, u64), PathError> {
        let parts = components(rel)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.open_beneath(&parts, flags, follow_final)?;
        let size = regular_size(&fd)?;
        Ok((std::fs::File::from(fd), size))
    }

    /// The entries of a directory, unsorted, without following links.
    pub fn list(&self, rel: &str) -> Result<Vec<Entry>, PathError> {
        let parts = components(rel)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let fd = self.open_beneath(&parts, flags, true)?;
        let stat_fd = fd.try_clone()?;
        let mut names = Vec::new();
        let mut dir = rustix::fs::Dir::new(fd)?;
        while let Some(entry) = dir.read() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name));
            }
        }
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            let stat = match rustix::fs::statat(&stat_fd, &name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(Errno::NOENT) => continue, // removed while listing
                Err(e) => return Err(e.into()),
            };
            let (kind, bytes) = match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => {
                    (EntryKind::File, u64::try_from(stat.st_size).unwrap_or(0))
                }
                FileType::Directory => (EntryKind::Dir, 0),
                FileType::Symlink => (EntryKind::Symlink, 0),
                FileType::Fifo
                | FileType::Socket
                | FileType::CharacterDevice
                | FileType::BlockDevice
                | FileType::Unknown => (EntryKind::Other, 0),
            };
            entries.push(Entry {
                name: name.to_string_lossy().into_owned(),
                kind,
                bytes,
            });
        }
        Ok(entries)
    }

    /// Replaces the file at `rel` with `content` atomically (temporary file +
    /// rename in the same directory handle), creating missing directories. A
    /// link in the final component is followed when it stays beneath the root
    /// and its target exists; nothing under `protected` is entered or written.
    pub fn write_file(
        &self,
        rel: &str,
        content: &[u8],
        protected: &[OsString],
    ) -> Result<(), PathError> {
        let parts = components(rel)?;
        let how = Walk {
            follow_final: true,
            create_dirs: true,
            protected,
        };
        for _ in 0..MAX_TRIES {
            let resolved = walk(&self.dir, &self.canonical, &parts, how)?;
            let Some(name) = resolved.name else {
                return Err(PathError::IsRoot);
            };
            guard(&resolved.real, &name, protected)?;
            let mode = match rustix::fs::statat(&resolved.parent, &name, AtFlags::SYMLINK_NOFOLLOW)
            {
                Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
                    FileType::Directory => return Err(PathError::IsADirectory),
                    // Became a link after the walk: walk again.
                    FileType::Symlink => continue,
                    FileType::RegularFile
                    | FileType::Fifo
                    | FileType::Socket
                    | FileType::CharacterDevice
                    | FileType::BlockDevice
                    | FileType::Unknown => {
                        Some(Mode::from_raw_mode(stat.st_mode) & Mode::from_bits_truncate(0o7777))
                    }
                },
                Err(Errno::NOENT) if resolved.final_from_link => {
                    return Err(PathError::DanglingLink);
                }
                Err(Errno::NOENT) => None,
                Err(e) => return Err(e.into()),
            };
            return replace(resolved.parent.as_fd(), &name, content, mode);
        }
        Err(PathError::Changed)
    }

    /// Opens (creating them as needed) the directories `parts` below the root,
    /// refusing any that is a link: for agentry's own artifact directory, which
    /// the model's tools may have tampered with.
    pub fn create_dir_chain(&self, parts: &[OsString]) -> Result<OwnedFd, PathError> {
        let mut current = self.dir.try_clone()?;
        for part in parts {
            match rustix::fs::mkdirat(&current, part.as_os_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            current = open_dir_nofollow(current.as_fd(), part)?;
        }
        Ok(current)
    }

    /// Opens `parts` with `flags`: the kernel's `openat2` beneath the root first,
    /// the handle walk when it refuses or fails (see the module docs).
    fn open_beneath(
        &self,
        parts: &[OsString],
        flags: OFlags,
        follow_final: bool,
    ) -> Result<OwnedFd, PathError> {
        let nofollow = if follow_final {
            OFlags::empty()
        } else {
            OFlags::NOFOLLOW
        };
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use rustix::fs::ResolveFlags;
            let joined = join(parts);
            let beneath = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
            if let Ok(fd) = rustix::fs::openat2(
                &self.dir,
                joined.as_os_str(),
                flags | nofollow | OFlags::CLOEXEC,
                Mode::empty(),
                beneath,
            ) {
                return Ok(fd);
            }
        }
        let how = Walk {
            follow_final,
            create_dirs: false,
            protected: &[],
        };
        for _ in 0..MAX_TRIES {
            let resolved = walk(&self.dir, &self.canonical, parts, how)?;
            let name = resolved.name.unwrap_or_else(|| OsString::from("."));
            let opened = rustix::fs::openat(
                &resolved.parent,
                name.as_os_str(),
                flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            );
            return match opened {
                Ok(fd) => Ok(fd),
                // The entry became a link after the walk: walk again.
                Err(Errno::LOOP) if follow_final => continue,
                Err(Errno::LOOP) => Err(PathError::IsALink),
                Err(Errno::NOENT) if resolved.final_from_link => Err(PathError::DanglingLink),
                Err(Errno::NOENT) => Err(PathError::NotFound),
                Err(Errno::NOTDIR) => Err(PathError::NotADirectory),
                Err(Errno::ISDIR) => Err(PathError::IsADirectory),
                Err(e) => Err(e.into()),
            };
        }
        Err(PathError::Changed)
    }
}
