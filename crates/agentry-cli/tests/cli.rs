//! The `agentry` binary, run for real: exit codes, `--json`, `--trace`, and the
//! example task directories.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The workspace root: commands run from there, as the README shows them.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn agentry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Runs with `--json` and returns (exit code, the one JSON object on stdout).
fn agentry_json(args: &[&str]) -> (i32, Value) {
    let mut all = args.to_vec();
    all.push("--json");
    let out = agentry(&all);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {stdout:?}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), value)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A task directory with this task.toml and script.json.
fn task_dir(toml: &str, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.toml"), toml).unwrap();
    std::fs::write(dir.path().join("script.json"), script).unwrap();
    dir
}

#[test]
fn sum_finishes_done_in_three_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let (code, out) = agentry_json(&["run", "examples/sum", "--workdir", path_str(&workdir)]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["stop_reason"], "done");
    assert_eq!(out["task_id"], "sum");
    assert_eq!(out["steps"], 3);
    assert_eq!(out["tool_calls"], 3);
    assert_eq!(out["answer"], "sum=23");
    assert_eq!(out["trace"], Value::Null);
    for key in ["run_id", "detail", "checks", "budget"] {
        assert!(out.get(key).is_some(), "missing {key}: {out}");
    }
    let checks = out["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 2);
    assert!(checks.iter().all(|c| c["passed"] == true), "{out}");
    let reported = PathBuf::from(out["workdir"].as_str().unwrap());
    assert_eq!(reported, std::fs::canonicalize(&workdir).unwrap());
    let sum = std::fs::read_to_string(workdir.join("sum.txt")).unwrap();
    assert_eq!(sum.trim(), "23");
}

#[test]
fn human_summary_names_stop_reason_and_workdir() {
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let out = agentry(&["run", "examples/sum", "--workdir", path_str(&workdir)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("stop_reason  done"), "{text}");
    assert!(text.contains("steps        3"), "{text}");
    assert!(text.contains("answer       sum=23"), "{text}");
    let canonical = std::fs::canonicalize(&workdir).unwrap();
    assert!(text.contains(path_str(&canonical)), "{text}");
}

#[test]
fn stuck_stops_with_no_progress_long_before_max_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let workdir = tmp.path().join("run");
    let (code, out) = agentry_json(&["run", "examples/stuck", "--workdir", path_str(&workdir)]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["stop_reason"], "no_progress");
    // Step 1 reads into an empty world; steps 2-4 repeat the same action on the
    // same world with the same observation: the window of 3 is full at step 4.
    assert_eq!(out["steps"], 4);
    assert_eq!(out["budget"]["limits"]["max_steps"], 20);
}

#[test]
fn trace_is_jsonl_with_step_and_stop_records() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("traces/sum.jsonl");
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--workdir",
        path_str(&tmp.path().join("run")),
        "--trace",
        path_str(&trace),
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["trace"], path_str(&trace));
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 4, "{text}");
    let (last, steps) = lines.split_last().unwrap();
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step["kind"], "step");
        assert_eq!(step["run_id"], out["run_id"]);
        assert_eq!(step["step"], i as u64 + 1);
        for key in [
            "decision",
            "budget_before",
            "budget_after",
            "state_version",
            "fingerprint",
        ] {
            assert!(step.get(key).is_some(), "step {i} lacks {key}: {step}");
        }
        let results = step["results"].as_array().unwrap();
        assert_eq!(results.len(), 1);
        assert!(results[0]["tool_call_id"].is_string(), "{step}");
    }
    let ids: Vec<&Value> = steps
        .iter()
        .map(|s| &s["results"][0]["tool_call_id"])
        .collect();
    assert_eq!(ids, ["read", "write", "finish"]);
    assert_eq!(last["kind"], "stop");
    assert_eq!(last["stop_reason"], "done");
    assert_eq!(last["run_id"], out["run_id"]);
}

#[test]
fn max_steps_flag_overrides_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--max-steps",
        "1",
        "--workdir",
        path_str(&tmp.path().join("run")),
    ]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["stop_reason"], "max_steps");
    assert_eq!(out["steps"], 1);
}

#[test]
fn deadline_flag_overrides_the_task() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--deadline",
        "5s",
        "--workdir",
        path_str(&tmp.path().join("run")),
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["budget"]["limits"]["deadline_ms"], 5000);
}

