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

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Most symbolic links one resolution follows (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// How often a resolution is retried when the tree changed under it.
const MAX_TRIES: usize = 4;

/// Most directories one write may create (a path has at most this many parts
/// that matter; past it, someone keeps removing what was created).
const MAX_CREATES: usize = 256;

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

/// One component still to resolve.
struct Step {
    name: OsString,
    /// Came from a link's target (a missing one is a dangling link).
    from_link: bool,
}

/// How [`WorkRoot::walk`] treats the final component and missing directories.
#[derive(Clone, Copy)]
struct Walk<'a> {
    /// Follow a link in the final component (else it is returned as a name).
    follow_final: bool,
    /// Create missing directories on the way.
    create_dirs: bool,
    /// Refuse (`Protected`) to enter or create anything under this path.
    protected: &'a [OsString],
}

/// Where a walk ended: the handle of the parent directory and the final name
/// (`None`: the root itself).
struct Resolved {
    parent: OwnedFd,
    name: Option<OsString>,
    /// Root-relative real path of `parent`.
    real: Vec<OsString>,
    /// The final name came from a link's target.
    final_from_link: bool,
}

/// The state of one walk: the handles of the directories entered (below the
/// root), the components still to resolve, and the counters that bound it.
struct Walker {
    stack: Vec<(OwnedFd, OsString)>,
    queue: VecDeque<Step>,
    links: usize,
    creates: usize,
}

/// The directory the next component is opened in: the last entered, or the root.
fn current<'a>(stack: &'a [(OwnedFd, OsString)], root: &'a OwnedFd) -> BorrowedFd<'a> {
    stack.last().map_or(root.as_fd(), |(fd, _)| fd.as_fd())
}

impl Walker {
    /// Puts a link's target in front of the queue. A relative target continues
    /// from the link's directory; an absolute one only names a place under the
    /// root (`canonical`), walked from the root handle.
    fn expand(&mut self, target: &[u8], canonical: &Path) -> Result<(), PathError> {
        let target = PathBuf::from(OsString::from_vec(target.to_vec()));
        let target = if target.is_absolute() {
            self.stack.clear();
            target
                .strip_prefix(canonical)
                .map_err(|_| PathError::Escapes)?
                .to_path_buf()
        } else {
            target
        };
        for part in target.components().rev() {
            let name = match part {
                Component::Normal(name) => name.to_os_string(),
                Component::ParentDir => OsString::from(".."),
                Component::CurDir => continue,
                Component::RootDir | Component::Prefix(_) => return Err(PathError::Escapes),
            };
            self.queue.push_front(Step {
                name,
                from_link: true,
            });
        }
        Ok(())
    }
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
        let parts = components(rel)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.open_beneath(&parts, flags, follow_final)?;
        let stat = rustix::fs::fstat(&fd)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(PathError::IsADirectory),
            other => {
                return Err(PathError::NotRegular {
                    kind: kind_name(other),
                });
            }
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size > cap {
            return Err(PathError::TooLarge { bytes: size, cap });
        }
        // One byte past the cap, in case the file grew since `fstat`.
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(cap + 1)
            .read_to_end(&mut bytes)?;
        let len = bytes.len() as u64;
        if len > cap {
            return Err(PathError::TooLarge { bytes: len, cap });
        }
        Ok(bytes)
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
            let resolved = self.walk(&parts, how)?;
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
                    _ => Some(Mode::from_raw_mode(stat.st_mode) & Mode::from_bits_truncate(0o7777)),
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
            let resolved = self.walk(parts, how)?;
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

    /// Resolves `parts` over handles, following links beneath the root; see the
    /// module docs. Every open is relative to a handle this walk holds, with
    /// `O_NOFOLLOW`, so a concurrent swap is seen (as a link, walked beneath the
    /// root like any other) rather than followed blindly.
    fn walk(&self, parts: &[OsString], how: Walk<'_>) -> Result<Resolved, PathError> {
        let mut walker = Walker {
            stack: Vec::new(),
            queue: parts
                .iter()
                .map(|name| Step {
                    name: name.clone(),
                    from_link: false,
                })
                .collect(),
            links: 0,
            creates: 0,
        };
        while let Some(step) = walker.queue.pop_front() {
            if step.name.is_empty() || step.name == "." {
                continue;
            }
            if step.name == ".." {
                walker.stack.pop().ok_or(PathError::Escapes)?;
                continue;
            }
            if walker.queue.is_empty() && !how.follow_final {
                return self.resolved(walker.stack, step);
            }
            if let Some(end) = self.advance(&mut walker, step, how)? {
                return Ok(end);
            }
        }
        // Ended on a directory: its parent and its name, or the root itself.
        match walker.stack.pop() {
            Some((_, name)) => self.resolved(
                walker.stack,
                Step {
                    name,
                    from_link: false,
                },
            ),
            None => Ok(Resolved {
                parent: self.dir.try_clone()?,
                name: None,
                real: Vec::new(),
                final_from_link: false,
            }),
        }
    }

