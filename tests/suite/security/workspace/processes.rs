//! Processes that try to outlive their call or their acceptance check, and
//! acceptance commands' output.

use agentry_test_support::procs::{Sleepers, alive_with_cmdline, unique_secs};

use super::*;

/// Polls until none of `argvs` runs; after 5 s kills the survivors (so a failed
/// test leaves nothing behind) and fails naming them.
async fn assert_none_alive(argvs: &[&[&str]]) -> Result<(), TestError> {
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
            return Ok(());
        }
        if Instant::now() > deadline {
            for (_, pid) in &alive {
                let _ = std::process::Command::new("kill")
                    .arg("-9")
                    .arg(pid.to_string())
                    .status();
            }
            let named: Vec<_> = alive.iter().map(|(i, pid)| (argvs[*i], pid)).collect();
            return Err(format!("survived the run: {named:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Fails unless every sleeper in `names` wrote its pid: one that never ran
/// would pass [`assert_none_alive`] without proving anything.
fn assert_all_ran(sleepers: &Sleepers, names: &[&str]) -> Result<(), TestError> {
    let missing: Vec<&&str> = names
        .iter()
        .filter(|name| sleepers.pid(name).is_none())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!("never ran (no pidfile): {missing:?}").into())
    }
}

/// Issue 16, item 6: a tool's process that leaves the group (`setsid`) dies
/// with the call, even after its leader exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_process_that_left_the_group_dies_with_the_call() -> Result<(), TestError> {
    reap_orphans_here()?;
    let (a, b, c) = (unique_secs(7122), unique_secs(7123), unique_secs(7124));
    let s = Sleepers::new()?;
    let task = TestTask::new("escape the group", &[])?.grant(&["proc.run"]);
    let p1 = format!("setsid {} & {}", s.start("a", &a), s.wait_for(&["a"]));
    let p2 = format!(
        "setsid sh -c '{} & exec {}' & {}",
        s.start("c", &c),
        s.start("b", &b),
        s.wait_for(&["b", "c"])
    );
    let policy = ScriptBuilder::new()
        .call("p1", "proc.run", json!({"argv": ["sh", "-c", p1]}))
        .call("p2", "proc.run", json!({"argv": ["sh", "-c", p2]}))
        .finish("done")
        .policy();

    // The pidfiles are outside the working directory: granted, nothing more.
    let mut config = task.config();
    config.sandbox.write = vec![s.dir().to_path_buf()];
    let outcome = Runtime::with_builtins()?.run(config, policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_all_ran(&s, &["a", "b", "c"])?;
    assert_none_alive(&[&["sleep", &a], &["sleep", &b], &["sleep", &c]]).await
}

/// Issue 16, item 6: an acceptance command's background process dies with the
/// check (in the group or out of it), and the check is judged by its exit
/// status, not timed out waiting for the background process's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceptance_commands_processes_die_with_the_check() -> Result<(), TestError> {
    reap_orphans_here()?;
    let (a, b) = (unique_secs(7177), unique_secs(7178));
    let s = Sleepers::new()?;
    let in_group = format!("{} & {}; exit 0", s.start("a", &a), s.wait_for(&["a"]));
    let escaped = format!(
        "setsid {} & {}; exit 0",
        s.start("b", &b),
        s.wait_for(&["b"])
    );
    let task = TestTask::new("check", &[])?
        .accept(AcceptCheck::Command {
            argv: vec!["sh".into(), "-c".into(), in_group],
            timeout_ms: 60_000,
        })
        .accept(AcceptCheck::Command {
            argv: vec!["sh".into(), "-c".into(), escaped],
            timeout_ms: 60_000,
        });
    let started = Instant::now();
    // The pidfiles are outside the working directory: granted, nothing more.
    let mut config = task.config();
    config.sandbox.write = vec![s.dir().to_path_buf()];

    let outcome = Runtime::with_builtins()?
        .run(config, ScriptBuilder::new().finish("done").policy())
        .await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::Done,
        "{:?}",
        outcome.checks
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_all_ran(&s, &["a", "b"])?;
    assert_none_alive(&[&["sleep", &a], &["sleep", &b]]).await
}

/// An acceptance command's output is capped like a tool's: 50 MB on stderr goes
/// to an artifact on disk, the check's detail keeps a short head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acceptance_commands_output_is_capped() -> Result<(), TestError> {
    let task = TestTask::new("check", &[])?.accept(AcceptCheck::Command {
        argv: vec![
            "sh".into(),
            "-c".into(),
            "head -c 50000000 /dev/zero | tr '\\0' e >&2; exit 1".into(),
        ],
        timeout_ms: 60_000,
    });

    let outcome = Runtime::with_builtins()?
        .run(task.config(), ScriptBuilder::new().finish("done").policy())
        .await?;

    assert_eq!(outcome.stop_reason, StopReason::VerificationMissing);
    let detail = &outcome.checks[0].detail;
    assert!(
        detail.starts_with("command failed (exit status: 1): eee"),
        "{detail}"
    );
    assert!(detail.len() < 300, "{}", detail.len());
    let artifact = task.workdir().join(".agentry/out/accept-1.1.stderr");
    assert_eq!(std::fs::metadata(artifact)?.len(), 50_000_000);
    Ok(())
}
