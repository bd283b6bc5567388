//! agentry's private directories: its directory in the shared temp directory,
//! `<tmp>/agentry` (default working directories, `runs/`), and any other
//! directory agentry keeps to itself (the CLI's state directory, where its
//! default store `runs.db` lives).
//!
//! The temp directory is shared with every local user, who could plant
//! `<tmp>/agentry` (or a file in it) as a symbolic link to a place of their
//! choosing, or as a directory of their own, before agentry first runs. So the
//! directory is created `0700`; an existing one must be a real directory owned
//! by this user (its mode is tightened to `0700`), and a symbolic link or a
//! directory of someone else is refused, naming the path. Inside a directory
//! only we can write, nobody else can plant anything. A state directory gets
//! the same checks: it may sit on a shared or misconfigured path too.

use std::path::{Path, PathBuf};

use crate::error::RuntimeError;

/// `<tmp>/agentry`, created `0700` if missing; refused if it is a symbolic
/// link, not a directory, or someone else's.
pub fn private_temp_dir() -> Result<PathBuf, RuntimeError> {
    let dir = std::env::temp_dir().join("agentry");
    private_dir(&dir, "set TMPDIR")?;
    Ok(dir)
}

/// Makes `dir` agentry's own as [`private_temp_dir`] does: created `0700` if
/// missing (missing parents too, `0700` as the XDG base directory rules ask),
/// refused if it is a symbolic link, not a directory, or someone else's.
/// `instead` ends a refusal: what the user can do besides removing it
/// (`"set TMPDIR"`).
pub fn private_dir(dir: &Path, instead: &str) -> Result<(), RuntimeError> {
    ensure_private_dir(dir, current_uid()).map_err(|why| RuntimeError::UnsafePath {
        path: dir.to_path_buf(),
        message: format!("{why}; remove it, or {instead}"),
    })
}

/// Checks a file agentry is about to open in its private directory (the
/// default store): absent, or a regular file of this user, never a link.
pub fn check_private_file(path: &Path) -> Result<(), RuntimeError> {
    check_file(path, current_uid()).map_err(|why| RuntimeError::UnsafePath {
        path: path.to_path_buf(),
        message: format!("{why}; remove it, or pass --store FILE"),
    })
}

#[cfg(unix)]
fn current_uid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

#[cfg(not(unix))]
fn current_uid() -> u32 {
    0
}

/// What is wrong with `dir` for user `uid`, after creating or tightening it.
fn ensure_private_dir(dir: &Path, uid: u32) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match create_private_dir(dir) {
            Ok(()) => Ok(()),
            // Someone created it meanwhile: judge what is there now.
            Err(_) if std::fs::symlink_metadata(dir).is_ok() => check_dir(dir, uid),
            Err(why) => Err(format!("cannot create it: {why}")),
        },
        Err(e) => Err(e.to_string()),
        Ok(_) => check_dir(dir, uid),
    }
}

/// Creates `dir` `0700`, and its missing parents `0700` too; an existing
/// `dir` is an error (judged by the caller: it may have been planted).
fn create_private_dir(dir: &Path) -> Result<(), String> {
    let private = |recursive: bool| {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(recursive);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
    };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        private(true).create(parent).map_err(|e| e.to_string())?;
    }
    private(false).create(dir).map_err(|e| e.to_string())
}

#[cfg(unix)]
fn check_dir(dir: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() {
        return Err(LINK.to_string());
    }
    if !meta.is_dir() {
        return Err("it is not a directory".to_string());
    }
    if meta.uid() != uid {
        return Err(format!(
            "it belongs to user {}, not to you (user {uid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make it private (0700): {e}"))?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_dir(dir: &Path, _uid: u32) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    if meta.file_type().is_symlink() || !meta.is_dir() {
        return Err(LINK.to_string());
    }
    Ok(())
}

const LINK: &str =
    "it is a symbolic link (someone may have planted it to redirect agentry's files)";

#[cfg(unix)]
fn check_file(path: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.to_string()),
        Ok(meta) if meta.file_type().is_symlink() => Err(LINK.to_string()),
        Ok(meta) if !meta.is_file() => Err("it is not a regular file".to_string()),
        Ok(meta) if meta.uid() != uid => Err(format!(
            "it belongs to user {}, not to you (user {uid})",
            meta.uid()
        )),
        Ok(_) => Ok(()),
    }
}

#[cfg(not(unix))]
fn check_file(path: &Path, _uid: u32) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(LINK.to_string()),
        _ => Ok(()),
    }
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_directory_is_created_private_and_an_open_one_of_ours_is_tightened() {
        let tmp = tempfile::tempdir().unwrap();
        let me = current_uid();
        let dir = tmp.path().join("agentry");
        ensure_private_dir(&dir, me).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        ensure_private_dir(&dir, me).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn missing_parents_are_created_private_and_a_refusal_says_what_to_do_instead() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("home/.local/state");
        let dir = state.join("agentry");
        private_dir(&dir, "set AGENTRY_STORE").unwrap();
        for p in [tmp.path().join("home"), state.clone(), dir.clone()] {
            assert_eq!(mode(&p), 0o700, "{}", p.display());
        }
        std::fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink(tmp.path(), &dir).unwrap();
        let err = private_dir(&dir, "set AGENTRY_STORE")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(&format!("refusing {}", dir.display())),
            "{err}"
        );
        assert!(
            err.ends_with("symbolic link (someone may have planted it to redirect agentry's files); remove it, or set AGENTRY_STORE"),
            "{err}"
        );
    }

    #[test]
    fn a_link_a_file_or_someone_elses_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let me = current_uid();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let err = ensure_private_dir(&link, me).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(
            ensure_private_dir(&file, me)
                .unwrap_err()
                .contains("not a directory")
        );
        // A directory of another user (as seen by a user with another uid).
        let err = ensure_private_dir(&elsewhere, me.wrapping_add(1)).unwrap_err();
        assert!(err.contains("belongs to user"), "{err}");
        assert_eq!(mode(&elsewhere) & 0o700, 0o700, "left as it was");

        // The store file: a link or someone else's file is refused.
        assert!(check_file(&tmp.path().join("absent.db"), me).is_ok());
        assert!(check_file(&file, me).is_ok());
        let db_link = tmp.path().join("runs.db");
        std::os::unix::fs::symlink(&file, &db_link).unwrap();
        assert!(
            check_file(&db_link, me)
                .unwrap_err()
                .contains("symbolic link")
        );
        assert!(
            check_file(&file, me.wrapping_add(1))
                .unwrap_err()
                .contains("belongs to user")
        );
    }
}
