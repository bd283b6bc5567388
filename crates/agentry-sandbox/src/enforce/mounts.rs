//! The call's mount plan: covers over denied places (keeping the call's own
//! places inside them visible) and read-only `.git`/`.agentry`.

use std::path::{Path, PathBuf};

use crate::error::SandboxError;
use crate::plan::{Keep, MAX_KEEPS, MountStep, path_cstring};

/// `deny` and `keeps` are canonical. Covers go shallowest first so a denied
/// place inside a kept one is covered on the kept tree.
pub(super) fn plan(
    deny: &[PathBuf],
    keeps: &[&Path],
    read_only: &[PathBuf],
) -> Result<Vec<MountStep>, SandboxError> {
    let mut denied: Vec<&PathBuf> = deny.iter().collect();
    denied.sort_by_key(|path| path.components().count());
    let mut steps = Vec::new();
    for path in denied {
        if let Some(step) = deny_step(path, keeps)? {
            steps.push(step);
        }
    }
    for path in read_only {
        if let Some(step) = read_only_step(path)? {
            steps.push(step);
        }
    }
    Ok(steps)
}

fn deny_step(path: &Path, keeps: &[&Path]) -> Result<Option<MountStep>, SandboxError> {
    let Ok(metadata) = path.metadata() else {
        return Ok(None);
    };
    if !metadata.is_dir() {
        return Ok(Some(MountStep::HideFile {
            file: path_cstring(path)?,
        }));
    }
    // A kept place that is the denied one wins: the call needs it. (A denied
    // place inside a kept one is covered: the deny is the narrower word.)
    if keeps.contains(&path) {
        return Ok(None);
    }
    let inside = outermost_inside(path, keeps);
    if inside.len() > MAX_KEEPS {
        return Err(SandboxError::InvalidSetting {
            key: "write",
            value: path.display().to_string(),
            reason: format!("more than {MAX_KEEPS} writable places inside one denied directory"),
        });
    }
    let keeps = inside
        .into_iter()
        .map(|keep| keep_step(path, keep))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(MountStep::Cover {
        dir: path_cstring(path)?,
        keeps,
    }))
}

/// The kept places strictly inside `dir` that are not inside another of them.
fn outermost_inside<'a>(dir: &Path, keeps: &[&'a Path]) -> Vec<&'a Path> {
    let inside: Vec<&Path> = keeps
        .iter()
        .copied()
        .filter(|keep| keep.starts_with(dir))
        .collect();
    inside
        .iter()
        .copied()
        .filter(|keep| {
            !inside
                .iter()
                .any(|other| other != keep && keep.starts_with(other))
        })
        .collect()
}

fn keep_step(dir: &Path, keep: &Path) -> Result<Keep, SandboxError> {
    let mut mkdirs: Vec<PathBuf> = keep
        .ancestors()
        .take_while(|ancestor| *ancestor != dir)
        .map(Path::to_path_buf)
        .collect();
    mkdirs.reverse();
    Ok(Keep {
        path: path_cstring(keep)?,
        mkdirs: mkdirs
            .iter()
            .map(|path| path_cstring(path))
            .collect::<Result<_, _>>()?,
    })
}

fn read_only_step(path: &Path) -> Result<Option<MountStep>, SandboxError> {
    if path.symlink_metadata().is_err() {
        return Ok(None);
    }
    let path = path.canonicalize().map_err(|source| SandboxError::Path {
        path: path.to_path_buf(),
        source,
    })?;
    let text = path_cstring(&path)?;
    Ok(Some(MountStep::ReadOnly {
        locked: locked_flags(&text).map_err(|source| SandboxError::Path { path, source })?,
        path: text,
    }))
}

/// The flags of the mount `path` is on that a remount in a user namespace
/// must repeat (the kernel locks them): nosuid, nodev, noexec, atime.
fn locked_flags(path: &std::ffi::CStr) -> std::io::Result<libc::c_ulong> {
    // SAFETY: statvfs is plain data; statvfs(3) fills it.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let has = |flag: libc::c_ulong| stat.f_flag & flag != 0;
    let mut flags = 0;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
    ] {
        if has(st) {
            flags |= ms;
        }
    }
    flags |= match (has(libc::ST_NOATIME), has(libc::ST_RELATIME)) {
        (true, _) => libc::MS_NOATIME,
        (false, true) => libc::MS_RELATIME,
        (false, false) => libc::MS_STRICTATIME,
    };
    Ok(flags)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::ffi::CString;

    use super::*;

    fn text(path: &Path) -> CString {
        path_cstring(path).unwrap()
    }

    #[test]
    fn a_kept_place_inside_a_denied_directory_is_mounted_back_through_its_parents() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let runs = root.join("runs");
        let work = runs.join("run-a/work");
        let tmp = runs.join("run-a/work/tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(root.join("secret"), "x").unwrap();
        let steps = plan(&[runs.clone(), root.join("secret")], &[&work, &tmp], &[]).unwrap();
        let [
            MountStep::Cover { dir, keeps },
            MountStep::HideFile { file },
        ] = steps.as_slice()
        else {
            panic!("{steps:?}");
        };
        assert_eq!(dir, &text(&runs));
        assert_eq!(file, &text(&root.join("secret")));
        // The TMPDIR inside the workdir comes back with it: one keep.
        assert_eq!(keeps.len(), 1);
        assert_eq!(keeps[0].path, text(&work));
        assert_eq!(
            keeps[0].mkdirs,
            vec![text(&runs.join("run-a")), text(&work)]
        );
    }

    #[test]
    fn a_denied_directory_that_is_or_holds_a_kept_place_is_not_covered_and_missing_ones_are_skipped()
     {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let work = root.join("work");
        std::fs::create_dir_all(work.join("secrets")).unwrap();
        let deny = [
            root.clone(),
            work.clone(),
            work.join("secrets"),
            root.join("missing"),
        ];
        let steps = plan(&deny, &[&work], &[]).unwrap();
        let [
            MountStep::Cover { dir: outer, keeps },
            MountStep::Cover {
                dir: inner,
                keeps: none,
            },
        ] = steps.as_slice()
        else {
            panic!("{steps:?}");
        };
        assert_eq!(outer, &text(&root));
        assert_eq!(keeps[0].path, text(&work));
        assert_eq!(inner, &text(&work.join("secrets")));
        assert!(none.is_empty());
    }
}
