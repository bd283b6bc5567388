//! Good runs: the seed's sum task end to end.

use agentry::protocol::state::SessionEntry;
use agentry::{Decision, Runtime, StopReason, ToolCall};
use agentry_test_support::{FnPolicy, Recording, ScriptBuilder, TestError, TestTask};
use serde_json::json;

#[tokio::test]
async fn sum_task_finishes_done_in_three_steps_and_writes_the_file() -> Result<(), TestError> {
    let task = TestTask::sum()?;
    let policy = ScriptBuilder::new()
        .call("c1", "fs.read", json!({"path": "numbers.txt"}))
        .call(
            "c2",
            "fs.write",
            json!({"path": "sum.txt", "content": "23"}),
        )
        .finish("sum=23")
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(outcome.steps, 3);
    assert_eq!(outcome.tool_calls, 3);
    assert_eq!(outcome.answer.as_deref(), Some("sum=23"));
    assert_eq!(task.read_file("sum.txt")?, "23");
    assert_eq!(outcome.checks.len(), 1);
    assert!(outcome.checks[0].passed, "{:?}", outcome.checks);
    assert!(outcome.state.task.done);
    assert_eq!(outcome.state.control.stop_reason, Some(StopReason::Done));
    // The world layer holds versioned references, not copies.
    let paths: Vec<&str> = outcome
        .state
        .world
        .refs
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(paths, ["numbers.txt", "sum.txt"]);
    assert_eq!(outcome.state.world.refs["sum.txt"].bytes, 2);
    Ok(())
}

/// The model computes the sum from what it was shown, not from a script: the
/// read's observation reaches the next decision intact.
#[tokio::test]
async fn a_policy_computes_the_sum_from_the_observation_it_was_shown() -> Result<(), TestError> {
    let task = TestTask::sum()?;
    let policy = FnPolicy::new(|ctx| {
        let read = ctx.session.iter().find_map(|e| {
            if let SessionEntry::Tool { result } = e
                && result.tool == "fs.read"
                && result.ok
            {
                result
                    .data
                    .as_ref()?
                    .get("content")?
                    .as_str()
                    .map(str::to_string)
            } else {
                None
            }
        });
        match (ctx.step, read) {
            (1, _) => Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    "read",
                    "fs.read",
                    json!({"path": "numbers.txt"}),
                )],
            },
            (2, Some(content)) => {
                let sum: i64 = content
                    .split_whitespace()
                    .filter_map(|n| n.parse::<i64>().ok())
                    .sum();
                Decision::ToolCalls {
                    calls: vec![ToolCall::new(
                        "write",
                        "fs.write",
                        json!({"path": "sum.txt", "content": sum.to_string()}),
                    )],
                }
            }
            _ => Decision::ToolCalls {
                calls: vec![ToolCall::new(
                    "fin",
                    "task.finish",
                    json!({"answer": "written"}),
                )],
            },
        }
    });
    let (policy, log) = Recording::new(policy);

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!(task.read_file("sum.txt")?, "23");
    assert_eq!(log.len(), 3);
    // The first thing the model sees is the goal, and nothing else.
    let first = log.step(1).ok_or("step 1 was never decided")?;
    assert_eq!(
        first.session,
        vec![SessionEntry::User {
            text: task.config().goal
        }]
    );
    Ok(())
}

#[tokio::test]
async fn a_task_without_checks_is_done_when_the_model_finishes() -> Result<(), TestError> {
    let task = TestTask::new("say hi", &[])?;
    let runtime = Runtime::with_builtins()?;

    let by_tool = runtime
        .run(task.config(), ScriptBuilder::new().finish("hi").policy())
        .await?;
    assert_eq!(by_tool.stop_reason, StopReason::Done, "{}", by_tool.detail);
    assert_eq!(by_tool.answer.as_deref(), Some("hi"));
    assert!(by_tool.checks.is_empty());

    let by_text = runtime
        .run(
            task.config(),
            ScriptBuilder::new().final_text("hi").policy(),
        )
        .await?;
    assert_eq!(by_text.stop_reason, StopReason::Done, "{}", by_text.detail);
    assert_eq!(by_text.answer.as_deref(), Some("hi"));
    assert_eq!(by_text.steps, 1);
    assert_eq!(by_text.tool_calls, 0);
    Ok(())
}

#[tokio::test]
async fn an_exhausted_script_is_an_unrecoverable_error_not_done() -> Result<(), TestError> {
    let task = TestTask::new("read", &[("a.txt", "a")])?;
    let policy = ScriptBuilder::new()
        .call("c1", "fs.read", json!({"path": "a.txt"}))
        .policy();

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(outcome.stop_reason, StopReason::UnrecoverableError);
    assert_eq!(outcome.steps, 2);
    assert!(outcome.detail.contains("exhausted"), "{}", outcome.detail);
    assert!(!outcome.state.task.done);
    Ok(())
}
