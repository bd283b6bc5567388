//! A task given as JSON (task.toml's fields as one object), as services
//! accept it over the wire, made into task.toml text: what is then loaded
//! goes through the same checks and messages as a file.

use serde_json::{Map, Value};

/// Why JSON task fields could not be written as task.toml.
#[derive(Debug, thiserror::Error)]
pub enum JsonTaskError {
    /// A value JSON can say and TOML cannot (`null`, a number out of range).
    #[error("{at}: {why}")]
    Field {
        /// The field's path, e.g. `budget.max_steps`.
        at: String,
        /// What is wrong.
        why: String,
    },
    /// A value task.toml's checks refuse (the message names the field).
    #[error("{0}")]
    Invalid(String),
    /// The task as a whole cannot be written as TOML.
    #[error("the task cannot be written as task.toml: {0}")]
    Toml(#[from] toml::ser::Error),
}

/// task.toml text for `task`'s fields. JSON has `null` and TOML does not, so
/// a null is refused here, naming its field, instead of failing in the writer.
pub fn task_toml_from_json(task: Map<String, Value>) -> Result<String, JsonTaskError> {
    let mut table = toml::Table::new();
    for (key, value) in task {
        let converted = to_toml(&key, value)?;
        table.insert(key, converted);
    }
    Ok(toml::to_string(&table)?)
}

/// A `[budget]` table given as JSON (a service request's), checked exactly
/// as task.toml's is: the same fields, units and messages.
pub fn budget_from_json(
    budget: Map<String, Value>,
) -> Result<agentry_protocol::budget::BudgetLimits, JsonTaskError> {
    let table = to_toml("budget", Value::Object(budget))?;
    crate::validate::budget_alone(table).map_err(|e| JsonTaskError::Invalid(e.0))
}

fn to_toml(at: &str, value: Value) -> Result<toml::Value, JsonTaskError> {
    let field = |why: String| JsonTaskError::Field {
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
    use std::path::Path;

    use super::*;
    use crate::TaskSpec;

    #[test]
    fn json_task_fields_become_task_toml() {
        let Value::Object(task) = serde_json::json!({
            "goal": "g",
            "budget": {"max_steps": 3, "max_cost": 0.5},
            "accept": [{"file": "a.txt", "equals": "1"}],
        }) else {
            panic!()
        };
        let text = task_toml_from_json(task).unwrap();
        let spec = TaskSpec::parse(&text, Path::new("/nowhere/inline")).unwrap();
        assert_eq!(spec.limits.max_steps, Some(3));
        assert_eq!(spec.accept.len(), 1);
    }

    #[test]
    fn json_redact_and_trace_tables_reach_the_spec() {
        let Value::Object(task) = serde_json::json!({
            "goal": "g",
            "redact": {"patterns": ["card-[0-9]+"]},
            "trace": {"sample": 0.25, "content": true},
        }) else {
            panic!()
        };
        let text = task_toml_from_json(task).unwrap();
        let spec = TaskSpec::parse(&text, Path::new("/nowhere/inline")).unwrap();
        assert_eq!(spec.observe.redact_patterns, ["card-[0-9]+"]);
        assert_eq!(spec.observe.sample, 0.25);
        assert!(spec.observe.content);
    }

    #[test]
    fn json_artifacts_reach_the_spec_and_an_escape_is_named() {
        let Value::Object(task) =
            serde_json::json!({"goal": "g", "artifacts": ["report.md", "out/s.json"]})
        else {
            panic!()
        };
        let text = task_toml_from_json(task).unwrap();
        let spec = TaskSpec::parse(&text, Path::new("/nowhere/inline")).unwrap();
        assert_eq!(spec.artifacts, ["report.md", "out/s.json"]);
        let Value::Object(task) = serde_json::json!({"goal": "g", "artifacts": ["../x"]}) else {
            panic!()
        };
        let text = task_toml_from_json(task).unwrap();
        let err = TaskSpec::parse(&text, Path::new("/nowhere/inline"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("artifacts[0]: expected a relative path"),
            "{err}"
        );
    }

    #[test]
    fn a_null_is_named_by_its_field() {
        let Value::Object(task) =
            serde_json::json!({"goal": "g", "budget": {"deadline": null}, "accept": [null]})
        else {
            panic!()
        };
        let err = task_toml_from_json(task).unwrap_err().to_string();
        assert!(
            err == "budget.deadline: null is not allowed; leave the field out instead"
                || err == "accept[0]: null is not allowed; leave the field out instead",
            "{err}"
        );
    }
}
