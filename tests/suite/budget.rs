//! Budgets and termination: a looping model is stopped, and step max+1 never runs.

use std::sync::Arc;

use agentry::{Decision, ErrorCode, Runtime, StopReason, ToolCall};
use agentry_test_support::{
    CountingTool, FnPolicy, ScriptBuilder, TestError, TestTask, run_with_events, runtime_with,
    tool_results,
};
use serde_json::json;

/// The seed's failure case: a policy that keeps reading the same file.
fn stuck_policy() -> agentry::ScriptedPolicy {
    ScriptBuilder::new()
        .call("c1", "fs.read", json!({"path": "numbers.txt"}))
        .repeat_last()
        .policy()
}

/// A model that calls `tool` once per step, with a fresh call id each time.
fn call_every_step(tool: &'static str, per_step: usize) -> FnPolicy {
    FnPolicy::new(move |ctx| Decision::ToolCalls {
        calls: (0..per_step)
            .map(|i| ToolCall::new(format!("s{}-{i}", ctx.step), tool, json!({})))
            .collect(),
    })
}

#[tokio::test]
async fn a_looping_policy_is_stopped_by_max_steps() -> Result<(), TestError> {
    let task = TestTask::sum()?.max_steps(4).window(0);

    let outcome = Runtime::with_builtins()?
        .run(task.config(), stuck_policy())
        .await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::MaxSteps,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 4);
    assert_eq!(outcome.budget.spent.steps, 4);
    assert_eq!(outcome.budget.remaining.steps_left, Some(0));
    assert_eq!(outcome.answer, None);
    Ok(())
}

#[tokio::test]
async fn a_looping_policy_is_stopped_by_no_progress_long_before_max_steps() -> Result<(), TestError>
{
    let task = TestTask::sum()?.max_steps(50).window(3);

    let outcome = Runtime::with_builtins()?
        .run(task.config(), stuck_policy())
        .await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::NoProgress,
        "{}",
        outcome.detail
    );
    // Step 1 brings numbers.txt into the world; steps 2-4 are identical and fill
    // the window.
    assert_eq!(
        outcome.steps, 4,
        "three identical steps after the first fill the window"
    );
    Ok(())
}

/// Fresh call ids do not hide a loop: the fingerprint leaves ids out.
#[tokio::test]
async fn no_progress_sees_through_fresh_call_ids() -> Result<(), TestError> {
    let task = TestTask::sum()?.max_steps(50).window(4);
    let policy = FnPolicy::new(|ctx| Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("read-{}", ctx.step),
            "fs.read",
            json!({"path": "numbers.txt"}),
        )],
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::NoProgress,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 5);
    Ok(())
}

/// Steps that make progress (each writes new content) are not `no_progress`.
#[tokio::test]
async fn steps_that_change_the_world_are_progress() -> Result<(), TestError> {
    let task = TestTask::new("count up", &[])?
        .grant(&["fs.write"])
        .max_steps(6)
        .window(2);
    let policy = FnPolicy::new(|ctx| Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("w{}", ctx.step),
            "fs.write",
            json!({"path": "n.txt", "content": ctx.step.to_string()}),
        )],
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::MaxSteps,
        "{}",
        outcome.detail
    );
    assert_eq!(task.read_file("n.txt")?, "6");
    Ok(())
}

#[tokio::test]
async fn step_max_plus_one_is_refused_never_run() -> Result<(), TestError> {
    let tool = CountingTool::new("count");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("count forever", &[])?
        .grant(&["count"])
        .max_steps(5)
        .window(0);

    // The policy is asked only for granted steps: the spend and the decision
    // go out as one request, and a refused one never reaches the policy.
    let asked = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let count = Arc::clone(&asked);
    let policy = FnPolicy::new(move |ctx| {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Decision::ToolCalls {
            calls: vec![ToolCall::new(format!("s{}", ctx.step), "count", json!({}))],
        }
    });
    let (outcome, events) = run_with_events(&runtime, task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::MaxSteps,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 5);
    assert_eq!(
        executions.get(),
        5,
        "the tool ran once per granted step, never a 6th time"
    );
    assert_eq!(outcome.state.control.spent.steps, 5);
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 5);
    let started: Vec<u64> = events
        .iter()
        .filter_map(|e| {
            if let agentry::protocol::event::RunEvent::StepStarted { step } = e.event {
                Some(step)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(
        started,
        [1, 2, 3, 4, 5],
        "no StepStarted for the refused step"
    );
    Ok(())
}

#[tokio::test]
async fn calls_past_the_tool_call_budget_are_ebudget_and_stop_the_run() -> Result<(), TestError> {
    let tool = CountingTool::new("count");
    let executions = tool.counter();
    let runtime = runtime_with(vec![Arc::new(tool)])?;
    let task = TestTask::new("count in pairs", &[])?
        .grant(&["count"])
        .max_tool_calls(3)
        .window(0);

    let (outcome, events) =
        run_with_events(&runtime, task.config(), call_every_step("count", 2)).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::MaxToolCalls,
        "{}",
        outcome.detail
    );
    assert_eq!(executions.get(), 3);
    assert_eq!(outcome.steps, 2);
    assert_eq!(outcome.tool_calls, 3);
    let results = tool_results(&events);
    let seen: Vec<(u64, &str, Option<ErrorCode>)> = results
        .iter()
        .map(|(step, r)| (*step, r.tool_call_id.as_str(), r.error_code()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, "s1-0", None),
            (1, "s1-1", None),
            (2, "s2-0", None),
            (2, "s2-1", Some(ErrorCode::Ebudget)),
        ]
    );
    Ok(())
}

/// A refused step spends nothing: the budget after the stop is the budget of the
/// last step that ran.
#[tokio::test]
async fn a_refused_step_spends_nothing() -> Result<(), TestError> {
    let task = TestTask::sum()?.max_steps(2).window(0);

    let outcome = Runtime::with_builtins()?
        .run(task.config(), stuck_policy())
        .await?;

    assert_eq!(outcome.stop_reason, StopReason::MaxSteps);
    assert_eq!(outcome.budget.spent.steps, 2);
    assert_eq!(outcome.budget.spent.tool_calls, 2);
    Ok(())
}

/// A model repeating the same invalid call is looping too.
#[tokio::test]
async fn repeating_the_same_invalid_call_is_no_progress() -> Result<(), TestError> {
    let task = TestTask::sum()?.max_steps(50).window(3);
    let policy = FnPolicy::new(|ctx| Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("bad-{}", ctx.step),
            "fs.read",
            json!({"file": "numbers.txt"}),
        )],
    });

    let outcome = Runtime::with_builtins()?.run(task.config(), policy).await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::NoProgress,
        "{}",
        outcome.detail
    );
    assert_eq!(outcome.steps, 3);
    Ok(())
}
