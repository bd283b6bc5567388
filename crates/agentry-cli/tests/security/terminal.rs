//! Text a model, a store, a trace or an MCP server controls, printed to a
//! terminal: issue 33 item 7. A model's answer holding `ESC [2J` cleared the
//! user's terminal; a task, run or tool name could do the same in `runs`,
//! `stats` and `agentry tools`. Every human-facing output now shows such
//! characters escaped; the JSON outputs carry them exactly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_agentry")
}

/// The workspace root, where `examples/` lives.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `agentry ARGS`, with a private temp dir and no store from the environment.
fn agentry(args: &[&str], tmp: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("AGENTRY_STORE")
        .env("TMPDIR", tmp)
        .env("XDG_STATE_HOME", tmp.join("state"))
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Clears the screen, sets the window title, rings, reverses what follows,
/// and a C1 CSI: what a hostile string carries to a terminal.
const HOSTILE: &str = "\x1b[2J\x1b]0;pwned\x07\u{202e}evil\u{9b}31m";

/// What HOSTILE is shown as.
const SHOWN: &str = r"\x1b[2J\x1b]0;pwned\x07\u{202e}evil\u{9b}31m";

/// `out` holds nothing a terminal acts on but line breaks and tabs.
fn assert_inert(what: &str, out: &str) {
    let raw: Vec<char> = out
        .chars()
        .filter(|c| {
            (c.is_control() && *c != '\n' && *c != '\t')
                || ('\u{202a}'..='\u{202e}').contains(c)
                || ('\u{2066}'..='\u{2069}').contains(c)
        })
        .collect();
    assert!(raw.is_empty(), "{what} printed raw {raw:?}: {out:?}");
}

/// The sum example in a directory named with HOSTILE (the task id), its
/// model answering HOSTILE on two lines.
fn hostile_task(tmp: &Path) -> PathBuf {
    let dir = tmp.join(format!("sum{HOSTILE}"));
    let example = root().join("examples/sum");
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    std::fs::copy(example.join("task.toml"), dir.join("task.toml")).unwrap();
    std::fs::copy(
        example.join("workspace/numbers.txt"),
        dir.join("workspace/numbers.txt"),
    )
    .unwrap();
    let script = std::fs::read_to_string(example.join("script.json")).unwrap();
    let answer = serde_json::to_string(&format!("sum=23 {HOSTILE}\nsecond line")).unwrap();
    let script = script.replace("\"sum=23\"", &answer);
    assert!(
        script.contains("second line"),
        "the script changed: {script}"
    );
    std::fs::write(dir.join("script.json"), script).unwrap();
    dir
}

/// The run's summary, `agentry runs` and `agentry stats` (over the store
/// and over the trace, by tool with a tool renamed in the trace): every
/// hostile string shown escaped, the answer's line break kept; `--json`
/// exact.
#[test]
fn a_models_answer_and_a_stores_strings_cannot_drive_the_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let task = hostile_task(tmp.path());
    let task = task.to_str().unwrap();
    let store = tmp.path().join("runs.db");
    let store = store.to_str().unwrap();
    let trace = tmp.path().join("trace.jsonl");
    let trace_path = trace.to_str().unwrap();

    let run = agentry(
        &["run", task, "--store", store, "--trace", trace_path],
        tmp.path(),
    );
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let summary = text(&run.stdout);
    assert_inert("the summary", &summary);
    assert!(
        summary.contains(&format!("answer       sum=23 {SHOWN}\nsecond line\n")),
        "{summary}"
    );
    assert!(summary.contains(&format!("(task sum{SHOWN})")), "{summary}");
    assert_inert("stderr", &text(&run.stderr));

    let json_run = agentry(&["run", task, "--no-store", "--json"], tmp.path());
    let report: Value = serde_json::from_slice(&json_run.stdout).unwrap();
    assert_eq!(
        report["answer"].as_str(),
        Some(format!("sum=23 {HOSTILE}\nsecond line").as_str())
    );
    assert_eq!(
        report["task_id"].as_str(),
        Some(format!("sum{HOSTILE}").as_str())
    );

    let runs = agentry(&["runs", "--all", "--store", store], tmp.path());
    assert_eq!(runs.status.code(), Some(0), "{}", text(&runs.stderr));
    assert_inert("agentry runs", &text(&runs.stdout));
    assert!(text(&runs.stdout).contains(&format!("sum{SHOWN}")));
    let runs_json = agentry(&["runs", "--all", "--json", "--store", store], tmp.path());
    let listed: Value = serde_json::from_slice(&runs_json.stdout).unwrap();
    assert_eq!(
        listed[0]["task_id"].as_str(),
        Some(format!("sum{HOSTILE}").as_str())
    );

    let stats = agentry(&["stats", "--store", store], tmp.path());
    assert_eq!(stats.status.code(), Some(0), "{}", text(&stats.stderr));
    assert_inert("agentry stats", &text(&stats.stdout));
    assert!(text(&stats.stdout).contains(&format!("task sum{SHOWN}")));

    // A trace edited by hand: a tool named with HOSTILE.
    let edited = std::fs::read_to_string(&trace).unwrap().replace(
        "\"fs.read\"",
        &serde_json::to_string(&format!("fs.read{HOSTILE}")).unwrap(),
    );
    std::fs::write(&trace, edited).unwrap();
    let stats = agentry(
        &["stats", "--trace", trace_path, "--by", "tool"],
        tmp.path(),
    );
    assert_eq!(stats.status.code(), Some(0), "{}", text(&stats.stderr));
    let table = text(&stats.stdout);
    assert_inert("agentry stats --trace", &table);
    assert!(table.contains(&format!("fs.read{SHOWN}")), "{table}");

    // An error naming such a path, on stderr.
    let missing = tmp.path().join(format!("gone{HOSTILE}"));
    let failed = agentry(&["run", missing.to_str().unwrap()], tmp.path());
    assert_eq!(failed.status.code(), Some(2));
    let err = text(&failed.stderr);
    assert_inert("an error", &err);
    assert!(err.contains(&format!("gone{SHOWN}")), "{err}");
}

