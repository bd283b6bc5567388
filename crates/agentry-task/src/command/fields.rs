//! Checks of the single fields of a `[[tools.command]]` table.

use std::collections::BTreeMap;

use agentry_protocol::tool::{Effect, Idempotency};
use agentry_tools::proc::HOST_ENV;
use serde_json::Value as Json;
use toml::Value;

use crate::values::{FieldError, describe, field_error};

/// Longest tool name: what model APIs accept.
pub(crate) const MAX_NAME: usize = 64;

/// `[A-Za-z0-9_.-]`, at most [`MAX_NAME`]: a name every model API takes as is
/// (after `.` → `_`) and a grant pattern can name.
pub(crate) fn tool_name(at: &str, v: &Value) -> Result<String, FieldError> {
    let Value::String(s) = v else {
        return Err(field_error!(
            "{at}: expected a tool name such as \"ledger.append\", found {}",
            describe(v)
        ));
    };
    let valid = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(field_error!(
            "{at}: expected letters, digits, '_', '-' and '.' only, found {s:?}"
        ));
    }
    if s.chars().count() > MAX_NAME {
        return Err(field_error!(
            "{at}: longer than {MAX_NAME} characters, too long for model APIs"
        ));
    }
    Ok(s.clone())
}

pub(crate) fn non_empty(at: &str, v: &Value) -> Result<String, FieldError> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => Ok(s.to_string()),
        Some(_) | None => Err(field_error!(
            "{at}: expected a non-empty string, found {}",
            describe(v)
        )),
    }
}

