//! Security tests against the real binary: see `tests/security.rs`. Hostile
//! task files and flags, a planted store in the shared temp directory, and a
//! run resumed while its first process still runs it.

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

/// `agentry ARGS` from the workspace root, with a private temp dir, its
/// state directory (the default store's) in [`state_home`] of it, and no
/// store from the environment.
fn agentry(args: &[&str], tmp: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("AGENTRY_STORE")
        .env("TMPDIR", tmp)
        .env("XDG_STATE_HOME", state_home(tmp))
        .output()
        .unwrap()
}

/// `XDG_STATE_HOME` for a test whose temp dir is `tmp`.
fn state_home(tmp: &Path) -> PathBuf {
    tmp.join("state")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The one JSON object on stdout.
fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {:?}; stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A task directory: the sum example's task.toml plus `extra`, its script and
/// workspace.
fn sum_task(extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let example = root().join("examples/sum");
    let toml = std::fs::read_to_string(example.join("task.toml")).unwrap();
    std::fs::write(dir.path().join("task.toml"), format!("{toml}\n{extra}\n")).unwrap();
    std::fs::copy(example.join("script.json"), dir.path().join("script.json")).unwrap();
    std::fs::create_dir(dir.path().join("workspace")).unwrap();
    std::fs::copy(
        example.join("workspace/numbers.txt"),
        dir.path().join("workspace/numbers.txt"),
    )
    .unwrap();
    dir
}

// ---------------------------------------------------------------------------
// Issue 16 item 9: a tick period that overflowed the clock.
// ---------------------------------------------------------------------------

/// `[driver] every = "9999999999999999999s"` panicked the run (exit 1, no
/// JSON). Now: exit 2, the error names the file, the field and the bound, and
/// under `--json` stdout holds one JSON object saying so.
#[test]
fn a_huge_tick_period_is_a_clean_error_with_json() {
    let tmp = tempfile::tempdir().unwrap();
    let task = sum_task("[driver]\nevery = \"9999999999999999999s\"");
    let out = agentry(
        &["run", path_str(task.path()), "--json", "--no-store"],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let report = json(&out);
    let error = report["error"].as_str().unwrap();
    assert!(error.contains("task.toml"), "{error}");
    assert!(error.contains("driver.every: at most 365 days"), "{error}");
    assert_eq!(report["exit_code"], 2);
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------
// Issue 16 item 11: the smaller ones.
// ---------------------------------------------------------------------------

/// A trace that cannot be written is an error: exit 4, a message naming the
/// file; the run's report still comes out, with `trace_error`.
#[test]
fn a_trace_that_cannot_be_written_exits_4_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(Path::new("/dev/full").exists(), "this test needs /dev/full");
    let out = agentry(
        &[
            "run",
            "examples/sum",
            "--no-store",
            "--trace",
            "/dev/full",
            "--json",
        ],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the trace /dev/full could not be written"),
        "{err}"
    );
    let report = json(&out);
    assert_eq!(report["stop_reason"], "done");
    assert!(
        report["trace_error"]
            .as_str()
            .is_some_and(|e| e.contains("No space left")),
        "{report}"
    );
}

/// `--run-id` refuses ids that are empty, blank or read as paths (exit 2,
/// naming the id), before anything runs.
#[test]
fn empty_blank_and_path_run_ids_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("runs.db");
    for id in ["", "   ", "a/b", "../up", "a b", ".."] {
        let out = agentry(
            &[
                "run",
                "examples/sum",
                "--store",
                path_str(&store),
                "--run-id",
                id,
            ],
            tmp.path(),
        );
        assert_eq!(out.status.code(), Some(2), "{id:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("--run-id") && err.contains("is not usable"),
            "{id:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
    assert!(!store.exists(), "nothing ran, nothing was stored");
}

/// `max_cost = 1e20` was refused as "expected a positive number"; the message
/// now gives the real bound. Counts past the bound name it too, and a float
/// where an integer belongs is shown as the float it is (u64::MAX through a
/// JSON double is 1.8446744073709552e19, never "18446744073709552000").
#[test]
fn numbers_past_their_bound_are_refused_with_the_real_bound_printed_exactly() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        (
            "max_cost = 1e20",
            "budget.max_cost: at most 1000000000000 (money is counted in millionths), found 1e20",
        ),
        (
            "max_steps = 1.8446744073709552e19",
            "budget.max_steps: expected a positive integer, found 1.8446744073709552e19",
        ),
        (
            "max_tokens = 9223372036854775807",
            "budget.max_tokens: at most 9007199254740991, found 9223372036854775807",
        ),
    ];
    for (line, want) in cases {
        let task = tempfile::tempdir().unwrap();
        std::fs::write(
            task.path().join("task.toml"),
            format!("goal = \"g\"\n[budget]\n{line}\n"),
        )
        .unwrap();
        std::fs::write(task.path().join("script.json"), r#"{"turns":[]}"#).unwrap();
        let out = agentry(&["run", path_str(task.path()), "--no-store"], tmp.path());
        assert_eq!(out.status.code(), Some(2), "{line}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains(want), "{line}: {err}");
        assert!(!err.contains("18446744073709552000"), "{err}");
    }
    // Within the bound, a large amount is taken and reported exactly.
    let task = sum_task("");
    let toml = std::fs::read_to_string(task.path().join("task.toml")).unwrap();
    std::fs::write(
        task.path().join("task.toml"),
        toml.replace(
            "max_steps = 8",
            "max_steps = 9007199254740991\nmax_cost = 1e9",
        ),
    )
    .unwrap();
    let out = agentry(
        &["run", path_str(task.path()), "--no-store", "--json"],
        tmp.path(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"max_steps\":9007199254740991"), "{text}");
    assert!(
        text.contains("\"max_cost_micros\":1000000000000000"),
        "{text}"
    );
}

/// `agentry runs --store DIR` said "no such file"; it says the path is a
/// directory, not a store file.
#[test]
fn runs_on_a_directory_says_it_is_a_directory() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [
        vec!["runs", "--store", path_str(tmp.path())],
        vec!["resume", "x", "--store", path_str(tmp.path())],
    ] {
        let out = agentry(&args, tmp.path());
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(
            err.contains("it is a directory, not a store file"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("no such file"), "{err}");
    }
}

// ---------------------------------------------------------------------------
// Issue 16 item 7: `agentry resume` while the first process still runs it.
// ---------------------------------------------------------------------------

/// A task whose one call appends a line to ledger.txt and then holds until a
/// `go` file appears or its agentry process is gone (a non-idempotent call
/// caught in flight).
fn held_append_task(dir: &Path) {
    let toml = r#"goal = "append one line"
[budget]
max_steps = 5
deadline = "120s"
[tools]
grant = ["ledger.append"]
[[tools.command]]
name = "ledger.append"
description = "Append a line to ledger.txt, then hold"
argv = ["sh", "-c", "printf '%s\n' \"$1\" >> ledger.txt; i=0; while [ ! -e go ] && [ $i -lt 5000 ]; do sleep 0.02; i=$((i+1)); done", "sh", "{line}"]
input_schema = { type = "object", properties = { line = { type = "string" } }, required = ["line"] }
timeout = "100s"
[[accept]]
file = "ledger.txt"
equals = "a"
"#;
    std::fs::write(dir.join("task.toml"), toml).unwrap();
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [
            {"tool_calls": [{"id": "a1", "name": "ledger.append", "arguments": {"line": "a"}}]},
            {"tool_calls": [{"id": "fin", "name": "task.finish", "arguments": {"answer": "appended"}}]}
        ]}"#,
    )
    .unwrap();
}

/// Polls `what` every 10 ms until it holds; fails after 60 s.
fn wait_until(why: &str, mut what: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !what() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {why}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// No process has `dir` as its working directory any more.
fn nothing_runs_in(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap();
    !std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|cwd| cwd == dir))
}

