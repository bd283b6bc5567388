//! `--store postgres://…` (and `$AGENTRY_STORE`): runs stored in a
//! PostgreSQL database, listed, resumed and counted from it, on the test
//! harness's private server; a server that cannot be reached is exit 2
//! naming it, never its password.

use serde_json::json;

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

/// The Postgres server restarts while a run is in its steps: the run's
/// writes wait for it and the run goes on to the end.
#[test]
#[ignore = "needs PostgreSQL (Debian's postgresql package); .ci/run runs it"]
fn a_run_waits_through_a_postgres_restart_and_finishes() {
    let pg = agentry_test_postgres::PgServer::start();
    let url = pg.database();
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("task");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("task.toml"),
        "goal = \"wait three times\"\n[budget]\nmax_steps = 10\n[tools]\ngrant = [\"pause\"]\n\
         [progress]\nwindow = 0\n\
         [[tools.command]]\nname = \"pause\"\ndescription = \"wait a moment\"\n\
         argv = [\"sleep\", \"0.7\"]\nidempotency = \"idempotent\"\ntimeout = \"30s\"\n",
    )
    .unwrap();
    let turns: Vec<Value> = (1..=3)
        .map(|i| json!({"tool_calls": [{"id": format!("p{i}"), "name": "pause", "arguments": {}}]}))
        .chain([json!({"final": "done"})])
        .collect();
    std::fs::write(
        task.join("script.json"),
        json!({ "turns": turns }).to_string(),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_agentry"))
        .args(["run", path_str(&task), "--store", &url, "--workdir"])
        .arg(tmp.path().join("w"))
        .current_dir(root())
        .env_remove("RUST_LOG")
        .env_remove("AGENTRY_STORE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Into its first call: the run has written to the store.
    std::thread::sleep(std::time::Duration::from_millis(300));
    pg.stop();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    pg.start_again();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = agentry(&url, &["runs", "--all", "--json"]);
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs[0]["stop_reason"], "done", "{runs}");
    // It went on after the server came back (the restart took 1.5 s).
    let lasted =
        runs[0]["updated_at_ms"].as_u64().unwrap() - runs[0]["created_at_ms"].as_u64().unwrap();
    assert!(lasted >= 1500, "{runs}");
}
