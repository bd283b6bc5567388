//! Acceptance checks against hostile files at the checked path: a FIFO, a
//! huge sparse file, a link.

use super::*;

/// A task whose model runs `setup` with `proc.run`, then finishes, and whose
/// only check is `check`.
async fn finish_after(setup: &str, check: AcceptCheck) -> Result<agentry::RunOutcome, TestError> {
    finish_after_with(setup, check, None).await
}

/// [`finish_after`] with a larger `[sandbox] file_size` when given.
async fn finish_after_with(
    setup: &str,
    check: AcceptCheck,
    file_size: Option<agentry::sandbox::ByteSize>,
) -> Result<agentry::RunOutcome, TestError> {
    let task = TestTask::new("set up, then finish", &[])?
        .grant(&["proc.run"])
        .accept(check);
    let policy = ScriptBuilder::new()
        .call("setup", "proc.run", json!({"argv": ["sh", "-c", setup]}))
        .finish("done")
        .policy();
    // Bounded: a check that blocks the host (the bug) fails here, it does not hang.
    let runtime = Runtime::with_builtins()?;
    let mut config = task.config();
    if file_size.is_some() {
        config.sandbox.file_size = file_size;
    }
    let run = runtime.run(config, policy);
    let outcome = tokio::time::timeout(Duration::from_secs(60), run).await;
    if outcome.is_err() {
        // Unblock a reader stuck on the FIFO, so the test process can exit.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(task.workdir().join("out.txt"));
    }
    Ok(outcome.map_err(|_| "the run did not finish within 60 s")??)
}

fn file_check(file: &str) -> AcceptCheck {
    AcceptCheck::File {
        file: file.to_string(),
        equals: Some("x".to_string()),
        contains: None,
    }
}

/// Issue 16, item 3: a FIFO at the checked path fails the check at once instead
/// of blocking the host forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_at_an_acceptance_path_fails_the_check() -> Result<(), TestError> {
    let outcome = finish_after("mkfifo out.txt", file_check("out.txt")).await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert_eq!(
        outcome.checks[0].detail,
        "out.txt: not a regular file (a FIFO)"
    );
    Ok(())
}

/// A 1.5 GB sparse file fails the check by its size, unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_sparse_file_at_an_acceptance_path_fails_unread() -> Result<(), TestError> {
    // Past the sandbox's default 1 GiB file size: that much is granted.
    let outcome = finish_after_with(
        "truncate -s 1500M out.txt",
        file_check("out.txt"),
        Some(agentry::sandbox::ByteSize(2 << 30)),
    )
    .await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert_eq!(
        outcome.checks[0].detail,
        "out.txt: too large: 1572864000 bytes, at most 16777216 are read"
    );
    Ok(())
}

/// A link at the checked path is not followed, whether to `/dev/zero` or to a
/// file inside with the right content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_at_an_acceptance_path_fails_the_check() -> Result<(), TestError> {
    let outcome = finish_after("ln -s /dev/zero out.txt", file_check("out.txt")).await?;
    assert!(!outcome.checks[0].passed);
    assert_eq!(outcome.checks[0].detail, "out.txt: is a symbolic link");
    let outcome = finish_after("echo x > real; ln -s real out.txt", file_check("out.txt")).await?;
    assert_eq!(outcome.checks[0].detail, "out.txt: is a symbolic link");
    Ok(())
}
