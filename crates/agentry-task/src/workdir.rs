//! A fresh working directory per run, with the task's `workspace/` copied in.

use std::path::{Path, PathBuf};

use crate::error::TaskError;
use crate::spec::TaskSpec;
use crate::values::{FieldError, describe, field_error, relative_path};

/// One entry of the workspace to copy, relative to it.
struct CopyEntry {
    rel: PathBuf,
    is_dir: bool,
}

impl TaskSpec {
    /// Creates a fresh working directory for one run and copies `workspace/` into it.
    ///
    /// `workdir`, when given, must not exist or be an empty directory. By default a
    /// new directory `runs/<task_id>-<uuid v7>` is made under
    /// `std::env::temp_dir()/agentry`, which must be this user's own (see
    /// [`agentry_runtime::tempdir`]). Symbolic links (and other special files) in
    /// the workspace are refused before anything is created: copying one would
    /// either follow it out of the task directory or hand the run a link whose
    /// meaning depends on where it happens to live. Returns the canonical path.
    pub fn prepare_workdir(&self, workdir: Option<&Path>) -> Result<PathBuf, TaskError> {
        let plan = match &self.workspace {
            Some(ws) => plan_copy(ws)?,
            None => Vec::new(),
        };
        let target = match workdir {
            Some(dir) => {
                ensure_empty_or_absent(dir)?;
                std::fs::create_dir_all(dir).map_err(|e| workdir_err(dir, e))?;
                dir.to_path_buf()
            }
            None => {
                let root = agentry_runtime::tempdir::private_temp_dir()?.join("runs");
                std::fs::create_dir_all(&root).map_err(|e| workdir_err(&root, e))?;
                let dir = root.join(format!("{}-{}", self.task_id, uuid::Uuid::now_v7()));
                // `create_dir`, not `create_dir_all`: a fresh directory, never a reused one.
                std::fs::create_dir(&dir).map_err(|e| workdir_err(&dir, e))?;
                dir
            }
        };
        let target = std::fs::canonicalize(&target).map_err(|e| workdir_err(&target, e))?;
        if let Some(ws) = &self.workspace {
            for entry in &plan {
                let to = target.join(&entry.rel);
                let done = if entry.is_dir {
                    std::fs::create_dir(&to)
                } else {
                    std::fs::copy(ws.join(&entry.rel), &to).map(|_| ())
                };
                done.map_err(|e| workdir_err(&to, e))?;
            }
        }
        Ok(target)
    }
}

fn workdir_err(path: &Path, source: std::io::Error) -> TaskError {
    TaskError::Workdir {
        path: path.to_path_buf(),
        source,
    }
}

fn ensure_empty_or_absent(dir: &Path) -> Result<(), TaskError> {
    let refuse = |why: &str| {
        workdir_err(
            dir,
            std::io::Error::new(std::io::ErrorKind::AlreadyExists, why.to_string()),
        )
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(workdir_err(dir, e)),
        Ok(meta) if !meta.is_dir() => Err(refuse(
            "exists and is not a directory; pass a new or empty directory",
        )),
        Ok(_) => {
            let mut entries = std::fs::read_dir(dir).map_err(|e| workdir_err(dir, e))?;
            if entries.next().is_some() {
                Err(refuse(
                    "exists and is not empty; pass a new or empty directory so every run starts fresh",
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Lists the workspace, parents before children, refusing anything that is
/// neither a regular file nor a directory.
fn plan_copy(ws: &Path) -> Result<Vec<CopyEntry>, TaskError> {
    let mut plan = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = ws.join(&rel);
        let read_err =
            |e: std::io::Error| TaskError::invalid(&here, format!("cannot read workspace: {e}"));
        let mut entries = std::fs::read_dir(&here)
            .map_err(read_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read_err)?;
        // Sorted, so the copy (and any error) is the same on every machine.
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| TaskError::invalid(&path, format!("cannot read workspace: {e}")))?;
            let child = rel.join(entry.file_name());
            if kind.is_symlink() {
                return Err(TaskError::invalid(
                    &path,
                    "workspace: symbolic links are not supported; replace it with a regular file or directory",
                ));
            } else if kind.is_dir() {
                plan.push(CopyEntry {
                    rel: child.clone(),
                    is_dir: true,
                });
                pending.push(child);
            } else if kind.is_file() {
                plan.push(CopyEntry {
                    rel: child,
                    is_dir: false,
                });
            } else {
                return Err(TaskError::invalid(
                    &path,
                    "workspace: only regular files and directories can be copied",
                ));
            }
        }
    }
    Ok(plan)
}

/// `artifacts`: relative paths inside the working directory.
pub(crate) fn artifacts(v: Option<toml::Value>) -> Result<Vec<String>, FieldError> {
    match v {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| relative_path(&format!("artifacts[{i}]"), item))
            .collect(),
        Some(v) => Err(field_error!(
            "artifacts: expected an array of relative paths, found {}",
            describe(&v)
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::Path;

    use crate::{TaskError, TaskSpec};

    fn invalid(text: &str) -> String {
        match TaskSpec::parse(text, Path::new("/nowhere/t1")) {
            Err(TaskError::Invalid { message, .. }) => message,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn artifacts_are_relative_paths_inside_the_working_directory() {
        let text = "goal = \"g\"\nartifacts = [\"report.md\", \"out/summary.json\", \"./a\"]\n";
        let spec = TaskSpec::parse(text, Path::new("/nowhere/t1")).unwrap();
        assert_eq!(spec.artifacts, ["report.md", "out/summary.json", "./a"]);
        let none = TaskSpec::parse("goal = \"g\"", Path::new("/nowhere/t1")).unwrap();
        assert!(none.artifacts.is_empty());
        for (value, at) in [
            ("[\"a\", \"/etc/passwd\"]", "artifacts[1]"),
            ("[\"../up.txt\"]", "artifacts[0]"),
            ("[\"out/../../x\"]", "artifacts[0]"),
            ("[\"\"]", "artifacts[0]"),
        ] {
            let err = invalid(&format!("goal = \"g\"\nartifacts = {value}\n"));
            assert!(
                err.starts_with(&format!("{at}: expected a relative path without \"..\"")),
                "{value}: {err}"
            );
        }
        let err = invalid("goal = \"g\"\nartifacts = \"report.md\"\n");
        assert_eq!(
            err,
            "artifacts: expected an array of relative paths, found \"report.md\""
        );
        let err = invalid("goal = \"g\"\nartifacts = [3]\n");
        assert_eq!(err, "artifacts[0]: expected a relative path, found 3");
    }
}
