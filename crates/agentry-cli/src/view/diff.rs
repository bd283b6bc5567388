//! What changed in a step's state snapshot since the step before, as a list of
//! leaf paths: the page shows this instead of every snapshot whole.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// One leaf that differs; `null` on a side where it is absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct Change {
    /// Dotted path, e.g. `task.answer`.
    pub(super) path: String,
    /// The value before the step.
    pub(super) from: Value,
    /// The value after it.
    pub(super) to: Value,
}

/// Leaves of `value` by dotted path. Arrays and empty objects are leaves;
/// `skip` drops whole subtrees (already shown elsewhere, e.g. the budget).
pub(super) fn flatten(value: &Value, skip: &[&str]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    walk(value, String::new(), skip, &mut out);
    out
}

fn walk(value: &Value, path: String, skip: &[&str], out: &mut BTreeMap<String, Value>) {
    if skip.contains(&path.as_str()) {
        return;
    }
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, v) in map {
                let sub = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                walk(v, sub, skip, out);
            }
        }
        leaf @ (Value::Object(_)
        | Value::Null
        | Value::Bool(_)
        | Value::Number(_)
        | Value::String(_)
        | Value::Array(_)) => {
            out.insert(path, leaf.clone());
        }
    }
}

/// The leaves that differ between `before` and `after`, in path order.
pub(super) fn changes(
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
) -> Vec<Change> {
    let mut out = Vec::new();
    for (path, to) in after {
        match before.get(path) {
            Some(from) if from == to => {}
            from => out.push(Change {
                path: path.clone(),
                from: from.cloned().unwrap_or(Value::Null),
                to: to.clone(),
            }),
        }
    }
    for (path, from) in before {
        if !after.contains_key(path) {
            out.push(Change {
                path: path.clone(),
                from: from.clone(),
                to: Value::Null,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_changed_leaves_are_listed_and_skipped_subtrees_never() {
        let skip = ["control.spent"];
        let a = flatten(
            &json!({"v": 1, "task": {"answer": null, "done": false}, "control": {"spent": {"steps": 1}}, "gone": 3}),
            &skip,
        );
        let b = flatten(
            &json!({"v": 2, "task": {"answer": "x", "done": false}, "control": {"spent": {"steps": 2}}, "new": [1]}),
            &skip,
        );
        let paths: Vec<(String, Value, Value)> = changes(&a, &b)
            .into_iter()
            .map(|c| (c.path, c.from, c.to))
            .collect();
        assert_eq!(
            paths,
            vec![
                ("gone".into(), json!(3), Value::Null),
                ("new".into(), Value::Null, json!([1])),
                ("task.answer".into(), Value::Null, json!("x")),
                ("v".into(), json!(1), json!(2)),
            ]
        );
    }
}
