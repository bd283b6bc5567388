//! Opening a named output (a trace) without blocking on a FIFO nobody reads.

use std::io::ErrorKind;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Opens `path` for writing (created 0644 less the umask, truncated unless
/// `append`), without waiting for a reader: a FIFO nobody has open for
/// reading fails at once (`ENXIO`, said as such) instead of hanging the
/// caller. Once open the file blocks again as usual, so a pipe to a slow
/// reader (`--trace /dev/stdout | jq`) still takes every line.
pub fn create_output(path: &Path, append: bool) -> std::io::Result<std::fs::File> {
    let mode = if append {
        OFlags::APPEND
    } else {
        OFlags::TRUNC
    };
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC
            | mode,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| {
        if e == rustix::io::Errno::NXIO {
            std::io::Error::new(
                ErrorKind::WouldBlock,
                "a FIFO that nobody is reading (open its reading end first)",
            )
        } else {
            e.into()
        }
    })?;
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(std::fs::File::from(fd))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::create_output;
    use std::io::Write;

    #[test]
    fn a_fifo_nobody_reads_fails_at_once_and_a_file_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let err = create_output(&fifo, false).unwrap_err();
        assert!(err.to_string().contains("nobody is reading"), "{err}");

        let file = dir.path().join("trace.jsonl");
        std::fs::write(&file, "old\n").unwrap();
        create_output(&file, true)
            .unwrap()
            .write_all(b"new\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "old\nnew\n");
        create_output(&file, false)
            .unwrap()
            .write_all(b"x\n")
            .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "x\n");
    }
}