    /// Opens one component relative to the walker's current directory: a
    /// directory is entered, a link expanded into the queue, a missing
    /// directory created (if asked); the final component ends the walk.
    fn advance(
        &self,
        walker: &mut Walker,
        step: Step,
        how: Walk<'_>,
    ) -> Result<Option<Resolved>, PathError> {
        let last = walker.queue.is_empty();
        let dir = current(&walker.stack, &self.dir);
        let opened = rustix::fs::openat(
            dir,
            step.name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let fd = match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT) if last => {
                return self.resolved(walker.stack.split_off(0), step).map(Some);
            }
            Err(Errno::NOENT) if step.from_link => return Err(PathError::DanglingLink),
            Err(Errno::NOENT) if how.create_dirs => {
                walker.creates += 1;
                if walker.creates > MAX_CREATES {
                    return Err(PathError::Changed);
                }
                guard(&names(&walker.stack), &step.name, how.protected)?;
                let mode = Mode::from_bits_truncate(0o777);
                match rustix::fs::mkdirat(dir, step.name.as_os_str(), mode) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                walker.queue.push_front(step); // open what was just made, as any other
                return Ok(None);
            }
            Err(Errno::NOENT) => return Err(PathError::NotFound),
            Err(e) => return Err(e.into()),
        };
        match FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) {
            FileType::Symlink => {
                walker.links += 1;
                if walker.links > MAX_LINKS {
                    return Err(PathError::TooManyLinks);
                }
                let target = rustix::fs::readlinkat(&fd, c"", Vec::new())?;
                walker.expand(&target.into_bytes(), &self.canonical)?;
            }
            FileType::Directory => {
                if how.create_dirs {
                    guard(&names(&walker.stack), &step.name, how.protected)?;
                }
                walker.stack.push((fd, step.name));
            }
            _ if last => return self.resolved(walker.stack.split_off(0), step).map(Some),
            _ => return Err(PathError::NotADirectory),
        }
        Ok(None)
    }

    fn resolved(
        &self,
        mut stack: Vec<(OwnedFd, OsString)>,
        last: Step,
    ) -> Result<Resolved, PathError> {
        let real = names(&stack);
        let parent = match stack.pop() {
            Some((fd, _)) => fd,
            None => self.dir.try_clone()?,
        };
        Ok(Resolved {
            parent,
            name: Some(last.name),
            real,
            final_from_link: last.from_link,
        })
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
/// `..`, an empty path and NUL bytes are refused; `.` components are dropped.
pub fn components(rel: &str) -> Result<Vec<OsString>, PathError> {
    if rel.trim().is_empty() {
        return Err(PathError::Empty);
    }
    if rel.contains('\0') {
        return Err(PathError::Nul);
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
    Ok(out)
}

/// `Protected` when `parent/name` lies under `protected` (root-relative).
fn guard(parent: &[OsString], name: &OsStr, protected: &[OsString]) -> Result<(), PathError> {
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

fn names(stack: &[(OwnedFd, OsString)]) -> Vec<OsString> {
    stack.iter().map(|(_, name)| name.clone()).collect()
}

/// `parts` joined with `/`, or `.` for none.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn join(parts: &[OsString]) -> OsString {
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

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Symlink => "symbolic link",
        FileType::Directory => "directory",
        FileType::RegularFile => "regular file",
        FileType::Unknown => "special file",
    }
}

/// Distinguishes temp files of concurrent writes in one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `content` to a fresh temporary file in `dir` and renames it over `name`.
fn replace(
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, WorkRoot) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("work")).unwrap();
        std::fs::write(dir.path().join("secret"), "secret").unwrap();
        let root = WorkRoot::open(&dir.path().join("work")).unwrap();
        (dir, root)
    }

    #[test]
    fn links_are_followed_only_while_they_stay_beneath() {
        let (dir, root) = root();
        let work = dir.path().join("work");
        std::fs::create_dir(work.join("a")).unwrap();
        std::fs::write(work.join("a/f"), "inside").unwrap();
        symlink(work.join("a/f"), work.join("abs-in")).unwrap();
        symlink("a/../a/f", work.join("rel-in")).unwrap();
        symlink("../secret", work.join("rel-out")).unwrap();
        symlink("../../secret", work.join("a/deep-out")).unwrap();
        symlink(dir.path().join("secret"), work.join("abs-out")).unwrap();
        symlink("loop", work.join("loop")).unwrap();
        for ok in ["abs-in", "rel-in", "a/f"] {
            assert_eq!(root.read_file(ok, 100, true).unwrap(), b"inside", "{ok}");
        }
        for out in ["rel-out", "a/deep-out", "abs-out"] {
            let err = root.read_file(out, 100, true).unwrap_err();
            assert!(matches!(err, PathError::Escapes), "{out}: {err:?}");
        }
        let err = root.read_file("loop", 100, true).unwrap_err();
        assert!(matches!(err, PathError::TooManyLinks), "{err:?}");
        let err = root.read_file("abs-in", 100, false).unwrap_err();
        assert!(matches!(err, PathError::IsALink), "{err:?}");
    }

    #[test]
    fn writes_follow_a_link_inside_and_never_a_dangling_one() {
        let (dir, root) = root();
        let work = dir.path().join("work");
        std::fs::write(work.join("target"), "old").unwrap();
        symlink("target", work.join("alias")).unwrap();
        symlink("missing", work.join("dangling")).unwrap();
        root.write_file("alias", b"new", &[]).unwrap();
        assert_eq!(std::fs::read_to_string(work.join("target")).unwrap(), "new");
        assert!(
            std::fs::symlink_metadata(work.join("alias"))
                .unwrap()
                .is_symlink()
        );
        let err = root.write_file("dangling", b"x", &[]).unwrap_err();
        assert!(matches!(err, PathError::DanglingLink), "{err:?}");
        assert!(!work.join("missing").exists());
        let err = root.write_file(".", b"x", &[]).unwrap_err();
        assert!(matches!(err, PathError::IsRoot), "{err:?}");
    }

    #[test]
    fn the_protected_directory_is_neither_created_nor_written() {
        let (dir, root) = root();
        let protected = [OsString::from(".agentry")];
        for rel in [".agentry", ".agentry/out/x", "./.agentry/y"] {
            let err = root.write_file(rel, b"x", &protected).unwrap_err();
            assert!(matches!(err, PathError::Protected), "{rel}: {err:?}");
        }
        assert!(!dir.path().join("work/.agentry").exists());
        root.write_file(".agentry2/x", b"x", &protected).unwrap();
    }

    #[test]
    fn special_files_are_refused_unopened_and_big_ones_unread() {
        let (dir, root) = root();
        let work = dir.path().join("work");
        let status = std::process::Command::new("mkfifo")
            .arg(work.join("fifo"))
            .status()
            .unwrap();
        assert!(status.success());
        let err = root.read_file("fifo", 100, true).unwrap_err();
        assert!(
            matches!(err, PathError::NotRegular { kind: "FIFO" }),
            "{err:?}"
        );
        std::fs::write(work.join("big"), [b'a'; 101]).unwrap();
        let err = root.read_file("big", 100, true).unwrap_err();
        assert!(
            matches!(
                err,
                PathError::TooLarge {
                    bytes: 101,
                    cap: 100
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn create_exclusive_replaces_a_planted_link_instead_of_following_it() {
        let (dir, root) = root();
        let work = dir.path().join("work");
        let out = root
            .create_dir_chain(&[OsString::from(".agentry"), OsString::from("out")])
            .unwrap();
        symlink(
            dir.path().join("secret"),
            work.join(".agentry/out/c.1.stdout"),
        )
        .unwrap();
        let mut file = create_exclusive(out.as_fd(), OsStr::new("c.1.stdout")).unwrap();
        file.write_all(b"output").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("secret")).unwrap(),
            "secret"
        );
        assert_eq!(
            std::fs::read_to_string(work.join(".agentry/out/c.1.stdout")).unwrap(),
            "output"
        );
        // A directory in the chain that is a link is refused.
        std::fs::remove_dir_all(work.join(".agentry")).unwrap();
        symlink(dir.path(), work.join(".agentry")).unwrap();
        let err = root
            .create_dir_chain(&[OsString::from(".agentry"), OsString::from("out")])
            .unwrap_err();
        assert!(matches!(err, PathError::IsALink), "{err:?}");
        assert!(!dir.path().join("out").exists());
    }
}
