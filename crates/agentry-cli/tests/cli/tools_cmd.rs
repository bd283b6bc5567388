//! `agentry tools TASK_DIR`: every tool a run of the task has, with its
//! contract facts and whether the task grants it; MCP servers are started to
//! list theirs. And `agentry run` with a `[[tools.mcp]]` server that does not
//! start: exit 2 naming it, nothing left behind.

use crate::*;

/// The MCP reference server's entry point (a missing peer fails).
fn everything_bin() -> PathBuf {
    agentry_test_support::peers::mcp_everything_bin().unwrap()
}

const LEDGER_TOOL: &str = r#"
[[tools.command]]
name = "ledger.append"
description = "Append a line to ledger.txt"
argv = ["sh", "-c", "printf '%s\n' \"$1\" >> ledger.txt", "sh", "{line}"]
input_schema = { type = "object", properties = { line = { type = "string" } }, required = ["line"] }
effect = "irreversible_external"
idempotency = "required_key"
"#;

#[test]
fn lists_built_ins_and_command_tools_with_their_contracts() {
    let dir = task_dir(
        &format!("goal = \"g\"\n[tools]\ngrant = [\"fs.read\", \"ledger.*\"]\n{LEDGER_TOOL}"),
        r#"{"turns":[{"final":"x"}]}"#,
    );
    let out = agentry(&["tools", path_str(dir.path()), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {rows:?}"))
            .clone()
    };
    let ledger = row("ledger.append");
    assert_eq!(ledger["source"], "command");
    assert_eq!(ledger["effect"], "irreversible_external");
    assert_eq!(ledger["idempotency"], "required_key");
    assert_eq!(ledger["approval"], true);
    assert_eq!(ledger["granted"], true);
    let read = row("fs.read");
    assert_eq!(read["source"], "built-in");
    assert_eq!(read["granted"], true);
    assert_eq!(read["approval"], false);
    assert_eq!(row("fs.write")["granted"], false);

    // The table: a header and one line per tool.
    let out = agentry(&["tools", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("TOOL"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("ledger.append"))
        .unwrap_or_else(|| panic!("{text}"));
    for word in ["command", "irreversible_external", "required_key", "yes"] {
        assert!(line.contains(word), "{line}");
    }
}

/// A server that never answers `initialize`: `agentry run` exits 2 within
/// the startup timeout, naming the server and what it printed, and removes
/// the working directory it had made; `agentry tools` says the same.
#[test]
fn a_server_that_never_initializes_exits_2_and_leaves_nothing() {
    let secs = agentry_test_support::procs::unique_secs(600);
    let toml = format!(
        "goal = \"g\"\n[tools]\ngrant = [\"db.*\"]\n\
         [[tools.mcp]]\nname = \"db\"\n\
         command = [\"sh\", \"-c\", \"echo 'db: cannot reach postgres' >&2; exec sleep {secs}\"]\n\
         startup_timeout = \"1s\"\n"
    );
    let dir = task_dir(&toml, r#"{"turns":[{"final":"x"}]}"#);
    let workdir = dir.path().join("run-here");
    let started = std::time::Instant::now();
    let out = agentry(&[
        "run",
        path_str(dir.path()),
        "--no-store",
        "--workdir",
        path_str(&workdir),
    ]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("db"), "{err}");
    assert!(err.contains("db: cannot reach postgres"), "{err}");
    assert!(!workdir.exists(), "the working directory was left behind");
    wait_for_sleepers(&secs, false);

    let out = agentry(&["tools", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("db: cannot reach postgres"));
    wait_for_sleepers(&secs, false);
}

/// The reference server's tools listed with the contracts their annotations
/// give, under the server's name, granted by `everything.*`.
#[test]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
fn lists_an_mcp_servers_tools() {
    let toml = format!(
        "goal = \"g\"\n[tools]\ngrant = [\"everything.*\"]\n\
         [[tools.mcp]]\nname = \"everything\"\ncommand = [\"node\", {:?}, \"stdio\"]\n\
         tools = [\"echo\", \"get-sum\", \"toggle-simulated-logging\"]\n\
         [tools.mcp.overrides.\"get-sum\"]\napprove = true\n",
        everything_bin().display().to_string()
    );
    let dir = task_dir(&toml, r#"{"turns":[{"final":"x"}]}"#);
    let out = agentry(&["tools", path_str(dir.path()), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mcp: Vec<&Value> = rows
        .iter()
        .filter(|r| r["source"] == "mcp:everything")
        .collect();
    assert_eq!(mcp.len(), 3, "the allow-list: {mcp:?}");
    let echo = mcp.iter().find(|r| r["name"] == "everything.echo").unwrap();
    assert_eq!(echo["effect"], "read_only");
    assert_eq!(echo["idempotency"], "idempotent");
    assert_eq!(echo["approval"], false);
    assert_eq!(echo["granted"], true);
    let sum = mcp
        .iter()
        .find(|r| r["name"] == "everything.get-sum")
        .unwrap();
    assert_eq!(sum["approval"], true, "approve = true");
    let toggle = mcp
        .iter()
        .find(|r| r["name"] == "everything.toggle-simulated-logging")
        .unwrap();
    // destructiveHint false, readOnlyHint false → reversible.
    assert_eq!(toggle["effect"], "reversible");
    assert_eq!(toggle["idempotency"], "none");
}

/// A whole `agentry run` calling the reference server's `echo` and `get-sum`.
#[test]
#[ignore = "needs MCP_EVERYTHING_DIR (see .ci/run)"]
fn runs_a_task_with_an_mcp_server() {
    let toml = format!(
        "goal = \"g\"\n[tools]\ngrant = [\"everything.*\"]\n\
         [[tools.mcp]]\nname = \"everything\"\ncommand = [\"node\", {:?}, \"stdio\"]\n",
        everything_bin().display().to_string()
    );
    let script = r#"{"turns":[
        {"tool_calls":[{"id":"e","name":"everything.echo","arguments":{"message":"over the wire"}}]},
        {"tool_calls":[{"id":"s","name":"everything.get-sum","arguments":{"a":20,"b":22}}]},
        {"tool_calls":[{"id":"f","name":"task.finish","arguments":{"answer":"42"}}]}]}"#;
    let dir = task_dir(&toml, script);
    let (code, report) = agentry_json(&["run", path_str(dir.path()), "--no-store"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["stop_reason"], "done", "{report}");
}
