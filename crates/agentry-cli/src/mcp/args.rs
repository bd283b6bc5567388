//! `run_task`'s arguments: the JSON Schema a client sees (from
//! [`RunTaskArgs`]'s fields) and the checks that read them, each error
//! naming its field.
//!
//! The optional fields are declared as their plain type (`integer`,
//! `string`), not "integer or null": a form-based client (the MCP Inspector)
//! turns a field declared with `null` into a text box and sends what is typed
//! as a string. A `null` sent anyway counts as the field left out.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use serde_json::{Map, Value};

/// `run_task`'s arguments.
#[derive(Debug, Default, JsonSchema)]
#[schemars(transform = none_required)]
pub(crate) struct RunTaskArgs {
    /// A task directory (task.toml, script.json, workspace/), relative to the
    /// server's current directory. Give this or `task`.
    #[schemars(with = "String")]
    pub(crate) task_dir: Option<String>,
    /// An inline task: the fields of task.toml as a JSON object, e.g.
    /// {"goal": "...", "budget": {"max_steps": 8}, "tools": {"grant": ["fs.read"]},
    /// "accept": [{"file": "sum.txt", "equals": "23"}]}. Give this or `task_dir`.
    #[schemars(with = "Map<String, Value>")]
    pub(crate) task: Option<Map<String, Value>>,
    /// Inline task only: the scripted policy, {"turns": [...]}, as script.json.
    #[schemars(with = "Map<String, Value>")]
    pub(crate) script: Option<Value>,
    /// Inline task only: the working directory's initial files, relative path → content.
    #[schemars(with = "BTreeMap<String, String>")]
    pub(crate) files: Option<BTreeMap<String, String>>,
    /// The policy, as `agentry run --policy`: `script:FILE` (relative to the
    /// server's current directory), `openai:MODEL` or `anthropic:MODEL`.
    /// Default: the task's own (its `[policy]`, else its script.json).
    #[schemars(with = "String")]
    pub(crate) policy: Option<String>,
    /// Override the task's step budget (as `--max-steps`).
    #[schemars(with = "u64")]
    pub(crate) max_steps: Option<u64>,
    /// Override the task's wall-clock deadline, e.g. "30s" (as `--deadline`).
    #[schemars(with = "String")]
    pub(crate) deadline: Option<String>,
    /// Wait for the outcome (default true). false: return the run id at once;
    /// follow it with get_run.
    #[schemars(with = "bool")]
    pub(crate) wait: Option<bool>,
}

/// The argument names, in the schema's order (for an unknown one's error).
const FIELDS: [&str; 8] = [
    "task_dir",
    "task",
    "script",
    "files",
    "policy",
    "max_steps",
    "deadline",
    "wait",
];

/// Why `run_task`'s arguments do not fit its schema; each names the field.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ShapeError {
    /// A field of the wrong JSON type.
    #[error("{field}: expected {expected}, got {found}")]
    Type {
        /// The argument (or `files["name"]`).
        field: String,
        /// What its schema says.
        expected: &'static str,
        /// What was sent.
        found: String,
    },
    /// An argument the schema does not have.
    #[error("{field}: not an argument of run_task; its arguments are: {}", FIELDS.join(", "))]
    Unknown {
        /// As sent.
        field: String,
    },
}

impl RunTaskArgs {
    /// The arguments as a client sent them, each field checked against its
    /// schema type.
    pub(crate) fn parse(mut arguments: JsonObject) -> Result<RunTaskArgs, ShapeError> {
        if let Some(field) = arguments.keys().find(|k| !FIELDS.contains(&k.as_str())) {
            return Err(ShapeError::Unknown {
                field: field.clone(),
            });
        }
        let mut take = |name: &'static str| arguments.remove(name).filter(|v| !v.is_null());
        Ok(RunTaskArgs {
            task_dir: take("task_dir")
                .map(|v| string("task_dir", v))
                .transpose()?,
            task: take("task").map(|v| object("task", v)).transpose()?,
            script: take("script")
                .map(|v| object("script", v).map(Value::Object))
                .transpose()?,
            files: take("files").map(files).transpose()?,
            policy: take("policy").map(|v| string("policy", v)).transpose()?,
            max_steps: take("max_steps")
                .map(|v| integer("max_steps", v))
                .transpose()?,
            deadline: take("deadline")
                .map(|v| string("deadline", v))
                .transpose()?,
            wait: take("wait").map(|v| boolean("wait", v)).transpose()?,
        })
    }

    /// The schema clients see: the fields above, none required, none nullable.
    pub(crate) fn schema() -> Arc<JsonObject> {
        rmcp::handler::server::common::schema_for_input::<RunTaskArgs>()
            .unwrap_or_else(|_| rmcp::handler::server::common::schema_for_empty_input())
    }
}