/// An MCP server (a real one over stdio, in Python) whose tool description
/// holds HOSTILE and one of whose tools is named with it: `agentry tools`
/// skips the badly named tool with a warning showing its name escaped, and
/// shows the description escaped; `--json` has the description exact.
#[test]
fn agentry_tools_shows_a_servers_strings_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("task");
    std::fs::create_dir_all(dir.join("workspace")).unwrap();
    let server = tmp.path().join("server.py");
    std::fs::write(&server, PYTHON_SERVER).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!(
            "goal = \"g\"\n[tools]\ngrant = [\"odd.*\"]\n[[tools.mcp]]\nname = \"odd\"\n\
             command = [\"python3\", {:?}]\n",
            server.to_str().unwrap()
        ),
    )
    .unwrap();
    let dir = dir.to_str().unwrap();

    let out = agentry(&["tools", dir], tmp.path());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let warnings = text(&out.stderr);
    assert_inert("agentry tools", &table);
    assert_inert("its warnings", &warnings);
    assert!(table.contains("odd.ok"), "{table}");
    assert!(table.contains(&format!("Does {SHOWN}")), "{table}");
    assert!(!table.contains("odd.bad"), "{table}");
    assert!(
        warnings.contains("MCP server odd lists a tool named")
            && warnings.contains(&format!("bad{SHOWN}")),
        "{warnings}"
    );

    let out = agentry(&["tools", dir, "--json"], tmp.path());
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ok = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "odd.ok")
        .unwrap();
    assert_eq!(
        ok["description"].as_str(),
        Some(format!("Does {HOSTILE}").as_str())
    );
}

/// A minimal MCP server on stdio: `initialize`, then `tools/list` with a
/// tool described with HOSTILE and one named with it.
const PYTHON_SERVER: &str = r#"
import json, sys
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\u202eevil\x9b31m"
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}},
                  "serverInfo": {"name": "odd", "version": "1"}}
    elif method == "tools/list":
        schema = {"type": "object"}
        result = {"tools": [
            {"name": "ok", "description": "Does " + HOSTILE, "inputSchema": schema},
            {"name": "bad" + HOSTILE, "description": "x", "inputSchema": schema},
        ]}
    else:
        result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()
"#;
