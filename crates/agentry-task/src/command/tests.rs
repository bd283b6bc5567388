#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;

use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use agentry_runtime::Grants;
use serde_json::json;

use crate::{CommandToolDecl, TaskError, TaskSpec};

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
redact = ["line", "password", "line"]
volatile = ["at", "meta.pid"]

[[tools.command]]
name = "ledger.show"
description = "Print the ledger"
argv = ["cat", "ledger.txt"]
"#;

fn parse(text: &str) -> Result<TaskSpec, TaskError> {
    TaskSpec::parse(text, Path::new("/nowhere/ledger"))
}

fn parse_err(text: &str) -> String {
    match parse(text) {
        Err(TaskError::Invalid { file, message }) => {
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
    .version("3")
    .redact_fields(["line", "password"])
    .volatile_fields(["at", "meta.pid"]);
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
            sandbox: None,
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
            sandbox: None,
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
        err.starts_with("/nowhere/ledger/task.toml: tools.command[0]: ") && err.contains("nope"),
        "{err}"
    );
}

#[test]
fn bad_declarations_name_the_field() {
    // Size: a table of 38 cases; splitting it would scatter the messages it pins.
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
            one("argv = [\"true\"]\nredact = \"password\""),
            "tools.command[0].redact: expected an array of field names, e.g. redact = [\"password\"], found \"password\"",
        ),
        (
            one("argv = [\"true\"]\nredact = [\"password\", 3]"),
            "tools.command[0].redact[1]: expected a field name, found 3",
        ),
        (
            one("argv = [\"true\"]\nvolatile = \"at\""),
            "tools.command[0].volatile: expected an array of field names, e.g. volatile = [\"at\"], found \"at\"",
        ),
        (
            one("argv = [\"true\"]\nvolatile = [\"\"]"),
            "tools.command[0].volatile[0]: expected a field name, found \"\"",
        ),
        (
            one("argv = [\"true\"]\nenv = { TRACEPARENT = \"00-forged\" }"),
            "tools.command[0].env.TRACEPARENT: reserved; the host sets",
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