pub(crate) fn argv(at: &str, v: Value) -> Result<Vec<String>, FieldError> {
    let items = match v {
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => {
            return Err(field_error!(
                "{at}: must not be empty; give the program first"
            ));
        }
        v @ (Value::String(_)
        | Value::Integer(_)
        | Value::Float(_)
        | Value::Boolean(_)
        | Value::Datetime(_)
        | Value::Table(_)) => {
            return Err(field_error!(
                "{at}: expected a non-empty array of strings (the program, then its arguments), found {}",
                describe(&v)
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::String(s) = item else {
            return Err(field_error!(
                "{at}[{i}]: expected a string, found {}",
                describe(&item)
            ));
        };
        if i == 0 && s.is_empty() {
            return Err(field_error!("{at}[0]: the program must not be empty"));
        }
        if s.contains('\0') {
            return Err(field_error!("{at}[{i}]: contains a NUL byte"));
        }
        out.push(s);
    }
    Ok(out)
}

/// Completes and checks the schema: an object schema (`type` added if absent),
/// `additionalProperties: false` added if absent, every `required` name a
/// property, and it compiles (the registry's own check).
pub(crate) fn input_schema(at: &str, schema: Json) -> Result<Json, FieldError> {
    let Json::Object(mut map) = schema else {
        return Err(field_error!(
            "{at}: expected a table (the JSON Schema of the arguments object), found {schema}"
        ));
    };
    match map.get("type") {
        None => {
            map.insert("type".into(), Json::from("object"));
        }
        Some(Json::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(field_error!(
                "{at}.type: expected \"object\" (arguments are always an object), found {other}"
            ));
        }
    }
    if let Some(props) = map.get("properties")
        && !props.is_object()
    {
        return Err(field_error!(
            "{at}.properties: expected a table of argument schemas, found {props}"
        ));
    }
    // The house rule: a field the schema does not name is refused, not ignored.
    map.entry("additionalProperties")
        .or_insert(Json::Bool(false));
    let schema = Json::Object(map);
    if let Some(required) = schema.get("required").and_then(Json::as_array) {
        let declared = properties(&schema);
        for (i, r) in required.iter().enumerate() {
            if let Some(r) = r.as_str()
                && !declared.iter().any(|d| d == r)
            {
                return Err(field_error!(
                    "{at}.required[{i}]: {r:?} is not in input_schema.properties"
                ));
            }
        }
    }
    agentry_runtime::registry::check_schema(&schema).map_err(|e| {
        // The error's path is inside the schema: name that spot in TOML terms.
        let inside: String = e
            .path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| format!(".{s}"))
            .collect();
        field_error!("{at}{inside}: not a valid JSON Schema: {}", e.message)
    })?;
    Ok(schema)
}

/// The property names of an object schema.
pub(crate) fn properties(schema: &Json) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// TOML to JSON; a non-finite float (JSON has none) is an error naming its path.
pub(crate) fn to_json(at: &str, v: Value) -> Result<Json, FieldError> {
    Ok(match v {
        Value::String(s) => Json::String(s),
        Value::Integer(n) => Json::from(n),
        Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Json::Number)
            .ok_or_else(|| field_error!("{at}: {f} is not a JSON number"))?,
        Value::Boolean(b) => Json::Bool(b),
        // JSON has no date-times; the key check's serde pass already turns
        // them into strings, so this only keeps the conversion total.
        Value::Datetime(d) => Json::String(d.to_string()),
        Value::Array(items) => Json::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| to_json(&format!("{at}[{i}]"), v))
                .collect::<Result<_, _>>()?,
        ),
        Value::Table(table) => Json::Object(
            table
                .into_iter()
                .map(|(k, v)| to_json(&format!("{at}.{k}"), v).map(|v| (k, v)))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// `max_retries` at `at`: a non-negative integer that fits a `u32`.
pub(crate) fn max_retries(at: &str, v: &Value) -> Result<u32, FieldError> {
    v.as_integer()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            field_error!(
                "{at}: expected a non-negative integer, found {} (at most {})",
                describe(v),
                u32::MAX
            )
        })
}

pub(crate) fn effect(at: &str, v: &Value) -> Result<Effect, FieldError> {
    match v.as_str() {
        Some("read_only") => Ok(Effect::ReadOnly),
        Some("reversible") => Ok(Effect::Reversible),
        Some("irreversible_external") => Ok(Effect::IrreversibleExternal),
        Some(_) | None => Err(field_error!(
            "{at}: expected \"read_only\", \"reversible\" or \"irreversible_external\", found {}",
            describe(v)
        )),
    }
}

pub(crate) fn idempotency(at: &str, v: &Value) -> Result<Idempotency, FieldError> {
    match v.as_str() {
        Some("idempotent") => Ok(Idempotency::Idempotent),
        Some("required_key") => Ok(Idempotency::RequiredKey),
        Some("none") => Ok(Idempotency::None),
        Some(_) | None => Err(field_error!(
            "{at}: expected \"idempotent\", \"required_key\" or \"none\", found {}",
            describe(v)
        )),
    }
}

/// Fixed environment variables: names a process can take, none the host sets.
pub(crate) fn env(at: &str, v: Value) -> Result<BTreeMap<String, String>, FieldError> {
    let Value::Table(table) = v else {
        return Err(field_error!(
            "{at}: expected a table of strings, e.g. env = {{ LANG = \"C\" }}, found {}",
            describe(&v)
        ));
    };
    let mut out = BTreeMap::new();
    for (name, value) in table {
        let field = format!("{at}.{name}");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(field_error!(
                "{field}: not a variable name (empty, or has '=' or NUL)"
            ));
        }
        if HOST_ENV.contains(&name.as_str()) {
            return Err(field_error!(
                "{field}: reserved; the host sets {} on every call",
                HOST_ENV.join(", ")
            ));
        }
        match value.as_str() {
            Some(s) if !s.contains('\0') => {
                out.insert(name, s.to_string());
            }
            Some(_) | None => {
                return Err(field_error!(
                    "{field}: expected a string without NUL bytes, found {}",
                    describe(&value)
                ));
            }
        }
    }
    Ok(out)
}

/// `redact`: names of argument and result fields whose values are secrets
/// (matched at any depth, so they need not be properties of the schema).
pub(crate) fn redact_fields(at: &str, v: Value) -> Result<Vec<String>, FieldError> {
    field_names(at, v, "redact = [\"password\"]")
}

/// `volatile`: result fields whose values differ from run to run (a name at
/// any depth, or a dotted path from the data's root), which `agentry replay`
/// does not count as drift.
pub(crate) fn volatile_fields(at: &str, v: Value) -> Result<Vec<String>, FieldError> {
    field_names(at, v, "volatile = [\"at\"]")
}

/// A list of distinct, non-empty field names; `example` shows the form.
fn field_names(at: &str, v: Value, example: &str) -> Result<Vec<String>, FieldError> {
    let Value::Array(items) = v else {
        return Err(field_error!(
            "{at}: expected an array of field names, e.g. {example}, found {}",
            describe(&v)
        ));
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        match item.as_str() {
            Some(name) if !name.trim().is_empty() => {
                if !out.iter().any(|n| n == name) {
                    out.push(name.to_string());
                }
            }
            Some(_) | None => {
                return Err(field_error!(
                    "{at}[{i}]: expected a field name, found {}",
                    describe(&item)
                ));
            }
        }
    }
    Ok(out)
}
