//! Opening a named file without blocking, and telling what was opened.

use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{FileType, Mode, OFlags};

use crate::error::{FileProblem, NonRegular};

/// The length of what `fd` holds open if it is a regular file, else what it
/// is. Judged on the handle (`fstat`), so a name swapped after the open does
/// not matter.
pub fn regular_len(fd: BorrowedFd<'_>) -> std::io::Result<Result<u64, NonRegular>> {
    let stat = rustix::fs::fstat(fd)?;
    let other = match FileType::from_raw_mode(stat.st_mode) {
        FileType::RegularFile => return Ok(Ok(u64::try_from(stat.st_size).unwrap_or(0))),
        FileType::Directory => NonRegular::Directory,
        FileType::Fifo => NonRegular::Fifo,
        FileType::Socket => NonRegular::Socket,
        FileType::CharacterDevice => NonRegular::CharacterDevice,
        FileType::BlockDevice => NonRegular::BlockDevice,
        FileType::Symlink => NonRegular::Symlink,
        FileType::Unknown => NonRegular::Unknown,
    };
    Ok(Err(other))
}

/// Opens `path` for reading without blocking (`O_NONBLOCK`: a FIFO without a
/// writer opens at once) and without becoming its controlling terminal, then
/// refuses anything but a regular file. Links are followed; what they lead to
/// is judged. Returns the file and its length at the open.
pub fn open_regular(path: &Path) -> Result<(std::fs::File, u64), FileProblem> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| FileProblem::Open(e.into()))?;
    match regular_len(fd.as_fd()) {
        Ok(Ok(len)) => Ok((std::fs::File::from(fd), len)),
        Ok(Err(what)) => Err(FileProblem::NotRegular { what }),
        Err(e) => Err(FileProblem::Open(e)),
    }
}
