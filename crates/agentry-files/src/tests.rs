//! Every kind of hostile name, against [`read`] and [`Lines`].

use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, Mode};

use crate::{FileError, FileKind, FileProblem, LineKind, Lines, NonRegular, read, read_to_string};

const SMALL: FileKind = FileKind::new("small file", 8);
const SHORT_LINES: LineKind = LineKind::new("short-lined file", 4);

fn fifo(dir: &Path) -> PathBuf {
    let path = dir.join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        FileType::Fifo,
        Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    path
}

fn sparse(dir: &Path, len: u64) -> PathBuf {
    let path = dir.join("sparse");
    std::fs::File::create(&path).unwrap().set_len(len).unwrap();
    path
}

fn all_lines(path: &Path, kind: LineKind) -> Result<Vec<(u64, String)>, FileError> {
    let mut lines = Lines::open(path, kind)?;
    let mut out = Vec::new();
    while let Some(line) = lines.next_line()? {
        let text = String::from_utf8(line.to_vec()).unwrap();
        out.push((lines.number(), text));
    }
    Ok(out)
}

#[test]
fn a_fifo_without_a_writer_is_refused_not_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = fifo(dir.path());

    let err = read(&path, FileKind::SCRIPT).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read the script {}: not a regular file (a FIFO)",
            path.display()
        )
    );
    let err = Lines::open(&path, LineKind::TRACE).unwrap_err();
    assert!(matches!(
        err.problem,
        FileProblem::NotRegular {
            what: NonRegular::Fifo
        }
    ));
}

#[test]
fn dev_zero_and_a_link_to_it_are_refused_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("ca.pem");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();

    for path in [Path::new("/dev/zero"), &link] {
        let err = read(path, FileKind::CA_FILE).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "cannot read the CA file {}: not a regular file (a character device)",
                path.display()
            )
        );
        let err = Lines::open(path, LineKind::TRACE).unwrap_err();
        assert!(matches!(
            err.problem,
            FileProblem::NotRegular {
                what: NonRegular::CharacterDevice
            }
        ));
    }
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = read(dir.path(), FileKind::TASK_FILE).unwrap_err();
    assert!(matches!(
        err.problem,
        FileProblem::NotRegular {
            what: NonRegular::Directory
        }
    ));
}

#[test]
fn a_huge_sparse_file_is_refused_by_its_size_naming_kind_and_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse(dir.path(), 2 << 30);

    let err = read(&path, FileKind::TASK_FILE).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read the task file {}: too large for a task file: 2147483648 bytes, at most 4194304 are read",
            path.display()
        )
    );
}

#[test]
fn a_file_at_the_cap_is_read_and_one_byte_more_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, b"12345678").unwrap();
    assert_eq!(read(&path, SMALL).unwrap(), b"12345678");

    std::fs::write(&path, b"123456789").unwrap();
    let err = read(&path, SMALL).unwrap_err();
    assert!(matches!(
        err.problem,
        FileProblem::TooLarge {
            kind: "small file",
            bytes: 9,
            cap: 8
        }
    ));
}

#[test]
fn a_link_to_a_regular_file_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.toml");
    std::fs::write(&target, "goal = \"x\"\n").unwrap();
    let link = dir.path().join("task.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();

    assert_eq!(
        read_to_string(&link, FileKind::TASK_FILE).unwrap(),
        "goal = \"x\"\n"
    );
}

#[test]
fn a_missing_file_and_bytes_that_are_not_text_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("gone");
    let err = read(&gone, FileKind::SCRIPT).unwrap_err();
    assert!(
        matches!(&err.problem, FileProblem::Open(e) if e.kind() == std::io::ErrorKind::NotFound)
    );
    assert!(
        err.to_string()
            .starts_with(&format!("cannot read the script {}: ", gone.display())),
        "{err}"
    );

    let path = dir.path().join("bin");
    std::fs::write(&path, [0xff, 0xfe]).unwrap();
    let err = read_to_string(&path, FileKind::SCRIPT).unwrap_err();
    assert!(matches!(err.problem, FileProblem::NotUtf8(_)), "{err:?}");
}

#[test]
fn lines_come_one_by_one_numbered_with_or_without_a_last_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    std::fs::write(&path, "abcd\n\nab\r\nxy").unwrap();

    assert_eq!(
        all_lines(&path, SHORT_LINES).unwrap(),
        [
            (1, "abcd".to_string()),
            (2, String::new()),
            (3, "ab\r".to_string()),
            (4, "xy".to_string())
        ]
    );
}

#[test]
fn a_line_over_the_cap_is_named_by_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(b"ab\nabcd\nabcde\nx\n").unwrap();

    let err = all_lines(&path, SHORT_LINES).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "cannot read the short-lined file {}: line 3 is longer than 4 bytes, the most a short-lined file line may hold",
            path.display()
        )
    );
}

/// A 2 GiB file of zeros without a newline (what a sparse file reads as) stops
/// at the trace's line cap, with one line's memory.
#[test]
fn a_huge_sparse_trace_fails_at_the_line_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = sparse(dir.path(), 2 << 30);

    let err = all_lines(&path, LineKind::TRACE).unwrap_err();
    assert!(matches!(
        err.problem,
        FileProblem::LineTooLong {
            kind: "trace",
            line: 1,
            cap: 67_108_864
        }
    ));
}
