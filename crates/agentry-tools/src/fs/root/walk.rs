//! The handle walk: resolving a path one component at a time beneath the root,
//! for when the kernel's `openat2` refuses or fails (see [`WorkRoot`](super::WorkRoot)).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{FileType, Mode, OFlags};
use rustix::io::Errno;

use super::ops::{MAX_DEPTH, MAX_TRIES, PathError, guard, names};

/// Most symbolic links one resolution follows (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// One component still to resolve.
struct Step {
    name: OsString,
    /// Came from a link's target (a missing one is a dangling link).
    from_link: bool,
    /// How often this walk created it: missing again after
    /// [`MAX_TRIES`] creates, someone keeps removing it (`Changed`).
    created: usize,
}

impl Step {
    fn new(name: OsString, from_link: bool) -> Step {
        Step {
            name,
            from_link,
            created: 0,
        }
    }
}

/// How [`walk`] treats the final component and missing directories.
#[derive(Clone, Copy)]
pub(super) struct Walk<'a> {
    /// Follow a link in the final component (else it is returned as a name).
    pub(super) follow_final: bool,
    /// Create missing directories on the way.
    pub(super) create_dirs: bool,
    /// Refuse (`Protected`) to enter or create anything under this path.
    pub(super) protected: &'a [OsString],
}

/// Where a walk ended: the handle of the parent directory and the final name
/// (`None`: the root itself).
pub(super) struct Resolved {
    pub(super) parent: OwnedFd,
    pub(super) name: Option<OsString>,
    /// Root-relative real path of `parent`.
    pub(super) real: Vec<OsString>,
    /// The final name came from a link's target.
    pub(super) final_from_link: bool,
}

/// The state of one walk: the root it walks beneath, the handles of the
/// directories entered (below the root), the components still to resolve, and
/// the counters that bound it.
struct Walker<'r> {
    root: &'r OwnedFd,
    /// Canonical path of the root, to read absolute link targets against.
    canonical: &'r Path,
    stack: Vec<(OwnedFd, OsString)>,
    queue: VecDeque<Step>,
    links: usize,
}

/// The directory the next component is opened in: the last entered, or the root.
fn current<'a>(stack: &'a [(OwnedFd, OsString)], root: &'a OwnedFd) -> BorrowedFd<'a> {
    stack.last().map_or(root.as_fd(), |(fd, _)| fd.as_fd())
}

/// Resolves `parts` over handles beneath `root` (canonically `canonical`),
/// following links beneath it; see the module docs of `root/`. Every open is
/// relative to a handle this walk holds, with `O_NOFOLLOW`, so a concurrent swap
/// is seen (as a link, walked beneath the root like any other) rather than
/// followed blindly.
pub(super) fn walk(
    root: &OwnedFd,
    canonical: &Path,
    parts: &[OsString],
    how: Walk<'_>,
) -> Result<Resolved, PathError> {
    let mut walker = Walker {
        root,
        canonical,
        stack: Vec::new(),
        queue: parts
            .iter()
            .map(|name| Step::new(name.clone(), false))
            .collect(),
        links: 0,
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
            return resolved(root, walker.stack, step);
        }
        if let Some(end) = walker.advance(step, how)? {
            return Ok(end);
        }
    }
    // Ended on a directory: its parent and its name, or the root itself.
    match walker.stack.pop() {
        Some((_, name)) => resolved(root, walker.stack, Step::new(name, false)),
        None => Ok(Resolved {
            parent: root.try_clone()?,
            name: None,
            real: Vec::new(),
            final_from_link: false,
        }),
    }
}

impl Walker<'_> {
    /// Opens one component relative to the walker's current directory: a
    /// directory is entered, a link expanded into the queue, a missing
    /// directory created (if asked); the final component ends the walk.
    fn advance(&mut self, step: Step, how: Walk<'_>) -> Result<Option<Resolved>, PathError> {
        let last = self.queue.is_empty();
        let dir = current(&self.stack, self.root);
        let opened = rustix::fs::openat(
            dir,
            step.name.as_os_str(),
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        let fd = match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT) if last => {
                return resolved(self.root, self.stack.split_off(0), step).map(Some);
            }
            Err(Errno::NOENT) if step.from_link => return Err(PathError::DanglingLink),
            Err(Errno::NOENT) if how.create_dirs => {
                if step.created >= MAX_TRIES {
                    return Err(PathError::Changed);
                }
                guard(&names(&self.stack), &step.name, how.protected)?;
                let mode = Mode::from_bits_truncate(0o777);
                match rustix::fs::mkdirat(dir, step.name.as_os_str(), mode) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                // Open what was just made, as any other.
                self.queue.push_front(Step {
                    created: step.created + 1,
                    ..step
                });
                return Ok(None);
            }
            Err(Errno::NOENT) => return Err(PathError::NotFound),
            Err(e) => return Err(e.into()),
        };
        match FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode) {
            FileType::Symlink => {
                self.links += 1;
                if self.links > MAX_LINKS {
                    return Err(PathError::TooManyLinks);
                }
                let target = rustix::fs::readlinkat(&fd, c"", Vec::new())?;
                self.expand(&target.into_bytes())?;
            }
            FileType::Directory => {
                // Links may lead deeper than the path's own components.
                if self.stack.len() >= MAX_DEPTH {
                    return Err(PathError::TooDeep { max: MAX_DEPTH });
                }
                if how.create_dirs {
                    guard(&names(&self.stack), &step.name, how.protected)?;
                }
                self.stack.push((fd, step.name));
            }
            // Anything else ends the path: it must be its last component.
            FileType::RegularFile
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => {
                if !last {
                    return Err(PathError::NotADirectory);
                }
                return resolved(self.root, self.stack.split_off(0), step).map(Some);
            }
        }
        Ok(None)
    }

    /// Puts a link's target in front of the queue. A relative target continues
    /// from the link's directory; an absolute one only names a place under the
    /// root (`canonical`), walked from the root handle.
    fn expand(&mut self, target: &[u8]) -> Result<(), PathError> {
        let target = PathBuf::from(OsString::from_vec(target.to_vec()));
        let target = if target.is_absolute() {
            self.stack.clear();
            target
                .strip_prefix(self.canonical)
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
            self.queue.push_front(Step::new(name, true));
        }
        Ok(())
    }
}

/// Where the walk ends: the last entered directory (or the root) as the parent,
/// and `last` as the final name.
fn resolved(
    root: &OwnedFd,
    mut stack: Vec<(OwnedFd, OsString)>,
    last: Step,
) -> Result<Resolved, PathError> {
    let real = names(&stack);
    let parent = match stack.pop() {
        Some((fd, _)) => fd,
        None => root.try_clone()?,
    };
    Ok(Resolved {
        parent,
        name: Some(last.name),
        real,
        final_from_link: last.from_link,
    })
}
