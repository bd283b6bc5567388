//! Stored runs: durable by default, listed by `agentry runs`, resumed with no flags.

use crate::*;

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