/// Two real processes: while `agentry run` is inside its non-idempotent call,
/// `agentry resume` of the same run exits 2 naming that process and since
/// when, and runs nothing (it used to run the run a second time). After the
/// first process is SIGKILLed, the same resume takes over: the call is parked
/// for a decision, settled, and the run ends `done` with the line written once.
#[test]
fn resume_is_refused_while_the_first_process_runs_it_and_takes_over_after_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("task");
    std::fs::create_dir(&task).unwrap();
    held_append_task(&task);
    let store = tmp.path().join("runs.db");
    let workdir = tmp.path().join("work");
    let mut first = Command::new(bin())
        .args(["run", path_str(&task), "--store", path_str(&store)])
        .args([
            "--workdir",
            path_str(&workdir),
            "--run-id",
            "own-1",
            "--json",
        ])
        .env_remove("RUST_LOG")
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let ledger = || std::fs::read_to_string(workdir.join("ledger.txt")).unwrap_or_default();
    wait_until("the first process is inside its call", || ledger() == "a\n");

    let resume = |extra: &[&str]| {
        let mut args = vec!["resume", "own-1", "--store", path_str(&store), "--json"];
        args.extend_from_slice(extra);
        agentry(&args, tmp.path())
    };
    let refused = resume(&[]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(
        err.contains(&format!("is being run by process {}", first.id())),
        "{err}"
    );
    assert!(err.contains(" since 20"), "{err}");
    let report = json(&refused);
    assert_eq!(report["exit_code"], 2);
    assert_eq!(ledger(), "a\n", "the refused resume ran nothing");
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first process still runs"
    );

    // SIGKILL: the owner record stays behind, with a fresh heartbeat.
    first.kill().unwrap();
    first.wait().unwrap();
    wait_until("the killed run's tool is gone", || {
        nothing_runs_in(&workdir)
    });
    let took_over = resume(&["--decide", "a1=happened"]);
    assert_eq!(took_over.status.code(), Some(0), "{}", stderr(&took_over));
    assert_eq!(json(&took_over)["stop_reason"], "done");
    assert_eq!(ledger(), "a\n", "the call ran once");
}

