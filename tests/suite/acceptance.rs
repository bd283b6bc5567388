//! `done` is the host's call: finishing without passing the acceptance checks is
//! `verification_missing`, whichever way the model finishes.

use agentry::{Runtime, StopReason};
use agentry_test_support::{ScriptBuilder, TestError, TestTask};
use serde_json::json;

#[tokio::test]
async fn finishing_by_tool_without_the_file_is_verification_missing() -> Result<(), TestError> {
    let task = TestTask::sum()?;
    let policy = ScriptBuilder::new().finish("sum=23").policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert_eq!(
        outcome.answer.as_deref(),
        Some("sum=23"),
        "the claim is kept"
    );
    assert!(!outcome.state.task.done);
    assert_eq!(outcome.checks.len(), 1);
    assert!(!outcome.checks[0].passed);
    assert!(
        outcome.checks[0].detail.contains("sum.txt"),
        "{:?}",
        outcome.checks
    );
    Ok(())
}

#[tokio::test]
async fn finishing_by_final_text_with_a_wrong_file_is_verification_missing() -> Result<(), TestError>
{
    let task = TestTask::sum()?;
    let policy = ScriptBuilder::new()
        .call("w", "fs.write", json!({"path": "sum.txt", "content": "24"}))
        .final_text("the sum is 23, trust me")
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 2);
    assert!(outcome.detail.contains("24"), "{}", outcome.detail);
    Ok(())
}

#[tokio::test]
async fn a_failing_command_check_is_verification_missing() -> Result<(), TestError> {
    let task = TestTask::new("anything", &[])?.accept_command(&["sh", "-c", "exit 3"]);

    let outcome = Runtime::with_builtins()?
        .run(task.config(), ScriptBuilder::new().finish("done").policy())
        .await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::VerificationMissing,
        "{}",
        outcome.detail
    );
    assert!(!outcome.checks[0].passed);
    Ok(())
}

#[tokio::test]
async fn a_passing_command_check_runs_in_the_workdir_and_gives_done() -> Result<(), TestError> {
    let task = TestTask::sum()?.accept_command(&["sh", "-c", "test \"$(cat sum.txt)\" = 23"]);
    let policy = ScriptBuilder::new()
        .call("w", "fs.write", json!({"path": "sum.txt", "content": "23"}))
        .finish("sum=23")
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.checks.len(), 2);
    assert!(
        outcome.checks.iter().all(|c| c.passed),
        "{:?}",
        outcome.checks
    );
    Ok(())
}

/// A failed `task.finish` (bad arguments) is not a finish at all: the run goes on.
#[tokio::test]
async fn a_rejected_finish_call_does_not_end_the_run() -> Result<(), TestError> {
    let task = TestTask::new("say hi", &[])?;
    let policy = ScriptBuilder::new()
        .call(
            "f1",
            "task.finish",
            json!({"answer": "hi", "confidence": 1.0}),
        )
        .finish("hi")
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 2);
    Ok(())
}
