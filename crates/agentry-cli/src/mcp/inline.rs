//! `run_task {"task": {...}}`: the fields of task.toml as a JSON object, made
//! into a task directory of its own, so an inline task gets exactly the checks
//! and messages of a task directory (`budget.max_steps: expected a positive
//! integer, found "ten"`), as `examples/service` does for its JSON tasks.
//!
//! The directory (`<tmp>/agentry/inline/<random>/inline/`: task.toml, the
//! script as script.json, the files under workspace/) lives as long as its
//! run: removed when the run ends (its record is in the store, its files in
//! its working directory) or does not start. A run left unfinished by a
//! killed server keeps it: `agentry resume` reloads the task from it.
//!
//! An inline task is the client's, so it may not choose where this server's
//! keys and headers go: `runs.rs` refuses one that names a model or MCP
//! server by URL (`TaskSpec::check_client_supplied`) unless the operator gave
//! `--allow-client-endpoints`.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

/// The task id of every inline task (task.toml takes it from the directory's
/// name; an inline task has none).
pub(crate) const INLINE_TASK_ID: &str = "inline";

/// Why an inline task could not be made into a task directory. Each names the
/// argument (and field) at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum InlineError {
    /// A field JSON can say and TOML cannot, or the task cannot be written.
    #[error("task.{0}")]
    Task(#[from] agentry::task::JsonTaskError),
    /// A `files` entry outside the workspace.
    #[error("files[{0:?}]: expected a relative path without \"..\"")]
    FilePath(String),
    /// The directory or a file in it could not be written.
    #[error("cannot write the inline task's directory {path}: {source}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The private temp directory is unusable (a planted link).
    #[error(transparent)]
    TempDir(#[from] agentry::RuntimeError),
}

/// An inline task's parts, as `run_task` received them.
pub(crate) struct InlineTask {
    /// The task.toml fields.
    pub(crate) task: Map<String, Value>,
    /// The scripted policy (`{"turns": [...]}`), if given.
    pub(crate) script: Option<Value>,
    /// Initial files of the working directory: relative path → content.
    pub(crate) files: BTreeMap<String, String>,
}

/// Writes the task directory and returns its path. Nothing is validated twice:
/// `TaskSpec::load` and `Script::load` judge the result.
pub(crate) fn write_task_dir(inline: InlineTask) -> Result<PathBuf, InlineError> {
    for name in inline.files.keys() {
        if !is_relative_inside(name) {
            return Err(InlineError::FilePath(name.clone()));
        }
    }
    let text = agentry::task::task_toml_from_json(inline.task)?;
    let parent = agentry::runtime::tempdir::private_temp_dir()?.join("inline");
    let write = |path: &Path, result: std::io::Result<()>| {
        result.map_err(|source| InlineError::Write {
            path: path.to_path_buf(),
            source,
        })
    };
    write(&parent, std::fs::create_dir_all(&parent))?;
    let holder = tempfile::Builder::new()
        .prefix("task-")
        .tempdir_in(&parent)
        .map_err(|source| InlineError::Write {
            path: parent.clone(),
            source,
        })?
        .keep();
    let dir = holder.join(INLINE_TASK_ID);
    // Half a task directory is never left behind.
    fill(&dir, text, inline.script, inline.files).inspect_err(|_| discard(&dir))?;
    Ok(dir)
}

/// Removes an inline task's directory (and the one holding it): its run
/// ended, or did not start.
pub(crate) fn discard(dir: &Path) {
    if let Some(holder) = dir.parent()
        && let Err(e) = std::fs::remove_dir_all(holder)
    {
        tracing::warn!(dir = %holder.display(), error = %e, "cannot remove an inline task's directory");
    }
}

fn fill(
    dir: &Path,
    text: String,
    script: Option<Value>,
    files: BTreeMap<String, String>,
) -> Result<(), InlineError> {
    let write = |path: &Path, result: std::io::Result<()>| {
        result.map_err(|source| InlineError::Write {
            path: path.to_path_buf(),
            source,
        })
    };
    write(dir, std::fs::create_dir(dir))?;
    let file = dir.join("task.toml");
    write(&file, std::fs::write(&file, text))?;
    if let Some(script) = script {
        let file = dir.join(agentry::task::DEFAULT_SCRIPT);
        write(&file, std::fs::write(&file, script.to_string()))?;
    }
    let workspace = dir.join("workspace");
    for (name, content) in files {
        let path = workspace.join(&name);
        if let Some(parent) = path.parent() {
            write(parent, std::fs::create_dir_all(parent))?;
        }
        write(&path, std::fs::write(&path, content))?;
    }
    Ok(())
}

fn is_relative_inside(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The task fields as task.toml text. JSON has `null` and TOML does not, so a
/// null is refused here, naming its field, instead of failing in the writer.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_null_and_an_escaping_file_are_named() {
        let Value::Object(task) = serde_json::json!({"goal": "g", "budget": {"deadline": null}})
        else {
            panic!()
        };
        let err = InlineError::from(agentry::task::task_toml_from_json(task).unwrap_err());
        assert_eq!(
            err.to_string(),
            "task.budget.deadline: null is not allowed; leave the field out instead"
        );
        assert!(!is_relative_inside("../x"));
        assert!(!is_relative_inside("/etc/passwd"));
        assert!(is_relative_inside("a/b.txt"));
    }
}
