//! `[[tools.command]]`: command tools a task declares in its task.toml.
//!
//! Each table becomes a [`CommandToolDecl`]: a full [`ToolContract`] plus the
//! argv template, stdin field and fixed environment of an
//! [`agentry_tools::proc::CommandTool`]. Everything that could make the tool fail
//! to build or register (a placeholder naming no property, a schema that does
//! not compile, a name taken by a built-in) is checked here, so the error names
//! the field (`tools.command[0].argv[4]: ...`) instead of surfacing at startup.

use std::collections::BTreeMap;

use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use agentry_tools::proc::{CommandTool, CommandToolError, HOST_ENV};
use serde::Deserialize;
use serde_json::Value as Json;
use toml::Value;

use super::{describe, duration, millis, section};
use crate::registry::wire_name;

/// Longest tool name: what model APIs accept.
const MAX_NAME: usize = 64;

/// A command tool declared by a task (`[[tools.command]]`), validated.
///
/// Declared tools are registered by [`TaskSpec::registry`](super::TaskSpec::registry)
/// but granted like any other: the task's `[tools] grant` must name them (or
/// their scope).
#[derive(Debug, Clone, PartialEq)]
pub struct CommandToolDecl {
    /// The contract; `input_schema` always has `type: "object"` and
    /// `additionalProperties` (`false` unless the file says otherwise).
    pub contract: ToolContract,
    /// The argv template: `argv[0]` literal, `{field}` and `{field...}` elements
    /// replaced by arguments.
    pub argv: Vec<String>,
    /// The argument fed to the process's standard input (`stdin`).
    pub stdin: Option<String>,
    /// Fixed environment variables (`env`), set for every call.
    pub env: BTreeMap<String, String>,
}

impl CommandToolDecl {
    /// Builds the tool. Cannot fail for a declaration made by
    /// [`TaskSpec::parse`](super::TaskSpec::parse), which checks the same things
    /// first; a hand-made one may name a field its schema lacks.
    pub fn build(&self) -> Result<CommandTool, CommandToolError> {
        let mut tool = CommandTool::new(self.contract.clone(), &self.argv)?;
        if let Some(field) = &self.stdin {
            tool = tool.with_stdin_field(field.clone())?;
        }
        for (name, value) in &self.env {
            tool = tool.with_env(name, value);
        }
        Ok(tool)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommandTool {
    name: Option<Value>,
    description: Option<Value>,
    argv: Option<Value>,
    input_schema: Option<Value>,
    effect: Option<Value>,
    idempotency: Option<Value>,
    timeout: Option<Value>,
    stdin: Option<Value>,
    env: Option<Value>,
    auth_scope: Option<Value>,
    max_retries: Option<Value>,
    parallel_safe: Option<Value>,
    version: Option<Value>,
}

/// Parses `tools.command`: an array of tables, in file order.
pub(super) fn command_tools(value: Value) -> Result<Vec<CommandToolDecl>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "tools.command: expected an array of tables ([[tools.command]]), found {}",
            describe(&value)
        ));
    };
    let builtins: Vec<String> = agentry_tools::builtins()
        .iter()
        .map(|t| t.contract().name)
        .collect();
    let mut out: Vec<CommandToolDecl> = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("tools.command[{i}]");
        let decl = declaration(&at, section(&at, item)?)?;
        name_is_free(&at, &decl.contract.name, &builtins, &out)?;
        out.push(decl);
    }
    Ok(out)
}

/// Refuses a name the registry would: the same as, or the same at the wire as
/// (`a.b` and `a_b`), a built-in or an earlier declaration.
fn name_is_free(
    at: &str,
    name: &str,
    builtins: &[String],
    earlier: &[CommandToolDecl],
) -> Result<(), String> {
    let wire = wire_name(name);
    let same = |other: &str| other == name || wire_name(other) == wire;
    let how = |other: &str| {
        if other == name {
            String::new()
        } else {
            format!(" (both are {wire:?} for a model API)")
        }
    };
    if let Some(b) = builtins.iter().find(|b| same(b)) {
        return Err(format!(
            "{at}.name: {name:?} collides with the built-in tool {b:?}{}; choose another name",
            how(b)
        ));
    }
    if let Some((j, other)) = earlier
        .iter()
        .enumerate()
        .find(|(_, d)| same(&d.contract.name))
    {
        let other = &other.contract.name;
        return Err(format!(
            "{at}.name: {name:?} collides with tools.command[{j}] ({other:?}){}",
            how(other)
        ));
    }
    Ok(())
}

