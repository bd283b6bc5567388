//! Where tools keep what does not fit inline (process output, large results):
//! opening an artifact directory safely, and how a saved file's path is shown.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::fs::{PathError, WorkRoot, open_dir_nofollow};

/// Opens `dir` (created as needed): beneath the run's root with every
/// component a real directory, or, outside it (a place the operator chose, out
/// of the file tools' reach), with only its last component checked.
pub(crate) fn open_artifact_dir(root: &WorkRoot, dir: &Path) -> Result<OwnedFd, PathError> {
    if let Some(parts) = root.relative(dir) {
        return root.create_dir_chain(&parts);
    }
    std::fs::create_dir_all(dir)?;
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(PathError::NotADirectory);
    };
    let parent = rustix::fs::open(
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    open_dir_nofollow(parent.as_fd(), name)
}

/// `path` relative to `workdir` when inside it (with `/` separators), else absolute.
pub(crate) fn shown_path(workdir: &Path, path: &Path) -> String {
    let relative = path
        .strip_prefix(workdir)
        .ok()
        .map(Path::to_path_buf)
        .or_else(|| {
            let workdir = std::fs::canonicalize(workdir).ok()?;
            let path = std::fs::canonicalize(path).ok()?;
            path.strip_prefix(&workdir).ok().map(Path::to_path_buf)
        });
    match relative {
        Some(rel) => rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        None => path.display().to_string(),
    }
}
