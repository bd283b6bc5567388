//! Security tests against the real binary: see `tests/security.rs`. This
//! module: the workspace — agentry's artifact writes, acceptance checks against
//! hostile files, acceptance commands' environment, processes that try to
//! outlive the run.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentry_test_support::procs::{Sleepers, alive_with_cmdline, unique_secs};
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

fn details(ran: &Ran) -> Vec<String> {
    ran.json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["detail"].as_str().unwrap().to_string())
        .collect()
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

/// Issue 16, item 3, through the binary: a FIFO, a link to `/dev/zero` and a
/// 1.5 GB sparse file at acceptance paths each fail their check with a clear
/// message, and the CLI exits (it hung forever on the FIFO).
#[test]
fn hostile_files_at_acceptance_paths_fail_their_checks_and_the_cli_exits() {
    let toml = r#"
goal = "leave hostile files behind"
[tools]
grant = ["proc.run"]
# Past the sandbox's default 1 GiB file size: that much is granted.
[sandbox]
file_size = "2GiB"
[[accept]]
file = "fifo.txt"
equals = "x"
[[accept]]
file = "zero.txt"
equals = "x"
[[accept]]
file = "sparse.txt"
equals = "x"
"#;
    let script = r#"{"turns": [
        {"tool_calls": [{"id": "p", "name": "proc.run", "arguments": {"argv": ["sh", "-c",
            "mkfifo fifo.txt && ln -s /dev/zero zero.txt && truncate -s 1500M sparse.txt"]}}]},
        {"tool_calls": [{"id": "finish", "name": "task.finish", "arguments": {"answer": "done"}}]}
    ]}"#;
    let task = task_dir(toml, script);
    let tmp = tempfile::tempdir().unwrap();

    let ran = run(task.path(), &tmp.path().join("run"), &[], &[]);

    assert_eq!(ran.code, 1, "{} {}", ran.json, ran.stderr);
    assert_eq!(ran.json["stop_reason"], "verification_missing");
    assert_eq!(
        details(&ran),
        [
            "fifo.txt: not a regular file (a FIFO)",
            "zero.txt: is a symbolic link",
            "sparse.txt: too large: 1572864000 bytes, at most 16777216 are read",
        ]
    );
}

/// Issue 16, item 5, through the binary: an acceptance command the model
/// shaped (here: a Makefile-like script it wrote) cannot print the host's
/// secrets into the check's detail or the trace; allowlisted variables still
/// reach it.
#[test]
fn acceptance_commands_do_not_see_the_hosts_secrets() {
    let toml = r#"
goal = "write check.sh"
[tools]
grant = ["fs.write"]
[[accept]]
command = ["sh", "check.sh"]
"#;
    let script = r#"{"turns": [
        {"tool_calls": [{"id": "w", "name": "fs.write", "arguments": {"path": "check.sh",
            "content": "echo \"key=[$OPENAI_API_KEY] other=[$AGENTRY_TEST_SECRET] lang=[$LANG]\" >&2; exit 1"}}]},
        {"tool_calls": [{"id": "finish", "name": "task.finish", "arguments": {"answer": "done"}}]}
    ]}"#;
    let task = task_dir(toml, script);
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("trace.jsonl");
    let secret = "sk-secret-7f3a91";

    let ran = run(
        task.path(),
        &tmp.path().join("run"),
        &["--trace", trace.to_str().unwrap()],
        &[
            ("OPENAI_API_KEY", secret),
            ("AGENTRY_TEST_SECRET", secret),
            ("LANG", "C.UTF-8"),
        ],
    );

    assert_eq!(ran.code, 1, "{} {}", ran.json, ran.stderr);
    assert_eq!(
        details(&ran),
        ["command failed (exit status: 1): key=[] other=[] lang=[C.UTF-8]"]
    );
    assert!(!ran.json.to_string().contains(secret));
    assert!(!std::fs::read_to_string(trace).unwrap().contains(secret));
}

/// Fails naming the survivors if any of `argvs` still runs 5 s after the run,
/// killing them all first, so a failed test leaves nothing behind.
fn assert_none_alive(argvs: &[&[&str]]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let alive: Vec<(usize, i32)> = argvs
            .iter()
            .enumerate()
            .flat_map(|(i, argv)| {
                alive_with_cmdline(argv)
                    .into_iter()
                    .map(move |pid| (i, pid))
            })
            .collect();
        if alive.is_empty() {
            return;
        }
        if Instant::now() > deadline {
            for (_, pid) in &alive {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            }
            let named: Vec<_> = alive.iter().map(|(i, pid)| (argvs[*i], pid)).collect();
            panic!("survived the run: {named:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue 16, item 6, through the binary: a tool's `setsid` child and an
/// acceptance command's background child do not outlive the run, and the
/// check passes on its exit status instead of timing out.
#[test]
fn processes_that_leave_the_group_do_not_outlive_the_run() {
    let (tool, a, b) = (unique_secs(7222), unique_secs(7277), unique_secs(7278));
    let s = Sleepers::new().unwrap();
    let command = format!(
        "{} & setsid {} & {}; exit 0",
        s.start("a", &a),
        s.start("b", &b),
        s.wait_for(&["a", "b"])
    );
    let toml = format!(
        r#"
goal = "leave processes behind"
[tools]
grant = ["proc.run"]
# The pidfiles are outside the working directory: granted, nothing more.
[sandbox]
write = [{dir:?}]
[[accept]]
command = "{command}"
timeout = "60s"
"#,
        dir = s.dir().display().to_string()
    );
    let call = format!(
        "setsid {} & {}",
        s.start("tool", &tool),
        s.wait_for(&["tool"])
    );
    let script = serde_json::json!({"turns": [
        {"tool_calls": [{"id": "p", "name": "proc.run", "arguments": {"argv": ["sh", "-c", call]}}]},
        {"tool_calls": [{"id": "finish", "name": "task.finish", "arguments": {"answer": "done"}}]}
    ]});
    let task = task_dir(&toml, &script.to_string());
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();

    let ran = run(task.path(), &tmp.path().join("run"), &[], &[]);

    assert_eq!(ran.code, 0, "{} {}", ran.json, ran.stderr);
    assert_eq!(details(&ran), ["command exited 0"]);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // Each ran (wrote its pid), so that none alive proves they were killed.
    for name in ["tool", "a", "b"] {
        assert!(s.pid(name).is_some(), "{name} never ran");
    }
    assert_none_alive(&[&["sleep", &tool], &["sleep", &a], &["sleep", &b]]);
}
