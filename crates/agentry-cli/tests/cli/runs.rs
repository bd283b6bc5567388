//! Stored runs: durable by default, listed by `agentry runs`, resumed with no flags.

use crate::*;

/// Runs are durable by default (`$AGENTRY_STORE`, else the state dir): `agentry
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

/// With no `--store` and no `$AGENTRY_STORE`, runs go to `runs.db` in the
/// user's state directory: `$XDG_STATE_HOME/agentry`, else
/// `$HOME/.local/state/agentry` (never the shared temp directory, where every
/// user's and checkout's runs would mix), and `agentry runs` finds them there.
#[test]
fn the_default_store_is_in_the_users_state_directory() {
    use agentry::Store as _;
    let tmp = tempfile::tempdir().unwrap();
    let (state, home) = (tmp.path().join("state"), tmp.path().join("home"));
    let run = |env: (&str, &Path), run_id: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentry"));
        command
            .args(["run", "examples/sum", "--run-id", run_id, "--workdir"])
            .arg(tmp.path().join(run_id))
            .current_dir(root())
            .env_remove("RUST_LOG")
            .env_remove("AGENTRY_STORE")
            .env_remove("XDG_STATE_HOME")
            .env("TMPDIR", tmp.path())
            .env(env.0, env.1);
        let out = command.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    };
    run(("XDG_STATE_HOME", &state), "in-state");
    run(("HOME", &home), "in-home");
    for (db, run_id) in [
        (state.join("agentry/runs.db"), "in-state"),
        (home.join(".local/state/agentry/runs.db"), "in-home"),
    ] {
        let runs = agentry::SqliteStore::open(&db).unwrap().runs().unwrap();
        let ids: Vec<&str> = runs.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, [run_id], "{}", db.display());
    }
    assert!(
        !tmp.path().join("agentry/runs.db").exists(),
        "nothing stored in the temp directory"
    );
}

/// `agentry runs` with nothing unfinished says so on stderr and points at
/// `--all` (it used to print nothing at all); stdout stays empty, or `[]` with
/// `--json`. An empty store says it is empty.
#[test]
fn runs_with_nothing_unfinished_says_so_and_points_at_all() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("s.db");
    let runs = |args: &[&str]| {
        let mut all = vec!["runs", "--store", path_str(&store)];
        all.extend_from_slice(args);
        agentry(&all)
    };
    agentry::SqliteStore::open(&store).unwrap();
    let out = runs(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    assert_eq!(
        stderr(&out),
        format!("agentry: no runs in {}\n", store.display())
    );

    let out = agentry(&[
        "run",
        "examples/sum",
        "--store",
        path_str(&store),
        "--workdir",
        path_str(&tmp.path().join("w")),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = runs(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    assert_eq!(
        stderr(&out),
        format!(
            "agentry: no unfinished runs in {} (1 finished; agentry runs --all lists them)\n",
            store.display()
        )
    );
    let out = runs(&["--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[]\n");
    assert!(
        stderr(&out).contains("agentry runs --all"),
        "{}",
        stderr(&out)
    );
    let out = runs(&["--all"]);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("done"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
