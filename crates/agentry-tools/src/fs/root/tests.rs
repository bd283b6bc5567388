//! [`WorkRoot`]'s confinement on real directories: links, writes, the
//! protected directory, special files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::symlink;

use super::*;

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