#[test]
fn invalid_task_toml_exits_2_naming_file_and_field() {
    let dir = task_dir(
        "goal = \"x\"\n[budget]\nmax_steps = \"ten\"\n",
        r#"{"turns":[{"final":"x"}]}"#,
    );
    let out = agentry(&["run", path_str(dir.path()), "--json"]);
    assert_eq!(out.status.code(), Some(2));
    // With --json the error is also the one JSON object on stdout.
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["exit_code"], 2);
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("budget.max_steps")
    );
    let err = stderr(&out);
    assert!(
        err.contains(path_str(&dir.path().join("task.toml"))),
        "{err}"
    );
    assert!(
        err.contains("budget.max_steps: expected a positive integer, found \"ten\""),
        "{err}"
    );
}

#[test]
fn missing_task_dir_exits_2() {
    let out = agentry(&["run", "examples/no-such-task"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("examples/no-such-task"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_script_exits_2_naming_file_and_field() {
    let dir = task_dir(
        "goal = \"x\"\n",
        r#"{"turns":[{"tool_calls":[{"id":"a","arguments":{}}]}]}"#,
    );
    let out = agentry(&["run", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(path_str(&dir.path().join("script.json"))),
        "{err}"
    );
    assert!(err.contains("turns[0].tool_calls[0].name"), "{err}");
}

#[test]
fn missing_script_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("task.toml"), "goal = \"x\"\n").unwrap();
    let out = agentry(&["run", path_str(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(path_str(&dir.path().join("script.json"))),
        "{err}"
    );

    let out = agentry(&["run", "examples/sum", "--policy", "script:no/such.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no/such.json"), "{}", stderr(&out));
}

#[test]
fn policy_flag_takes_a_script_relative_to_the_current_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, out) = agentry_json(&[
        "run",
        "examples/sum",
        "--policy",
        "script:examples/stuck/script.json",
        "--workdir",
        path_str(&tmp.path().join("run")),
    ]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["stop_reason"], "no_progress");
}

#[test]
fn other_policy_schemes_exit_2() {
    let out = agentry(&["run", "examples/sum", "--policy", "gemini:x"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("openai:MODEL or anthropic:MODEL"), "{err}");
}

fn agentry_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentry"));
    cmd.args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn a_model_policy_without_its_key_exits_2_naming_the_variable() {
    for (policy, var) in [
        ("openai:m", "OPENAI_API_KEY"),
        ("anthropic:m", "ANTHROPIC_API_KEY"),
    ] {
        let out = agentry_env(
            &[
                "run",
                "examples/sum",
                "--policy",
                policy,
                "--base-url",
                "http://127.0.0.1:9",
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{policy}");
        let err = stderr(&out);
        assert!(err.contains(var), "{err}");
    }
}

#[test]
fn an_unreachable_or_https_model_server_exits_2_before_running() {
    // Port 9 (discard) on loopback: nothing listens there in CI.
    let out = agentry_env(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        &[("OPENAI_API_KEY", "k")],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("unreachable") && err.contains("127.0.0.1:9"),
        "{err}"
    );

    let out = agentry_env(
        &["run", "examples/sum", "--policy", "openai:m"],
        &[("OPENAI_API_KEY", "k")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("plain HTTP only"), "{}", stderr(&out));

    let out = agentry_env(
        &["run", "examples/sum", "--base-url", "http://127.0.0.1:9"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--base-url"), "{}", stderr(&out));
}

/// A one-thread HTTP/1.1 server on 127.0.0.1: GETs answer `{}`, each POST gets the
/// next SSE body and its JSON request body is recorded.
fn sse_server(bodies: Vec<String>) -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut bodies = bodies.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut first = String::new();
            reader.read_line(&mut first).unwrap();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let (kind, payload) = if first.starts_with("POST") {
                log.lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap());
                ("text/event-stream", bodies.next().unwrap_or_default())
            } else {
                ("application/json", "{}".to_string())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{payload}",
                payload.len()
            );
        }
    });
    (url, seen)
}

fn openai_call(id: &str, name: &str, args: &str) -> String {
    let call = serde_json::json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id,
        "type": "function", "function": {"name": name, "arguments": args}}]}, "finish_reason": "tool_calls"}]});
    let usage =
        serde_json::json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
    format!("data: {call}\n\ndata: {usage}\n\ndata: [DONE]\n\n")
}

#[test]
fn an_openai_policy_runs_the_sum_task_against_a_local_server() {
    let (url, seen) = sse_server(vec![
        openai_call("read", "fs_read", r#"{"path":"numbers.txt"}"#),
        openai_call("write", "fs_write", r#"{"path":"sum.txt","content":"23"}"#),
        openai_call("fin", "task_finish", r#"{"answer":"sum=23"}"#),
    ]);
    let tmp = tempfile::tempdir().unwrap();
    let out = agentry_env(
        &[
            "run",
            "examples/sum",
            "--policy",
            "openai:tiny",
            "--base-url",
            &url,
            "--workdir",
            path_str(&tmp.path().join("run")),
            "--json",
        ],
        &[("OPENAI_API_KEY", "k")],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout} {}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["stop_reason"], "done");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0]["model"], "tiny");
}