// ---------------------------------------------------------------------------
// Issue 16 item 10: agentry's directory in the shared temp directory; issue 32:
// the default store in the user's state directory, under the same rules.
// ---------------------------------------------------------------------------

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// `dir` planted as a link to a directory of another user's: each command
/// exits 2 refusing `dir`, and nothing is written through the link.
#[cfg(unix)]
fn refused_through_a_link(tmp: &Path, dir: &Path, commands: &[&[&str]]) {
    let theirs = tmp.join("theirs");
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&theirs, dir).unwrap();
    for args in commands {
        let out = agentry(args, tmp);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("refusing {}", dir.display())) && err.contains("symbolic link"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&theirs).unwrap().count(),
        0,
        "nothing written there"
    );
    std::fs::remove_file(dir).unwrap();
}

/// Another local user plants `<tmp>/agentry` as a link to a directory of
/// theirs before agentry first runs: agentry used to follow it and write its
/// store (every tool output of every run) and working directories there. Now
/// it refuses, naming the path, and writes nothing through the link.
#[cfg(unix)]
#[test]
fn a_planted_link_in_the_shared_temp_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // The default working directory is under it.
    refused_through_a_link(
        tmp.path(),
        &tmp.path().join("agentry"),
        &[&["run", "examples/sum", "--no-store"]],
    );
}

/// The same for the default store's directory, `$XDG_STATE_HOME/agentry`
/// (a misconfigured or shared state directory), and for `runs.db` in it.
#[cfg(unix)]
#[test]
fn a_planted_link_in_the_state_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = state_home(tmp.path()).join("agentry");
    refused_through_a_link(
        tmp.path(),
        &dir,
        &[&["run", "examples/sum"], &["runs"], &["resume", "x"]],
    );

    // Our own directory, but runs.db in it is a link: refused too.
    std::fs::create_dir(&dir).unwrap();
    let victim = tmp.path().join("victim.db");
    std::os::unix::fs::symlink(&victim, dir.join("runs.db")).unwrap();
    let out = agentry(&["run", "examples/sum"], tmp.path());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("runs.db: it is a symbolic link"),
        "{}",
        stderr(&out)
    );
    assert!(!victim.exists(), "nothing created through the link");
}

/// The default store's directory (the state directory's `agentry`, its
/// missing parents too) and agentry's temp directory are created 0700 (an
/// existing one of ours is tightened) and the store file 0600, whatever the
/// umask; the working directory stays in the temp directory.
#[cfg(unix)]
#[test]
fn the_default_directory_and_store_are_private() {
    let tmp = tempfile::tempdir().unwrap();
    let out = agentry(&["run", "examples/sum", "--json"], tmp.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let state = state_home(tmp.path());
    let dir = state.join("agentry");
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("runs.db")), 0o600);
    let temp = tmp.path().join("agentry");
    assert_eq!(mode(&temp), 0o700);
    let workdir = PathBuf::from(json(&out)["workdir"].as_str().unwrap());
    assert!(workdir.starts_with(std::fs::canonicalize(&temp).unwrap()));

    // An open directory from an older agentry is made private on the next run.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = agentry(&["runs", "--all", "--json"], tmp.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(json(&out).as_array().unwrap().len(), 1);
    assert_eq!(mode(&dir), 0o700);
}
