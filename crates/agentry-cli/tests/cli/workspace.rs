//! The working directory: a non-empty one refused, the task's workspace left
//! alone, ctrl-c aborting a run and closing its trace.

use crate::*;

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
    let mut child = agentry_command()
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
