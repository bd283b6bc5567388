//! `run_task {"task": {...}}`: the fields of task.toml as a JSON object, made
//! into a task directory of its own, so an inline task gets exactly the checks
//! and messages of a task directory (`budget.max_steps: expected a positive
//! integer, found "ten"`), as `examples/service` does for its JSON tasks.
//!
//! The directory (`<tmp>/agentry/inline/<random>/inline/`: task.toml, the
//! script as script.json, the files under workspace/) is kept like the
//! working directories are: a stored run names it, and so does its resume.

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
    /// A field JSON can say and TOML cannot.
    #[error("task.{at}: {why}")]
    Field {
        /// The field's path, e.g. `budget.max_steps`.
        at: String,
        /// What is wrong.
        why: String,
    },
    /// A `files` entry outside the workspace.
    #[error("files[{0:?}]: expected a relative path without \"..\"")]
    FilePath(String),
    /// The task as a whole cannot be written as TOML.
    #[error("task: cannot be written as task.toml: {0}")]
    Toml(#[from] toml::ser::Error),
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
    let text = task_toml(inline.task)?;
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

/// Removes an inline task's directory (and the one holding it): its task
/// did not load, or the run did not start.
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
fn task_toml(task: Map<String, Value>) -> Result<String, InlineError> {
    let mut table = toml::Table::new();
    for (key, value) in task {
        let converted = to_toml(&key, value)?;
        table.insert(key, converted);
    }
    Ok(toml::to_string(&table)?)
}

fn to_toml(at: &str, value: Value) -> Result<toml::Value, InlineError> {
    let field = |why: String| InlineError::Field {
        at: at.to_string(),
        why,
    };
    Ok(match value {
        Value::Null => {
            return Err(field(
                "null is not allowed; leave the field out instead".into(),
            ));
        }
        Value::Bool(b) => toml::Value::Boolean(b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => toml::Value::Integer(i),
            (None, Some(f)) => toml::Value::Float(f),
            (None, None) => return Err(field(format!("{n} is out of range"))),
        },
        Value::String(s) => toml::Value::String(s),
        Value::Array(items) => toml::Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| to_toml(&format!("{at}[{i}]"), item))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(fields) => {
            let mut table = toml::Table::new();
            for (key, item) in fields {
                let converted = to_toml(&format!("{at}.{key}"), item)?;
                table.insert(key, converted);
            }
            toml::Value::Table(table)
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn json_task_fields_become_task_toml() {
        let task = serde_json::json!({
            "goal": "g",
            "budget": {"max_steps": 3, "max_cost": 0.5},
            "accept": [{"file": "a.txt", "equals": "1"}],
        });
        let Value::Object(task) = task else { panic!() };
        let text = task_toml(task).unwrap();
        let spec = agentry::TaskSpec::parse(&text, Path::new("/nowhere/inline")).unwrap();
        assert_eq!(spec.limits.max_steps, Some(3));
        assert_eq!(spec.accept.len(), 1);
    }

    #[test]
    fn a_null_and_an_escaping_file_are_named() {
        let Value::Object(task) = serde_json::json!({"goal": "g", "budget": {"deadline": null}})
        else {
            panic!()
        };
        let err = task_toml(task).unwrap_err().to_string();
        assert_eq!(
            err,
            "task.budget.deadline: null is not allowed; leave the field out instead"
        );
        assert!(!is_relative_inside("../x"));
        assert!(!is_relative_inside("/etc/passwd"));
        assert!(is_relative_inside("a/b.txt"));
    }
}
