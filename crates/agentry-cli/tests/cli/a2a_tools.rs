//! `[[tools.a2a]]` in a task file: `agentry run` calls a remote A2A agent
//! (crates/agentry-a2a/tests/peers/echo_agent.py, on the official Python
//! SDK) as the tool `<name>.ask`, its bearer token read from the
//! environment; without the token set the call fails naming the variable.
//! `agentry tools` shows the tool's description with the agent's card's
//! description and skills, read at the start, or the plain text when the
//! card cannot be read.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::*;

pub(super) const TOKEN: &str = "s3cret-for-cli-tests";

/// The test agent, killed when dropped.
pub(super) struct Agent {
    child: Child,
    pub(super) base: String,
    /// What the agent saw: "task <id>", "message <id>", "cancel <id>" lines.
    pub(super) record: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn start_agent() -> Agent {
    let python = std::env::var("A2A_PYTHON").unwrap_or_else(|_| {
        panic!(
            "A2A_PYTHON is unset: it must name a Python with a2a-sdk[http-server]==1.3.0 and uvicorn \
             (.ci/run makes .ci/a2a-venv and sets it)"
        )
    });
    let script = root().join("crates/agentry-a2a/tests/peers/echo_agent.py");
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(&python)
        .arg(&script)
        .arg(TOKEN)
        .arg(dir.path().join("record.txt"))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("stderr.txt")).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("A2A_PYTHON={python} does not start: {e}"));
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let port = first
        .strip_prefix("PORT ")
        .map(str::trim)
        .unwrap_or_else(|| {
            panic!(
                "the A2A test agent did not start ({first:?}); its stderr:\n{}",
                std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default()
            )
        });
    Agent {
        base: format!("http://127.0.0.1:{port}"),
        record: dir.path().join("record.txt"),
        child,
        _dir: dir,
    }
}

fn task(base: &str) -> tempfile::TempDir {
    task_dir(
        &format!(
            "goal = \"ask the echo agent\"\n\
             [tools]\ngrant = [\"echo.ask\"]\n\
             [[tools.a2a]]\nname = \"echo\"\nurl = \"{base}\"\n\
             headers = {{ Authorization = \"Bearer ${{ECHO_AGENT_TOKEN}}\" }}\n\
             effect = \"read_only\"\ntimeout = \"60s\"\n"
        ),
        r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "echo.ask", "arguments": {"message": "hello"}}]},
            {"final": "asked"}
        ]}"#,
    )
}

#[test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it and sets A2A_PYTHON); .ci/run runs it"]
fn a_task_calls_a_remote_a2a_agent_declared_in_its_file() {
    let agent = start_agent();
    let dir = task(&agent.base);
    let work = tempfile::tempdir().unwrap();
    let trace = work.path().join("run.jsonl");
    let out = agentry_command()
        .env("ECHO_AGENT_TOKEN", TOKEN)
        .args([
            "run",
            path_str(dir.path()),
            "--no-store",
            "--json",
            "--workdir",
            path_str(&work.path().join("w")),
            "--trace",
            path_str(&trace),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", stderr(&out));
    let outcome: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(outcome["stop_reason"], "done", "{outcome}");
    assert_eq!(outcome["tool_calls"], 1, "{outcome}");
    let recorded = std::fs::read_to_string(&trace).unwrap();
    assert!(
        recorded.contains("echo: hello"),
        "the remote agent's answer reached the run: {recorded}"
    );
}

#[test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it and sets A2A_PYTHON); .ci/run runs it"]
fn a_call_whose_header_variable_is_unset_fails_naming_it() {
    let agent = start_agent();
    let dir = task(&agent.base);
    let work = tempfile::tempdir().unwrap();
    let trace = work.path().join("run.jsonl");
    let out = agentry_command()
        .env_remove("ECHO_AGENT_TOKEN")
        .args([
            "run",
            path_str(dir.path()),
            "--no-store",
            "--workdir",
            path_str(&work.path().join("w")),
            "--trace",
            path_str(&trace),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recorded = std::fs::read_to_string(&trace).unwrap();
    assert!(
        recorded.contains("EINVAL")
            && recorded.contains("Authorization")
            && recorded.contains("ECHO_AGENT_TOKEN"),
        "the call's error names the header and the variable: {recorded}"
    );
    assert!(
        !recorded.contains("echo: hello"),
        "nothing reached the agent"
    );
}

/// `agentry tools DIR --json`: the row of `echo.ask`.
fn listed(dir: &Path, token: Option<&str>) -> Value {
    let mut cmd = agentry_command();
    match token {
        Some(t) => cmd.env("ECHO_AGENT_TOKEN", t),
        None => cmd.env_remove("ECHO_AGENT_TOKEN"),
    };
    let out = cmd
        .args(["tools", path_str(dir), "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    rows.into_iter()
        .find(|r| r["name"] == "echo.ask")
        .unwrap_or_else(|| panic!("echo.ask not listed"))
}

#[test]
#[ignore = "needs the a2a-sdk Python package (.ci/run installs it and sets A2A_PYTHON); .ci/run runs it"]
fn the_tools_description_shows_the_cards_description_and_skills() {
    // Before: "Ask the remote A2A agent "echo" (its card: URL)…" only; the
    // model never learned what the agent does.
    let agent = start_agent();
    let dir = task(&agent.base);
    let row = listed(dir.path(), Some(TOKEN));
    assert_eq!(row["source"], "a2a:echo", "{row}");
    assert_eq!(row["effect"], "read_only", "{row}");
    let description = row["description"].as_str().unwrap();
    for part in [
        "echoes what it is told",
        "Echo (echoes",
        "Question (asks which one",
        "task_id",
    ] {
        assert!(description.contains(part), "{part:?} in {description:?}");
    }
    // Unreachable (the agent gone): the plain text, and the listing works.
    let base = agent.base.clone();
    drop(agent);
    let dir = task(&base);
    let row = listed(dir.path(), Some(TOKEN));
    let description = row["description"].as_str().unwrap();
    assert!(
        description.starts_with("Ask the remote A2A agent \"echo\" (its card: "),
        "{description}"
    );
}