/// Every field may be left out (`with` hides the `Option` from schemars,
/// which would otherwise list them all as required).
fn none_required(schema: &mut schemars::Schema) {
    schema.remove("required");
}

fn mistyped(field: impl Into<String>, expected: &'static str, found: &Value) -> ShapeError {
    ShapeError::Type {
        field: field.into(),
        expected,
        found: describe(found),
    }
}

/// What a JSON value is, with the value when it is short.
fn describe(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".into(),
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() || n.is_i64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => return "an array".into(),
        Value::Object(_) => return "an object".into(),
    };
    let text = value.to_string();
    if text.len() <= 40 {
        format!("{kind} ({text})")
    } else {
        kind.to_string()
    }
}

fn string(field: &'static str, value: Value) -> Result<String, ShapeError> {
    if let Value::String(s) = value {
        Ok(s)
    } else {
        Err(mistyped(field, "a string", &value))
    }
}

fn object(field: &'static str, value: Value) -> Result<Map<String, Value>, ShapeError> {
    if let Value::Object(map) = value {
        Ok(map)
    } else {
        Err(mistyped(field, "an object", &value))
    }
}

fn integer(field: &'static str, value: Value) -> Result<u64, ShapeError> {
    value
        .as_u64()
        .ok_or_else(|| mistyped(field, "a non-negative integer", &value))
}

fn boolean(field: &'static str, value: Value) -> Result<bool, ShapeError> {
    value
        .as_bool()
        .ok_or_else(|| mistyped(field, "true or false", &value))
}

fn files(value: Value) -> Result<BTreeMap<String, String>, ShapeError> {
    object("files", value)?
        .into_iter()
        .map(|(name, content)| {
            if let Value::String(text) = content {
                Ok((name, text))
            } else {
                Err(mistyped(format!("files[{name:?}]"), "a string", &content))
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<RunTaskArgs, ShapeError> {
        let Value::Object(map) = value else {
            panic!("{value}")
        };
        RunTaskArgs::parse(map)
    }

    /// The MCP Inspector sends what is typed in a field's box as a string:
    /// the error names the field and says what it expected and got.
    #[test]
    fn a_field_of_the_wrong_type_is_named() {
        let cases = [
            (
                json!({"max_steps": "10"}),
                "max_steps: expected a non-negative integer, got a string (\"10\")",
            ),
            (
                json!({"max_steps": -1}),
                "max_steps: expected a non-negative integer, got an integer (-1)",
            ),
            (
                json!({"wait": "false"}),
                "wait: expected true or false, got a string (\"false\")",
            ),
            (
                json!({"deadline": 30}),
                "deadline: expected a string, got an integer (30)",
            ),
            (
                json!({"task": "goal = 1"}),
                "task: expected an object, got a string (\"goal = 1\")",
            ),
            (
                json!({"files": {"a.txt": 1}}),
                "files[\"a.txt\"]: expected a string, got an integer (1)",
            ),
        ];
        for (args, expected) in cases {
            let err = parse(args.clone()).unwrap_err();
            assert_eq!(err.to_string(), expected, "{args}");
        }
        let err = parse(json!({"bogus": 1})).unwrap_err().to_string();
        assert!(
            err.starts_with("bogus: not an argument of run_task; its arguments are: task_dir, "),
            "{err}"
        );
    }

    #[test]
    fn fields_parse_and_null_is_left_out() {
        let args = parse(json!({
            "task_dir": "examples/sum", "max_steps": 4, "deadline": "30s", "wait": false,
            "policy": null
        }))
        .unwrap();
        assert_eq!(args.task_dir.as_deref(), Some("examples/sum"));
        assert_eq!(args.max_steps, Some(4));
        assert_eq!(args.deadline.as_deref(), Some("30s"));
        assert_eq!(args.wait, Some(false));
        assert_eq!(args.policy, None);
    }

    /// No optional field is declared "or null" (a form client would send it
    /// as a string); each has its one plain type.
    #[test]
    fn the_schema_declares_plain_types() {
        let schema = RunTaskArgs::schema();
        let properties = schema["properties"].as_object().unwrap();
        let types: Vec<(&str, &Value)> = properties
            .iter()
            .map(|(name, p)| (name.as_str(), &p["type"]))
            .collect();
        let expected = [
            ("deadline", json!("string")),
            ("files", json!("object")),
            ("max_steps", json!("integer")),
            ("policy", json!("string")),
            ("script", json!("object")),
            ("task", json!("object")),
            ("task_dir", json!("string")),
            ("wait", json!("boolean")),
        ];
        let mut types: Vec<(&str, Value)> =
            types.into_iter().map(|(n, t)| (n, t.clone())).collect();
        types.sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(types, expected);
        assert!(schema.get("required").is_none(), "{schema:?}");
        assert!(properties["max_steps"]["description"].is_string());
        assert!(
            properties.values().all(|p| p.get("default").is_none()),
            "{schema:?}"
        );
    }
}
