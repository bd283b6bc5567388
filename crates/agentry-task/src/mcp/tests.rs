#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use agentry_mcp::{ContractOverride, McpServerConfig, McpTransport};
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use serde_json::json;

use crate::{TaskError, TaskSpec};

fn parse(text: &str) -> TaskSpec {
    TaskSpec::parse(text, Path::new("/nowhere/t1")).unwrap()
}

fn parse_err(text: &str) -> String {
    match TaskSpec::parse(text, Path::new("/nowhere/t1")) {
        Err(TaskError::Invalid { message, .. }) => message,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// The issue's example block, as a user would paste it.
const EVERYTHING: &str = r#"
goal = "g"
[tools]
grant = ["everything.*"]

[[tools.mcp]]
name = "everything"
command = ["npx", "-y", "@modelcontextprotocol/server-everything"]
env = { LOG_LEVEL = "warn" }
tools = ["echo", "get-sum"]
timeout = "30s"
startup_timeout = "20s"

[tools.mcp.overrides."get-sum"]
effect = "read_only"
idempotency = "idempotent"
approve = true
redact = ["api_key", "token"]

[[tools.mcp]]
name = "remote"
url = "http://127.0.0.1:3001/mcp"
headers = { Authorization = "Bearer ${MCP_TOKEN}" }
timeout = "5s"

[tools.mcp.overrides.charge]
approve = false
"#;

#[test]
fn the_issue_example_parses_into_two_servers() {
    let spec = parse(EVERYTHING);
    let mut overrides = BTreeMap::new();
    overrides.insert(
        "get-sum".to_string(),
        ContractOverride {
            effect: Some(Effect::ReadOnly),
            idempotency: Some(Idempotency::Idempotent),
            approve: Some(true),
            redact: vec!["api_key".into(), "token".into()],
        },
    );
    let mut first = McpServerConfig::new(
        "everything",
        McpTransport::Stdio {
            command: vec![
                "npx".into(),
                "-y".into(),
                "@modelcontextprotocol/server-everything".into(),
            ],
            env: BTreeMap::from([("LOG_LEVEL".to_string(), "warn".to_string())]),
        },
    );
    first.tools = Some(vec!["echo".into(), "get-sum".into()]);
    first.overrides = overrides;
    assert_eq!(spec.mcp_servers[0], first);
    let second = &spec.mcp_servers[1];
    assert_eq!(
        second.transport,
        McpTransport::Http {
            url: "http://127.0.0.1:3001/mcp".into(),
            headers: BTreeMap::from([(
                "Authorization".to_string(),
                "Bearer ${MCP_TOKEN}".to_string()
            )]),
            ca_cert: None,
        }
    );
    assert_eq!(second.timeout, Duration::from_secs(5));
    assert_eq!(second.startup_timeout, Duration::from_secs(20));
    assert_eq!(second.tools, None);
}

#[test]
fn max_tools_is_a_positive_count_defaulting_to_a_thousand() {
    let server = |extra: &str| {
        format!("goal = \"g\"\n[[tools.mcp]]\nname = \"s\"\ncommand = [\"x\"]\n{extra}")
    };
    assert_eq!(parse(&server("")).mcp_servers[0].max_tools, 1_000);
    assert_eq!(
        parse(&server("max_tools = 20000")).mcp_servers[0].max_tools,
        20_000
    );
    for bad in ["max_tools = 0", "max_tools = \"many\""] {
        let err = parse_err(&server(bad));
        assert!(
            err.contains("tools.mcp[0].max_tools: expected a positive integer"),
            "{err}"
        );
    }
}

#[test]
fn approve_overrides_reach_the_run_approvals() {
    let spec = parse(EVERYTHING);
    let contract = |name: &str| {
        let mut c = ToolContract::new(name, "d", json!({"type": "object"}));
        c.effect = Effect::IrreversibleExternal;
        c
    };
    // approve = true: waits even if it were read-only; approve = false: runs
    // without a human even though irreversible.
    assert!(spec.approval.required_for(&contract("everything.get-sum")));
    assert!(!spec.approval.required_for(&contract("remote.charge")));
    // Not overridden: irreversible tools wait, as for every tool.
    assert!(spec.approval.required_for(&contract("everything.echo")));
    assert!(spec.run_config("/tmp".into()).approval == spec.approval);
}

#[test]
fn mistakes_are_named_by_field() {
    let cases: &[(&str, &str)] = &[
        (
            "[[tools.mcp]]\ncommand = [\"x\"]",
            "tools.mcp[0].name: missing",
        ),
        (
            "[[tools.mcp]]\nname = \"a.b\"\ncommand = [\"x\"]",
            "tools.mcp[0].name: \"a.b\" has a '.'",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"",
            "tools.mcp[0]: neither command nor url",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\nurl = \"http://h/mcp\"",
            "tools.mcp[0]: both command and url",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = []",
            "tools.mcp[0].command: must not be empty",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\nurl = \"ftp://h\"",
            "tools.mcp[0].url: expected an http:// or https:// URL",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\nheaders = { A = \"b\" }",
            "tools.mcp[0].headers: only for a server reached by url",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\nurl = \"http://h/mcp\"\nheaders = { \"A B\" = \"b\" }",
            "tools.mcp[0].headers.A B: not an HTTP header name",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\ntools = []",
            "tools.mcp[0].tools: empty",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\ntimeout = 5",
            "tools.mcp[0].timeout",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\nport = 5",
            "tools.mcp[0]: unknown field `port`",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\ntools = [\"t\"]\n[tools.mcp.overrides.u]\napprove = true",
            "tools.mcp[0].overrides.u: \"u\" is not in this server's tools list",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\n[tools.mcp.overrides.t]\neffect = \"harmless\"",
            "tools.mcp[0].overrides.t.effect: expected \"read_only\"",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\n[tools.mcp.overrides.t]\napprove = \"yes\"",
            "tools.mcp[0].overrides.t.approve: expected true or false",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\n[[tools.mcp]]\nname = \"a\"\ncommand = [\"y\"]",
            "tools.mcp[1].name: \"a\" is also the name of tools.mcp[0]",
        ),
        ("[tools]\nmcp = 3", "tools.mcp: expected an array of tables"),
    ];
    for (tail, expected) in cases {
        let text = if tail.starts_with("[tools]") {
            format!("goal = \"g\"\n{tail}")
        } else {
            format!("goal = \"g\"\n[tools]\n{tail}")
        };
        let message = parse_err(&text);
        assert!(
            message.contains(expected),
            "for {tail:?}: expected {expected:?} in {message:?}"
        );
    }
}

#[test]
fn redact_overrides_parse_and_bad_ones_and_a_reserved_env_are_named() {
    let spec = parse(EVERYTHING);
    assert_eq!(
        spec.mcp_servers[0].overrides["get-sum"].redact,
        ["api_key", "token"]
    );
    assert!(spec.mcp_servers[1].overrides["charge"].redact.is_empty());
    let cases: &[(&str, &str)] = &[
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\n[tools.mcp.overrides.t]\nredact = \"password\"",
            "tools.mcp[0].overrides.t.redact: expected an array of field names",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\n[tools.mcp.overrides.t]\nredact = [\"\"]",
            "tools.mcp[0].overrides.t.redact[0]: expected a field name",
        ),
        (
            "[[tools.mcp]]\nname = \"a\"\ncommand = [\"x\"]\nenv = { TRACEPARENT = \"00-x\" }",
            "tools.mcp[0].env.TRACEPARENT: reserved",
        ),
    ];
    for (tail, expected) in cases {
        let message = parse_err(&format!("goal = \"g\"\n[tools]\n{tail}"));
        assert!(
            message.contains(expected),
            "for {tail:?}: expected {expected:?} in {message:?}"
        );
    }
}

/// `ca_cert` is taken from the task directory and must exist at load, as
/// `[policy] ca_cert`; it is for a server reached by url only.
#[test]
fn a_servers_ca_cert_is_resolved_against_the_task_dir() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("certs")).unwrap();
    std::fs::write(tmp.path().join("certs/ca.pem"), "pem").unwrap();
    let text = "goal = \"g\"\n[[tools.mcp]]\nname = \"r\"\nurl = \"https://127.0.0.1:1/mcp\"\nca_cert = \"certs/ca.pem\"";
    let spec = TaskSpec::parse(text, tmp.path()).unwrap();
    let McpTransport::Http { ca_cert, .. } = &spec.mcp_servers[0].transport else {
        panic!("{:?}", spec.mcp_servers[0].transport)
    };
    assert_eq!(
        ca_cert.as_deref(),
        Some(tmp.path().join("certs/ca.pem").as_path())
    );
    let cases: &[(&str, &str)] = &[
        (
            "url = \"https://h/mcp\"\nca_cert = \"certs/absent.pem\"",
            "tools.mcp[0].ca_cert: ",
        ),
        (
            "url = \"https://h/mcp\"\nca_cert = 3",
            "tools.mcp[0].ca_cert: expected the path of a PEM file",
        ),
        (
            "command = [\"x\"]\nca_cert = \"certs/ca.pem\"",
            "tools.mcp[0].ca_cert: only for a server reached by url",
        ),
    ];
    for (tail, expected) in cases {
        let message = parse_err_in(tmp.path(), tail);
        assert!(
            message.contains(expected),
            "for {tail:?}: expected {expected:?} in {message:?}"
        );
    }
    let absent = parse_err_in(
        tmp.path(),
        "url = \"https://h/mcp\"\nca_cert = \"certs/absent.pem\"",
    );
    assert!(
        absent.contains("does not exist or is not a file"),
        "{absent}"
    );
}

fn parse_err_in(dir: &Path, tail: &str) -> String {
    let text = format!("goal = \"g\"\n[[tools.mcp]]\nname = \"r\"\n{tail}");
    match TaskSpec::parse(&text, dir) {
        Err(TaskError::Invalid { message, .. }) => message,
        other => panic!("expected Invalid, got {other:?}"),
    }
}