fn declaration(at: &str, raw: RawCommandTool) -> Result<CommandToolDecl, String> {
    let name = match raw.name {
        None => return Err(format!("{at}.name: missing; the tool name the model calls")),
        Some(v) => tool_name(&format!("{at}.name"), &v)?,
    };
    let description = match raw.description {
        None => {
            return Err(format!(
                "{at}.description: missing; tell the model what the tool does"
            ));
        }
        Some(v) => non_empty(&format!("{at}.description"), &v)?,
    };
    let argv = match raw.argv {
        None => {
            return Err(format!(
                "{at}.argv: missing; e.g. argv = [\"cat\", \"{{path}}\"]"
            ));
        }
        Some(v) => argv(&format!("{at}.argv"), v)?,
    };
    let schema = match raw.input_schema {
        None => serde_json::json!({"type": "object", "properties": {}}),
        Some(v @ Value::Table(_)) => to_json(&format!("{at}.input_schema"), v)?,
        Some(v) => {
            return Err(format!(
                "{at}.input_schema: expected a table (the JSON Schema of the arguments object), found {}",
                describe(&v)
            ));
        }
    };
    let schema = input_schema(&format!("{at}.input_schema"), schema)?;

    let mut contract = ToolContract::new(name, description, schema);
    if let Some(v) = raw.effect {
        contract.effect = effect(&format!("{at}.effect"), &v)?;
    }
    if let Some(v) = raw.idempotency {
        contract.idempotency = idempotency(&format!("{at}.idempotency"), &v)?;
    }
    if let Some(v) = raw.timeout {
        contract.timeout_ms = millis(duration(&format!("{at}.timeout"), &v)?);
    }
    if let Some(v) = raw.auth_scope {
        let field = format!("{at}.auth_scope");
        let scope = non_empty(&field, &v)?;
        if scope.chars().any(char::is_whitespace) {
            return Err(format!(
                "{field}: must contain no whitespace (a grant could not name it), found {scope:?}"
            ));
        }
        contract.auth_scope = scope;
    }
    if let Some(v) = raw.max_retries {
        contract.max_retries = match v {
            Value::Integer(n) => u32::try_from(n).ok(),
            _ => None,
        }
        .ok_or_else(|| {
            format!(
                "{at}.max_retries: expected a non-negative integer, found {} (at most {})",
                describe(&v),
                u32::MAX
            )
        })?;
    }
    if let Some(v) = raw.parallel_safe {
        let Value::Boolean(b) = v else {
            return Err(format!(
                "{at}.parallel_safe: expected true or false, found {}",
                describe(&v)
            ));
        };
        contract.parallel_safe = Some(b);
    }
    if let Some(v) = raw.version {
        contract.version = non_empty(&format!("{at}.version"), &v)?;
    }
    let stdin = match raw.stdin {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(v) => {
            return Err(format!(
                "{at}.stdin: expected the name of an argument, found {}",
                describe(&v)
            ));
        }
    };
    let env = match raw.env {
        None => BTreeMap::new(),
        Some(v) => env(&format!("{at}.env"), v)?,
    };
    let decl = CommandToolDecl {
        contract,
        argv,
        stdin,
        env,
    };
    // The same checks the tool makes, mapped back to the element at fault.
    match decl.build() {
        Ok(_) => Ok(decl),
        Err(CommandToolError::ProgramPlaceholder { element, .. }) => Err(format!(
            "{at}.argv[0]: must be a literal program, not the placeholder {element}"
        )),
        Err(CommandToolError::UnknownField { field, .. }) => {
            let declared = properties(&decl.contract.input_schema);
            let declared = if declared.is_empty() {
                "it declares none".to_string()
            } else {
                format!("it declares {}", declared.join(", "))
            };
            let placeholders = [format!("{{{field}}}"), format!("{{{field}...}}")];
            match decl.argv.iter().position(|a| placeholders.contains(a)) {
                Some(i) => Err(format!(
                    "{at}.argv[{i}]: {} names no property of input_schema ({declared})",
                    decl.argv[i]
                )),
                None => Err(format!(
                    "{at}.stdin: {field:?} names no property of input_schema ({declared})"
                )),
            }
        }
        Err(e) => Err(format!("{at}: {e}")),
    }
}

