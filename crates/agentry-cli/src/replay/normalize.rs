//! The envelope without what differs by nature between a recording and its
//! replay: when it was observed, how long it took, the fields a tool declares
//! volatile, the run's working directory and run ids.

use serde_json::Value;

use super::recorded::Recorded;

/// A text that differs by nature between two runs, and what stands for it in
/// both.
pub(crate) struct Placeholder {
    pub(crate) text: String,
    pub(crate) shown_as: String,
}

impl Placeholder {
    fn new(text: String, shown_as: impl Into<String>) -> Placeholder {
        Placeholder {
            text,
            shown_as: shown_as.into(),
        }
    }
}

/// A run's placeholders: its working directory, its own run id, its
/// children's (in spawn order).
pub(crate) fn placeholders(run: &Recorded) -> Vec<Placeholder> {
    let workdir = run.origin.as_ref().and_then(|o| o.workdir.clone());
    let workdir = workdir.map(|w| Placeholder::new(w, "<workdir>"));
    let own = Placeholder::new(run.run_id.clone(), "<run>");
    let children = run
        .children
        .iter()
        .enumerate()
        .map(|(i, id)| Placeholder::new(id.clone(), format!("<child {}>", i + 1)));
    workdir
        .into_iter()
        .chain(std::iter::once(own))
        .chain(children)
        .filter(|p| !p.text.is_empty())
        .collect()
}

/// The envelope without what differs by nature: when it was observed, how
/// long it took, the volatile fields of its data (JSON text in it read as
/// JSON first), its run's working directory and run ids (`placeholders`).
pub(crate) fn normalize(
    envelope: &Value,
    volatile: &[String],
    placeholders: &[Placeholder],
) -> Value {
    let mut v = envelope.clone();
    if let Some(obj) = v.as_object_mut() {
        obj.remove("observed_at");
        if let Some(cost) = obj.get_mut("cost").and_then(Value::as_object_mut) {
            cost.remove("latency_ms");
        }
        if let Some(data) = obj.get_mut("data") {
            expand_json_text(data);
            for name in volatile {
                drop_volatile(data, name);
            }
        }
    }
    for p in placeholders {
        replace_strings(&mut v, &p.text, &p.shown_as);
    }
    v
}

/// A string holding a JSON object or array (a command tool's stdout) is
/// compared as that JSON: a difference is named by its path inside, and
/// volatile names reach into it.
fn expand_json_text(v: &mut Value) {
    match v {
        Value::String(s) if s.trim_start().starts_with(['{', '[']) => {
            if let Ok(parsed @ (Value::Object(_) | Value::Array(_))) = serde_json::from_str(s) {
                *v = parsed;
            }
        }
        Value::Object(obj) => obj.values_mut().for_each(expand_json_text),
        Value::Array(items) => items.iter_mut().for_each(expand_json_text),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// Removes a volatile field: a dotted path from the data's root, or a plain
/// name at any depth.
fn drop_volatile(data: &mut Value, name: &str) {
    match name.rsplit_once('.') {
        Some((parent, last)) => {
            let pointer = format!("/{}", parent.replace('.', "/"));
            if let Some(obj) = data.pointer_mut(&pointer).and_then(Value::as_object_mut) {
                obj.remove(last);
            }
        }
        None => drop_everywhere(data, name),
    }
}

fn drop_everywhere(v: &mut Value, name: &str) {
    match v {
        Value::Object(obj) => {
            obj.remove(name);
            obj.values_mut().for_each(|c| drop_everywhere(c, name));
        }
        Value::Array(items) => items.iter_mut().for_each(|c| drop_everywhere(c, name)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

fn replace_strings(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(s) if s.contains(from) => *s = s.replace(from, to),
        Value::Object(obj) => obj.values_mut().for_each(|c| replace_strings(c, from, to)),
        Value::Array(items) => items.iter_mut().for_each(|c| replace_strings(c, from, to)),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}