#[test]
fn a_non_empty_workdir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("leftover.txt"), "x").unwrap();
    let out = agentry(&["run", "examples/sum", "--workdir", path_str(tmp.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not empty"), "{}", stderr(&out));
}

fn listing(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(listing(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn runs_leave_the_task_workspace_alone_and_rerun() {
    let workspace = root().join("examples/sum/workspace");
    let before = listing(&workspace);
    let mut workdirs = Vec::new();
    // Default working directories: a fresh one per run.
    for _ in 0..2 {
        let (code, out) = agentry_json(&["run", "examples/sum"]);
        assert_eq!(code, 0, "{out}");
        workdirs.push(PathBuf::from(out["workdir"].as_str().unwrap()));
    }
    assert_ne!(workdirs[0], workdirs[1]);
    assert_eq!(listing(&workspace), before);
    for w in workdirs {
        assert!(w.join("sum.txt").is_file());
        std::fs::remove_dir_all(w).unwrap();
    }
}

/// Ctrl-c stops the run gracefully: `user_abort`, exit 1, the trace closed with a
/// stop record. The run is held in an acceptance command that sleeps.
#[cfg(unix)]
#[test]
fn ctrl_c_aborts_the_run_and_flushes_the_trace() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = task_dir(
        "goal = \"wait\"\n[[accept]]\ncommand = [\"sleep\", \"30\"]\ntimeout = \"60s\"\n",
        r#"{"turns":[{"final":"waited"}]}"#,
    );
    let tmp = tempfile::tempdir().unwrap();
    let trace = tmp.path().join("t.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args([
            "run",
            path_str(dir.path()),
            "--json",
            "--trace",
            path_str(&trace),
        ])
        .args(["--workdir", path_str(&tmp.path().join("run"))])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // "run started" is logged after the ctrl-c listener is installed.
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("run started") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr closed early");
    }
    let started = std::time::Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["stop_reason"], "user_abort");
    let text = std::fs::read_to_string(&trace).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["kind"], "stop");
    assert_eq!(last["stop_reason"], "user_abort");
}

#[test]
fn an_unwritable_trace_path_exits_2_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let blocker = tmp.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let trace = blocker.join("t.jsonl");
    let workdir = tmp.path().join("run");
    let out = agentry(&[
        "run",
        "examples/sum",
        "--trace",
        path_str(&trace),
        "--workdir",
        path_str(&workdir),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(path_str(&trace)), "{}", stderr(&out));
    // Refused before the working directory was made.
    assert!(!workdir.exists());
}

/// Runs are durable by default (`$AGENTRY_STORE`, else the temp dir): `agentry
/// runs` lists them and `agentry resume RUN_ID` needs no flag. An unusable
/// default store is reported, and the run goes on in memory.
#[test]
fn runs_are_stored_by_default_and_resume_needs_no_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("default.db");
    let with_store = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agentry"))
            .args(args)
            .current_dir(root())
            .env_remove("RUST_LOG")
            .env("AGENTRY_STORE", &store)
            .output()
            .unwrap()
    };
    let work = tmp.path().join("w");
    let out = with_store(&[
        "run",
        "examples/sum",
        "--run-id",
        "sum-default",
        "--workdir",
        path_str(&work),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("agentry resume sum-default"),
        "{}",
        stderr(&out)
    );
    let listed = with_store(&["runs", "--all", "--json"]);
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs[0]["run_id"], "sum-default");
    assert_eq!(runs[0]["stop_reason"], "done");
    let out = with_store(&["resume", "sum-default"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("already stopped (done)"),
        "{}",
        stderr(&out)
    );
    let out = with_store(&["resume", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("holds no run \"nope\""),
        "{}",
        stderr(&out)
    );

    // A default store that is not a store: a warning, and the run still runs.
    std::fs::write(&store, "not a database").unwrap();
    let out = with_store(&[
        "run",
        "examples/sum",
        "--workdir",
        path_str(&tmp.path().join("w2")),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not be resumable"),
        "{}",
        stderr(&out)
    );
    // Asked for explicitly, the same store is bad input.
    let out = with_store(&[
        "run",
        "examples/sum",
        "--store",
        path_str(&store),
        "--workdir",
        path_str(&tmp.path().join("w3")),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("corrupt"), "{}", stderr(&out));
    assert!(
        !tmp.path().join("w3").exists(),
        "bad input leaves nothing behind"
    );
}