/// `[A-Za-z0-9_.-]`, at most [`MAX_NAME`]: a name every model API takes as is
/// (after `.` → `_`) and a grant pattern can name.
fn tool_name(at: &str, v: &Value) -> Result<String, String> {
    let Value::String(s) = v else {
        return Err(format!(
            "{at}: expected a tool name such as \"ledger.append\", found {}",
            describe(v)
        ));
    };
    let valid = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(format!(
            "{at}: expected letters, digits, '_', '-' and '.' only, found {s:?}"
        ));
    }
    if s.chars().count() > MAX_NAME {
        return Err(format!(
            "{at}: longer than {MAX_NAME} characters, too long for model APIs"
        ));
    }
    Ok(s.clone())
}

fn non_empty(at: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
        v => Err(format!(
            "{at}: expected a non-empty string, found {}",
            describe(v)
        )),
    }
}

fn argv(at: &str, v: Value) -> Result<Vec<String>, String> {
    let items = match v {
        Value::Array(items) if !items.is_empty() => items,
        Value::Array(_) => return Err(format!("{at}: must not be empty; give the program first")),
        v => {
            return Err(format!(
                "{at}: expected a non-empty array of strings (the program, then its arguments), found {}",
                describe(&v)
            ));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let Value::String(s) = item else {
            return Err(format!(
                "{at}[{i}]: expected a string, found {}",
                describe(&item)
            ));
        };
        if i == 0 && s.is_empty() {
            return Err(format!("{at}[0]: the program must not be empty"));
        }
        if s.contains('\0') {
            return Err(format!("{at}[{i}]: contains a NUL byte"));
        }
        out.push(s);
    }
    Ok(out)
}

/// Completes and checks the schema: an object schema (`type` added if absent),
/// `additionalProperties: false` added if absent, every `required` name a
/// property, and it compiles.
fn input_schema(at: &str, schema: Json) -> Result<Json, String> {
    let Json::Object(mut map) = schema else {
        return Err(format!(
            "{at}: expected a table (the JSON Schema of the arguments object), found {schema}"
        ));
    };
    match map.get("type") {
        None => {
            map.insert("type".into(), Json::from("object"));
        }
        Some(Json::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "{at}.type: expected \"object\" (arguments are always an object), found {other}"
            ));
        }
    }
    if let Some(props) = map.get("properties")
        && !props.is_object()
    {
        return Err(format!(
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
                return Err(format!(
                    "{at}.required[{i}]: {r:?} is not in input_schema.properties"
                ));
            }
        }
    }
    jsonschema::validator_for(&schema).map_err(|e| {
        // The error's path is inside the schema: name that spot in TOML terms.
        let inside: String = e
            .instance_path()
            .to_string()
            .split('/')
            .filter(|s| !s.is_empty())
            .map(|s| format!(".{s}"))
            .collect();
        format!("{at}{inside}: not a valid JSON Schema: {e}")
    })?;
    Ok(schema)
}

