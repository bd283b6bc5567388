//! Policy failures are state, not exceptions.

use agentry::protocol::state::SessionEntry;
use agentry::{Decision, PolicyOutput, Runtime, StopReason, ToolCall};
use agentry_test_support::{FnPolicy, Recording, TestError, TestTask};
use serde_json::json;

fn finish(id: &str) -> Decision {
    Decision::ToolCalls {
        calls: vec![ToolCall::new(id, "task.finish", json!({"answer": "ok"}))],
    }
}

/// A non-fatal policy failure (a model timeout, unparseable output) or an empty
/// call list is recorded as the step's decision alone — no tool result, since no
/// call was made for one to answer — which the next step sees as a host note.
#[tokio::test]
async fn a_non_fatal_policy_failure_is_an_observation_and_the_run_goes_on() -> Result<(), TestError>
{
    let task = TestTask::new("answer", &[])?;
    let (policy, log) = Recording::new(FnPolicy::new(|ctx| match ctx.step {
        1 => Decision::Failed {
            message: "model timed out".into(),
            fatal: false,
        },
        2 => Decision::ToolCalls { calls: Vec::new() },
        _ => finish("f"),
    }));

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 3);
    let seen = log.step(2).ok_or("step 2 was never decided")?;
    let last = seen.session.last().ok_or("empty session")?;
    assert!(
        matches!(last, SessionEntry::Assistant { step: 1, .. }),
        "step 2 saw {last:?} last"
    );
    let note = last.host_note().ok_or("a failed turn is a host note")?;
    assert!(note.contains("model timed out"), "{note}");
    let seen = log.step(3).ok_or("step 3 was never decided")?;
    let last = seen.session.last().ok_or("empty session")?;
    assert!(
        matches!(last, SessionEntry::Assistant { step: 2, .. }) && last.host_note().is_some(),
        "an empty call list is a host note too: {last:?}"
    );
    assert!(
        !seen
            .session
            .iter()
            .any(|e| matches!(e, SessionEntry::Tool { .. })),
        "no tool result answers a call never made: {:?}",
        seen.session
    );
    Ok(())
}

#[tokio::test]
async fn a_fatal_policy_failure_is_unrecoverable_error() -> Result<(), TestError> {
    let task = TestTask::new("answer", &[])?;
    let policy = FnPolicy::new(|_| Decision::Failed {
        message: "the provider rejected our credentials".into(),
        fatal: true,
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::UnrecoverableError);
    assert!(outcome.detail.contains("credentials"), "{}", outcome.detail);
    Ok(())
}

/// A policy that panics takes down only its actor: the run ends
/// `unrecoverable_error` instead of hanging or crashing the embedder.
#[tokio::test]
async fn a_panicking_policy_ends_the_run_unrecoverable_error() -> Result<(), TestError> {
    let task = TestTask::new("answer", &[])?;
    #[allow(clippy::panic, reason = "the policy under test panics on purpose")]
    let policy = FnPolicy::new(|_| panic!("policy bug"));

    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        Runtime::with_builtins()?.run(task.config(), policy),
    )
    .await
    .map_err(|_| "the run hung after its policy panicked")??;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UnrecoverableError,
        "{}",
        outcome.detail
    );
    Ok(())
}

/// Tokens are only known after a turn, so the turn that reaches the limit runs and
/// the next one is refused.
#[tokio::test]
async fn the_token_budget_refuses_the_turn_after_the_limit() -> Result<(), TestError> {
    let task = TestTask::new("chat", &[("a.txt", "a")])?
        .max_tokens(100)
        .window(0);
    let policy = FnPolicy::from_output(|ctx| {
        let mut out = PolicyOutput::new(
            Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    format!("r{}", ctx.step),
                    "fs.read",
                    json!({"path": "a.txt"}),
                )],
            },
            "",
        );
        out.usage.tokens_in = 40;
        out.usage.tokens_out = 10;
        out
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::MaxTokens,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 2);
    assert_eq!(outcome.budget.spent.tokens_in, 80);
    assert_eq!(outcome.budget.spent.tokens_out, 20);
    Ok(())
}

#[tokio::test]
async fn a_zero_step_budget_never_asks_the_policy() -> Result<(), TestError> {
    let task = TestTask::new("nothing", &[])?.max_steps(0).trace();
    let (policy, log) = Recording::new(FnPolicy::new(|_| finish("f")));

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::MaxSteps);
    assert_eq!(outcome.steps, 0);
    assert!(log.is_empty());
    let trace = task.read_trace()?;
    assert_eq!(trace.len(), 1);
    assert_eq!(trace[0]["stop_reason"], "max_steps");
    Ok(())
}
