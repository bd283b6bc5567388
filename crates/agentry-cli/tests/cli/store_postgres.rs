//! `--store postgres://…` (and `$AGENTRY_STORE`): runs stored in a
//! PostgreSQL database, listed, resumed and counted from it, on the test
//! harness's private server; a server that cannot be reached is exit 2
//! naming it, never its password.

use crate::*;

/// The binary, with `AGENTRY_STORE` set to `store`.
fn agentry(store: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(args)
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env("AGENTRY_STORE", store)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_run_stored_in_postgres_is_listed_counted_and_known_to_resume() {
    let url = agentry_test_postgres::PgServer::shared().database();
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("w");
    // `--store URL` on the command line.
    let out = agentry(
        "",
        &[
            "run",
            "examples/sum",
            "--store",
            &url,
            "--run-id",
            "sum-pg",
            "--workdir",
            path_str(&work),
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // `$AGENTRY_STORE` naming the same database.
    let listed = agentry(&url, &["runs", "--all", "--json"]);
    assert_eq!(listed.status.code(), Some(0), "{}", stderr(&listed));
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs[0]["run_id"], "sum-pg", "{runs}");
    assert_eq!(runs[0]["stop_reason"], "done", "{runs}");
    let out = agentry(&url, &["resume", "sum-pg"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("already stopped (done)"),
        "{}",
        stderr(&out)
    );
    let stats = agentry(&url, &["stats", "--json"]);
    assert_eq!(stats.status.code(), Some(0), "{}", stderr(&stats));
    let report: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert!(report.to_string().contains("sum"), "{report}");
    // Nothing of the password reaches a message.
    let password = url.split(':').nth(2).unwrap().split('@').next().unwrap();
    for out in [&listed, &stats] {
        assert!(!stderr(out).contains(password), "{}", stderr(out));
    }
}

#[test]
fn an_unreachable_postgres_store_is_exit_2_naming_it_without_the_password() {
    // Port 1 on loopback: nothing listens there.
    let url = "postgres://agentry:s3cret@127.0.0.1:1/runs";
    for args in [
        &["runs", "--store", url][..],
        &["run", "examples/sum", "--store", url][..],
        &["stats", "--store", url][..],
    ] {
        let out = agentry("", args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("postgres://agentry@127.0.0.1:1/runs"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("s3cret"), "{args:?}: {err}");
    }
}