fn properties(schema: &Json) -> Vec<String> {
    schema
        .get("properties")
        .and_then(Json::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// TOML to JSON; a non-finite float (JSON has none) is an error naming its path.
fn to_json(at: &str, v: Value) -> Result<Json, String> {
    Ok(match v {
        Value::String(s) => Json::String(s),
        Value::Integer(n) => Json::from(n),
        Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Json::Number)
            .ok_or_else(|| format!("{at}: {f} is not a JSON number"))?,
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

fn effect(at: &str, v: &Value) -> Result<Effect, String> {
    match v {
        Value::String(s) if s == "read_only" => Ok(Effect::ReadOnly),
        Value::String(s) if s == "reversible" => Ok(Effect::Reversible),
        Value::String(s) if s == "irreversible_external" => Ok(Effect::IrreversibleExternal),
        v => Err(format!(
            "{at}: expected \"read_only\", \"reversible\" or \"irreversible_external\", found {}",
            describe(v)
        )),
    }
}

fn idempotency(at: &str, v: &Value) -> Result<Idempotency, String> {
    match v {
        Value::String(s) if s == "idempotent" => Ok(Idempotency::Idempotent),
        Value::String(s) if s == "required_key" => Ok(Idempotency::RequiredKey),
        Value::String(s) if s == "none" => Ok(Idempotency::None),
        v => Err(format!(
            "{at}: expected \"idempotent\", \"required_key\" or \"none\", found {}",
            describe(v)
        )),
    }
}

fn env(at: &str, v: Value) -> Result<BTreeMap<String, String>, String> {
    let Value::Table(table) = v else {
        return Err(format!(
            "{at}: expected a table of strings, e.g. env = {{ LANG = \"C\" }}, found {}",
            describe(&v)
        ));
    };
    let mut out = BTreeMap::new();
    for (name, value) in table {
        let field = format!("{at}.{name}");
        if name.is_empty() || name.contains(['=', '\0']) {
            return Err(format!(
                "{field}: not a variable name (empty, or has '=' or NUL)"
            ));
        }
        if HOST_ENV.contains(&name.as_str()) {
            return Err(format!(
                "{field}: reserved; the host sets {} on every call",
                HOST_ENV.join(", ")
            ));
        }
        match value {
            Value::String(s) if !s.contains('\0') => {
                out.insert(name, s);
            }
            v => {
                return Err(format!(
                    "{field}: expected a string without NUL bytes, found {}",
                    describe(&v)
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::error::RuntimeError;
    use crate::registry::Grants;
    use crate::task::TaskSpec;

    const FULL: &str = r#"
goal = "keep the ledger"
[tools]
grant = ["fs.*", "ledger.append"]

[[tools.command]]
name = "ledger.append"
description = "Append a line to ledger.txt"
argv = ["sh", "-c", "printf '%s\n' \"$1\" >> ledger.txt", "sh", "{line}"]
input_schema = { type = "object", properties = { line = { type = "string" } }, required = ["line"] }
effect = "irreversible_external"
idempotency = "required_key"
timeout = "10s"
stdin = "line"
env = { LEDGER = "main", LANG = "C" }
auth_scope = "ledger.write"
max_retries = 0
parallel_safe = false
version = "3"

[[tools.command]]
name = "ledger.show"
description = "Print the ledger"
argv = ["cat", "ledger.txt"]
"#;

    fn parse(text: &str) -> Result<TaskSpec, RuntimeError> {
        TaskSpec::parse(text, Path::new("/nowhere/ledger"))
    }

    fn parse_err(text: &str) -> String {
        match parse(text) {
            Err(RuntimeError::InvalidTask { file, message }) => {
                assert_eq!(file, Path::new("/nowhere/ledger/task.toml"));
                message
            }
            other => panic!("expected InvalidTask, got {other:?}"),
        }
    }

    /// A task.toml with one `[[tools.command]]` table holding `body`.
    fn one(body: &str) -> String {
        format!("goal = \"g\"\n[[tools.command]]\nname = \"t.x\"\ndescription = \"d\"\n{body}\n")
    }

    #[test]
    fn every_field_parses() {
        let spec = parse(FULL).unwrap();
        assert_eq!(spec.grants, Grants::new(["fs.*", "ledger.append"]));
        assert_eq!(spec.command_tools.len(), 2);
        let mut contract = ToolContract::new(
            "ledger.append",
            "Append a line to ledger.txt",
            json!({
                "type": "object",
                "properties": {"line": {"type": "string"}},
                "required": ["line"],
                "additionalProperties": false
            }),
        )
        .effect(Effect::IrreversibleExternal)
        .idempotency(Idempotency::RequiredKey)
        .timeout_ms(10_000)
        .scope("ledger.write")
        .max_retries(0)
        .parallel_safe(false)
        .version("3");
        contract.preconditions = Vec::new();
        assert_eq!(
            spec.command_tools[0],
            CommandToolDecl {
                contract,
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "printf '%s\n' \"$1\" >> ledger.txt".into(),
                    "sh".into(),
                    "{line}".into(),
                ],
                stdin: Some("line".into()),
                env: BTreeMap::from([
                    ("LANG".to_string(), "C".to_string()),
                    ("LEDGER".to_string(), "main".to_string()),
                ]),
            }
        );
        // Defaults: reversible, not idempotent, scope = name, the contract's
        // timeout, retries and version; an empty object schema refusing extras.
        assert_eq!(
            spec.command_tools[1],
            CommandToolDecl {
                contract: ToolContract::new(
                    "ledger.show",
                    "Print the ledger",
                    json!({"type": "object", "properties": {}, "additionalProperties": false}),
                ),
                argv: vec!["cat".into(), "ledger.txt".into()],
                stdin: None,
                env: BTreeMap::new(),
            }
        );
    }

    #[test]
    fn a_schema_keeps_what_it_says_and_gains_type_and_additional_properties() {
        let spec = parse(&one(
            "argv = [\"echo\", \"{n}\"]\ninput_schema = { properties = { n = { type = \"integer\", minimum = 1.5 } } }",
        ))
        .unwrap();
        assert_eq!(
            spec.command_tools[0].contract.input_schema,
            json!({
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 1.5}},
                "additionalProperties": false
            })
        );
        let spec = parse(&one(
            "argv = [\"env\"]\ninput_schema = { type = \"object\", additionalProperties = true }",
        ))
        .unwrap();
        assert_eq!(
            spec.command_tools[0].contract.input_schema["additionalProperties"],
            json!(true),
            "an explicit choice is kept"
        );
    }

    #[test]
    fn the_registry_holds_builtins_and_declared_tools_but_grants_stay_as_written() {
        let spec = parse(FULL).unwrap();
        let registry = spec.registry().unwrap();
        let append = registry.get("ledger.append").unwrap();
        assert_eq!(append.contract, spec.command_tools[0].contract);
        assert!(registry.get("fs.read").is_some());
        assert!(registry.get("ledger.show").is_some());
        // Granted by name; `ledger.show` is declared but not granted.
        assert!(spec.grants.allows(&append.contract));
        assert!(
            !spec
                .grants
                .allows(&registry.get("ledger.show").unwrap().contract)
        );
        append
            .validate(&json!({"line": "x", "extra": 1}))
            .unwrap_err();
        // Without [tools] grant, only the default read-only grant applies.
        let spec = parse(&one("argv = [\"true\"]")).unwrap();
        assert_eq!(spec.grants, Grants::new(["fs.read"]));
        let registry = spec.registry().unwrap();
        assert!(!spec.grants.allows(&registry.get("t.x").unwrap().contract));
    }

    #[test]
    fn a_hand_made_bad_declaration_fails_in_registry_naming_it() {
        let mut spec = parse(&one("argv = [\"echo\"]")).unwrap();
        spec.command_tools[0].argv.push("{nope}".into());
        let err = spec.registry().unwrap_err().to_string();
        assert!(
            err.starts_with("/nowhere/ledger/task.toml: tools.command[0]: ")
                && err.contains("nope"),
            "{err}"
        );
    }

    #[test]
    fn bad_declarations_name_the_field() {
        let cases: Vec<(String, &str)> = vec![
            (
                "goal = \"g\"\n[tools]\ncommand = \"x\"".into(),
                "tools.command: expected an array of tables ([[tools.command]]), found \"x\"",
            ),
            (
                "goal = \"g\"\n[[tools.command]]\ndescription = \"d\"\nargv = [\"true\"]".into(),
                "tools.command[0].name: missing",
            ),
            (
                "goal = \"g\"\n[[tools.command]]\nname = \"a b\"\ndescription = \"d\"\nargv = [\"true\"]".into(),
                "tools.command[0].name: expected letters, digits",
            ),
            (
                format!(
                    "goal = \"g\"\n[[tools.command]]\nname = \"{}\"\ndescription = \"d\"\nargv = [\"true\"]",
                    "x".repeat(65)
                ),
                "tools.command[0].name: longer than 64 characters",
            ),
            (
                "goal = \"g\"\n[[tools.command]]\nname = \"t\"\nargv = [\"true\"]".into(),
                "tools.command[0].description: missing",
            ),
            (
                one("description2 = 1\nargv = [\"true\"]").replace("description = \"d\"\n", ""),
                "tools.command[0]: unknown field `description2`",
            ),
            (one(""), "tools.command[0].argv: missing"),
            (
                one("argv = []"),
                "tools.command[0].argv: must not be empty",
            ),
            (
                one("argv = \"echo hi\""),
                "tools.command[0].argv: expected a non-empty array of strings",
            ),
            (
                one("argv = [\"echo\", 3]"),
                "tools.command[0].argv[1]: expected a string, found 3",
            ),
            (
                one("argv = [\"\"]"),
                "tools.command[0].argv[0]: the program must not be empty",
            ),
            (
                one("argv = [\"{prog}\"]\ninput_schema = { properties = { prog = { type = \"string\" } } }"),
                "tools.command[0].argv[0]: must be a literal program, not the placeholder {prog}",
            ),
            (
                one("argv = [\"grep\", \"-e\", \"{patern...}\"]\ninput_schema = { properties = { pattern = { type = \"string\" } } }"),
                "tools.command[0].argv[2]: {patern...} names no property of input_schema (it declares pattern)",
            ),
            (
                one("argv = [\"cat\"]\nstdin = \"text\""),
                "tools.command[0].stdin: \"text\" names no property of input_schema (it declares none)",
            ),
            (
                one("argv = [\"cat\"]\nstdin = 1"),
                "tools.command[0].stdin: expected the name of an argument, found 1",
            ),
            (
                one("argv = [\"true\"]\ninput_schema = \"{}\""),
                "tools.command[0].input_schema: expected a table",
            ),
            (
                one("argv = [\"true\"]\ninput_schema = { type = \"string\" }"),
                "tools.command[0].input_schema.type: expected \"object\"",
            ),
            (
                one("argv = [\"true\"]\ninput_schema = { properties = 3 }"),
                "tools.command[0].input_schema.properties: expected a table",
            ),
            (
                one("argv = [\"true\"]\ninput_schema = { properties = { a = { type = \"string\" } }, required = [\"b\"] }"),
                "tools.command[0].input_schema.required[0]: \"b\" is not in input_schema.properties",
            ),
            (
                one("argv = [\"true\"]\ninput_schema = { properties = { a = { type = \"strin\" } } }"),
                "tools.command[0].input_schema.properties.a.type: not a valid JSON Schema",
            ),
            (
                one("argv = [\"true\"]\ninput_schema = { properties = { a = { maximum = nan } } }"),
                "tools.command[0].input_schema.properties.a.maximum: NaN is not a JSON number",
            ),
            (
                one("argv = [\"true\"]\neffect = \"destructive\""),
                "tools.command[0].effect: expected \"read_only\", \"reversible\" or \"irreversible_external\", found \"destructive\"",
            ),
            (
                one("argv = [\"true\"]\nidempotency = true"),
                "tools.command[0].idempotency: expected \"idempotent\", \"required_key\" or \"none\", found true",
            ),
            (
                one("argv = [\"true\"]\ntimeout = \"soon\""),
                "tools.command[0].timeout: expected a duration",
            ),
            (
                one("argv = [\"true\"]\nenv = [\"A=1\"]"),
                "tools.command[0].env: expected a table of strings",
            ),
            (
                one("argv = [\"true\"]\nenv = { A = 1 }"),
                "tools.command[0].env.A: expected a string without NUL bytes, found 1",
            ),
            (
                one("argv = [\"true\"]\nenv = { AGENTRY_OPERATION_ID = \"x\" }"),
                "tools.command[0].env.AGENTRY_OPERATION_ID: reserved; the host sets",
            ),
            (
                one("argv = [\"true\"]\nauth_scope = \"a b\""),
                "tools.command[0].auth_scope: must contain no whitespace",
            ),
            (
                one("argv = [\"true\"]\nauth_scope = \"\""),
                "tools.command[0].auth_scope: expected a non-empty string",
            ),
            (
                one("argv = [\"true\"]\nmax_retries = -1"),
                "tools.command[0].max_retries: expected a non-negative integer, found -1",
            ),
            (
                one("argv = [\"true\"]\nparallel_safe = \"yes\""),
                "tools.command[0].parallel_safe: expected true or false, found \"yes\"",
            ),
            (
                one("argv = [\"true\"]\nversion = 2"),
                "tools.command[0].version: expected a non-empty string, found 2",
            ),
            (
                "goal = \"g\"\n[[tools.command]]\nname = \"fs.read\"\ndescription = \"d\"\nargv = [\"cat\"]".into(),
                "tools.command[0].name: \"fs.read\" collides with the built-in tool \"fs.read\"",
            ),
            (
                "goal = \"g\"\n[[tools.command]]\nname = \"proc_run\"\ndescription = \"d\"\nargv = [\"cat\"]".into(),
                "tools.command[0].name: \"proc_run\" collides with the built-in tool \"proc.run\" (both are \"proc_run\" for a model API)",
            ),
            (
                format!("{}[[tools.command]]\nname = \"t.x\"\ndescription = \"again\"\nargv = [\"true\"]\n", one("argv = [\"true\"]")),
                "tools.command[1].name: \"t.x\" collides with tools.command[0] (\"t.x\")",
            ),
        ];
        for (text, want) in cases {
            let message = parse_err(&text);
            assert!(
                message.contains(want),
                "{text:?}:\n got {message:?}\nwant {want:?}"
            );
        }
    }
}
