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

/// `agentry ARGS` from the workspace root, with a private temp dir and no
/// store from the environment.
fn agentry(args: &[&str], tmp: &Path) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("AGENTRY_STORE")
        .env("TMPDIR", tmp)
        .output()
        .unwrap()
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
