//! Security tests against the real binary: see `tests/security.rs`. This
//! module: the workspace — agentry's artifact writes.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Most a run here may take; a hung CLI (the bug) is killed and fails the test.
const RUN_LIMIT: Duration = Duration::from_secs(120);

/// A task directory with this task.toml and script.json.
fn task_dir(toml: &str, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.toml"), toml).unwrap();
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    dir
}

/// What a finished `agentry run --json` gave.
struct Ran {
    code: i32,
    json: Value,
    stderr: String,
}

/// Runs `agentry run TASK --json --no-store --workdir WORKDIR` with `env` added,
/// killing it (and failing) past [`RUN_LIMIT`].
fn run(task: &Path, workdir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.arg("run")
        .arg(task)
        .args(["--json", "--no-store", "--workdir"])
        .arg(workdir)
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        cmd.env(name, value);
    }
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > RUN_LIMIT {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("agentry did not exit within {RUN_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout:?}; stderr: {stderr}"));
    Ran {
        code: out.status.code().unwrap_or(-1),
        json,
        stderr,
    }
}

/// Issue 16, item 2, through the binary: a command tool unpacks an archive that
/// plants `.agentry/out/big.1.stdout` as a link to a file outside (no
/// `proc.run` granted); agentry saves call `big`'s large output there. The
/// outside file is untouched and the model reads the artifact by its reference.
#[test]
fn a_link_planted_by_an_unpacking_tool_does_not_redirect_an_artifact() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let staging = tmp.path().join("staging");
    std::fs::create_dir_all(staging.join(".agentry/out")).unwrap();
    std::os::unix::fs::symlink(&victim, staging.join(".agentry/out/big.1.stdout")).unwrap();
    let toml = r#"
goal = "unpack the payload, then print a lot"
[tools]
grant = ["unpack", "flood", "fs.read"]
[[tools.command]]
name = "unpack"
description = "Extract payload.tar here"
argv = ["tar", "-xf", "payload.tar"]
[[tools.command]]
name = "flood"
description = "Print a lot"
argv = ["sh", "-c", "yes agentry | head -c 100000"]
effect = "read_only"
"#;
    let script = r#"{"turns": [
        {"tool_calls": [{"id": "unpack", "name": "unpack", "arguments": {}}]},
        {"tool_calls": [{"id": "big", "name": "flood", "arguments": {}}]},
        {"tool_calls": [{"id": "read", "name": "fs.read", "arguments": {"path": ".agentry/out/big.1.stdout"}}]},
        {"tool_calls": [{"id": "finish", "name": "task.finish", "arguments": {"answer": "done"}}]}
    ]}"#;
    let task = task_dir(toml, script);
    std::fs::create_dir(task.path().join("workspace")).unwrap();
    let tar = Command::new("tar")
        .arg("-cf")
        .arg(task.path().join("workspace/payload.tar"))
        .arg("-C")
        .arg(&staging)
        .arg(".agentry")
        .status()
        .unwrap();
    assert!(tar.success());
    let workdir = tmp.path().join("run");
    let trace = tmp.path().join("trace.jsonl");

    let ran = run(
        task.path(),
        &workdir,
        &["--trace", trace.to_str().unwrap()],
        &[],
    );

    assert_eq!(ran.code, 0, "{} {}", ran.json, ran.stderr);
    let after = std::fs::read(&victim).unwrap();
    assert!(
        after == b"precious",
        "the file outside was overwritten ({} bytes)",
        after.len()
    );
    let artifact = workdir.join(".agentry/out/big.1.stdout");
    assert!(
        std::fs::symlink_metadata(&artifact)
            .unwrap()
            .file_type()
            .is_file()
    );
    assert_eq!(std::fs::metadata(&artifact).unwrap().len(), 100_000);
    let trace = std::fs::read_to_string(trace).unwrap();
    assert!(
        trace.contains(r#""bytes":100000"#),
        "the model read the artifact back"
    );
}
