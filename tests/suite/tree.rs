//! Agent trees, driven through the embedding API: budgets carved down the tree,
//! charged up it, released back; deadlines clamped; cancellation of a subtree.
//! The budget algebra's property (a tree never overspends its root, under
//! concurrent reservations, spends, charges, releases and ends) is a unit test
//! of the budget supervisor: `agentry-runtime/src/budget/tests/tree.rs`.

use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::event::RunEvent;
use agentry::{Decision, Grants, Runtime, RuntimeError, StopReason, ToolCall};
use agentry_test_support::{
    FnPolicy, GateTool, HangingTool, ScriptBuilder, TestError, TestTask, runtime_with,
    wait_for_event,
};
use serde_json::json;

/// The envelope of call `id` among a run's finished calls.
fn result_of(
    results: &[(u64, agentry::ResultEnvelope)],
    id: &str,
) -> Result<agentry::ResultEnvelope, String> {
    results
        .iter()
        .find(|(_, r)| r.tool_call_id == id)
        .map(|(_, r)| r.clone())
        .ok_or(format!("no result for {id}"))
}

/// Runs a parent to `done` (asserted) and returns its outcome and its finished
/// calls.
async fn run_done(
    runtime: &Runtime,
    config: agentry::RunConfig,
    policy: impl agentry::Policy,
) -> Result<(agentry::RunOutcome, Vec<(u64, agentry::ResultEnvelope)>), TestError> {
    let (outcome, events) = agentry_test_support::run_with_events(runtime, config, policy).await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let results = agentry_test_support::tool_results(&events);
    Ok((outcome, results))
}

fn looping(name: &'static str) -> FnPolicy {
    FnPolicy::new(move |ctx| Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("{name}-{}", ctx.step),
            "hang",
            json!({}),
        )],
    })
}

/// The child's budget is carved from the parent, charged back up, and what it did
/// not use is released when it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_carved_charged_up_and_released() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let parent_task = TestTask::new("plan", &[])?.max_steps(10);
    let mut parent_config = parent_task.config();
    parent_config.driver = agentry::Driver::Events; // the parent idles while we drive children
    let parent = runtime
        .start(
            parent_config,
            FnPolicy::new(|_| Decision::Final {
                answer: "ok".into(),
            }),
        )
        .await?;

    // Asking for more than the parent has is refused, naming the dimension.
    let greedy = TestTask::new("too much", &[])?.max_steps(11);
    let err = runtime
        .start_child(
            &parent,
            greedy.config(),
            ScriptBuilder::new().finish("x").policy(),
        )
        .await
        .err()
        .ok_or("expected a refusal")?;
    assert!(matches!(err, RuntimeError::ChildRefused { .. }), "{err}");
    assert!(err.to_string().contains("steps"), "{err}");

    // A child asking for 6 steps uses 2: a read, then the finish.
    let child_task = TestTask::new("sub-task", &[("a.txt", "1")])?.max_steps(6);
    let child = runtime
        .start_child(
            &parent,
            child_task.config(),
            ScriptBuilder::new()
                .call("r", "fs.read", json!({"path": "a.txt"}))
                .finish("done")
                .policy(),
        )
        .await?;
    assert_eq!(child.parent_id(), Some(parent.run_id()));
    let outcome = child.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    assert_eq!((outcome.steps, outcome.tool_calls), (2, 2));
    assert_eq!(outcome.budget.limits.max_steps, Some(6));
    // Charged up: the parent, idle itself, has spent exactly what the child did.
    let snap = parent.budget().await.ok_or("no parent budget")?;
    assert_eq!(snap.spent, outcome.budget.spent);
    assert_eq!((snap.spent.steps, snap.spent.tool_calls), (2, 2));
    // Released: the child's stop returned its 4 unused steps before its outcome
    // was published, so 8 of the 10 steps are free again, of which the parent
    // keeps 2 to wait and finish: 7 never fit, 6 do.
    let quick = || ScriptBuilder::new().finish("ok").policy();
    let seven = TestTask::new("seven", &[])?.max_steps(7);
    let err = runtime
        .start_child(&parent, seven.config(), quick())
        .await
        .err()
        .ok_or("a child of 7 steps fit after 2 were spent of 10 and 2 kept")?;
    assert!(
        err.to_string()
            .contains("steps: the child asked for 7 but only 6 are available"),
        "{err}"
    );
    let six = TestTask::new("six", &[])?.max_steps(6);
    let all_left = runtime.start_child(&parent, six.config(), quick()).await?;
    all_left.wait().await?;
    parent.abort();
    Ok(())
}

/// Grants, depth and fan-out limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_never_hold_more_than_their_parent() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let parent_task = TestTask::new("plan", &[])?.grant(&["fs.read"]);
    let mut config = parent_task.config();
    config.driver = agentry::Driver::Events;
    config.tree.max_depth = 1;
    config.tree.max_children = 1;
    let idle = || {
        FnPolicy::new(|_| Decision::Final {
            answer: "ok".into(),
        })
    };
    let parent = runtime.start(config, idle()).await?;

    let wider_task = TestTask::new("write", &[])?.max_steps(5);
    let mut wider = wider_task.config();
    wider.grants = Grants::new(["fs.*"]);
    let err = runtime
        .start_child(&parent, wider, idle())
        .await
        .err()
        .ok_or("expected a refusal")?;
    assert!(err.to_string().contains("fs.*"), "{err}");

    let child_task = TestTask::new("read", &[])?.max_steps(5);
    let mut child_config = child_task.config();
    child_config.driver = agentry::Driver::Events;
    let (two, deep) = (
        TestTask::new("two", &[])?.max_steps(5),
        TestTask::new("deep", &[])?.max_steps(1),
    );
    let child = runtime.start_child(&parent, child_config, idle()).await?;
    let err = runtime
        .start_child(&parent, two.config(), idle())
        .await
        .err()
        .ok_or("fan-out")?;
    assert!(err.to_string().contains("max_children"), "{err}");
    let err = runtime
        .start_child(&child, deep.config(), idle())
        .await
        .err()
        .ok_or("depth")?;
    assert!(err.to_string().contains("max_depth"), "{err}");
    parent.abort();
    let outcome = child.wait().await?;
    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "aborting a parent stops its subtree"
    );
    Ok(())
}

/// A child asking for a longer deadline is clamped; when the root's deadline
/// passes every descendant stops with `deadline` and its tools are cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_roots_deadline_stops_the_whole_tree() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let dropped = hang.dropped();
    let runtime = runtime_with(vec![Arc::new(hang)])?;
    let root_task = TestTask::new("root", &[])?
        .grant(&["hang"])
        .deadline_ms(400);
    let root = runtime.start(root_task.config(), looping("root")).await?;
    let child_task = TestTask::new("child", &[])?
        .grant(&["hang"])
        .max_steps(10)
        .deadline_ms(60_000);
    let child = runtime
        .start_child(&root, child_task.config(), looping("child"))
        .await?;
    let grandchild_task = TestTask::new("grandchild", &[])?
        .grant(&["hang"])
        .max_steps(5);
    let grandchild = runtime
        .start_child(&child, grandchild_task.config(), looping("grandchild"))
        .await?;

    let outcomes = tokio::time::timeout(Duration::from_secs(5), async {
        Ok::<_, RuntimeError>((
            root.wait().await?,
            child.wait().await?,
            grandchild.wait().await?,
        ))
    })
    .await??;

    let child_deadline = outcomes
        .1
        .budget
        .limits
        .deadline_ms
        .ok_or("no child deadline")?;
    assert!(
        child_deadline <= 400,
        "clamped to the parent's: {child_deadline}"
    );
    for o in [&outcomes.0, &outcomes.1, &outcomes.2] {
        assert_eq!(
            o.stop_reason,
            StopReason::Deadline,
            "{}: {}",
            o.task_id,
            o.detail
        );
    }
    assert_eq!(
        dropped.get(),
        3,
        "every hanging tool in the tree was cancelled"
    );
    Ok(())
}

/// Aborting a middle node stops its subtree and leaves its sibling and the
/// parent running: the sibling takes a further step after the abort, charged
/// to the parent, which still counts it as its live child (and no longer the
/// middle node, seen through the fan-out limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborting_a_middle_node_stops_its_subtree_only() -> Result<(), TestError> {
    let hang = HangingTool::new("hang");
    let (gate, mut held) = GateTool::new("gate");
    let runtime = runtime_with(vec![Arc::new(hang.clone()), Arc::new(gate)])?;
    // The tasks own the working directories: they live as long as the test.
    let [root_t, mid_t, leaf_t] = ["root", "mid", "leaf"]
        .map(|goal| TestTask::new(goal, &[]).map(|t| t.grant(&["hang"]).max_steps(10)));
    let (mid_t, leaf_t) = (mid_t?, leaf_t?);
    let root_t = root_t?.grant(&["hang", "gate"]);
    let sib_t = TestTask::new("sibling", &[])?
        .grant(&["gate"])
        .max_steps(10);
    let root_t = root_t.max_steps(50);
    let mut root_config = root_t.config();
    root_config.tree.max_children = 2;
    let root = runtime.start(root_config, looping("root")).await?;
    let mid = runtime
        .start_child(&root, mid_t.config(), looping("mid"))
        .await?;
    let leaf = runtime
        .start_child(&mid, leaf_t.max_steps(5).config(), looping("leaf"))
        .await?;
    // The sibling calls the gate at every step: it steps when the test says.
    let through_gate = FnPolicy::new(|ctx| Decision::ToolCalls {
        calls: vec![ToolCall::new(
            format!("sibling-{}", ctx.step),
            "gate",
            json!({}),
        )],
    });
    let sibling = runtime
        .start_child(&root, sib_t.config(), through_gate)
        .await?;
    let mut sibling_events = sibling.subscribe();
    let wait = Duration::from_secs(10);
    // Root, mid and leaf hang in their first step; the sibling's waits at the gate.
    hang.wait_started(3, wait).await?;
    let first = held.next_call(wait).await?;

    mid.abort();
    let (mid_out, leaf_out) = tokio::time::timeout(wait, async {
        Ok::<_, RuntimeError>((mid.wait().await?, leaf.wait().await?))
    })
    .await??;
    assert_eq!(mid_out.stop_reason, StopReason::UserAbort);
    assert_eq!(leaf_out.stop_reason, StopReason::UserAbort);

    // The sibling goes on: its call returns, its step 2 starts and reaches the gate.
    let spent_before = root.budget().await.ok_or("the root is gone")?.spent;
    assert!(
        first.release(json!({})),
        "the sibling's first call was dropped"
    );
    wait_for_event(
        &mut sibling_events,
        |r| matches!(r.event, RunEvent::StepStarted { step: 2 }),
        wait,
    )
    .await?;
    let second = held.next_call(wait).await?;
    assert_eq!(second.call_id, "sibling-2");
    assert!(sibling.outcome().is_none(), "the sibling still runs");
    assert!(root.outcome().is_none(), "the parent still runs");
    // The parent was charged the sibling's step 2 and still counts it (mid's
    // reservation went back when mid stopped).
    let spent_after = root.budget().await.ok_or("the root is gone")?.spent;
    assert_eq!(spent_after.steps, spent_before.steps + 1);
    one_live_child_of_two(&runtime, &root, "gate").await?;

    root.abort();
    let sib = tokio::time::timeout(wait, sibling.wait()).await??;
    assert_eq!(sib.stop_reason, StopReason::UserAbort);
    Ok(())
}

/// `parent`, under a fan-out of 2, counts exactly one live child: one more
/// child fits and a second does not. The probe children hold `grant`.
async fn one_live_child_of_two(
    runtime: &Runtime,
    parent: &agentry::RunHandle,
    grant: &str,
) -> Result<(), TestError> {
    let idle = || {
        FnPolicy::new(|_| Decision::Final {
            answer: "ok".into(),
        })
    };
    let probe_t = TestTask::new("probe", &[])?.grant(&[grant]).max_steps(1);
    let probe_config = || {
        let mut config = probe_t.config();
        config.driver = agentry::Driver::Events; // idles: it never steps
        config
    };
    let probe = runtime.start_child(parent, probe_config(), idle()).await?;
    let err = runtime
        .start_child(parent, probe_config(), idle())
        .await
        .err()
        .ok_or("a third child fit under a fan-out of 2")?;
    assert!(err.to_string().contains("already runs 2 children"), "{err}");
    probe.abort();
    tokio::time::timeout(Duration::from_secs(10), probe.wait()).await??;
    Ok(())
}

/// A model delegates with `agent.spawn` / `agent.wait`: a child's failure comes back
/// as an observation; a budget the parent cannot cover is refused as `EBUDGET`;
/// grants wider than the parent's as `EPERM`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_delegates_through_agent_tools() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("delegate", &[("a.txt", "1")])?
        .grant(&["fs.read", "agent"])
        .max_steps(10);
    let looping_child = json!({"turns": [{"tool_calls": [{"id": "r", "name": "fs.read", "arguments": {"path": "a.txt"}}]}], "then": "repeat_last"});
    let policy = ScriptBuilder::new()
        .call("s1", "agent.spawn", json!({"name": "reader", "goal": "read forever", "budget": {"max_steps": 2}, "script": looping_child}))
        .and_call("s2", "agent.spawn", json!({"name": "greedy", "goal": "too big", "budget": {"max_steps": 50}, "script": {"turns": [{"final": "x"}]}}))
        .and_call("s3", "agent.spawn", json!({"name": "writer", "goal": "write", "budget": {"max_steps": 1}, "grant": ["fs.write"], "script": {"turns": [{"final": "x"}]}}))
        .call("w1", "agent.wait", json!({"child_id": "reader"}))
        .finish("delegated")
        .policy();

    let (outcome, results) = run_done(&runtime, task.config(), policy).await?;
    let by_id = |id: &str| result_of(&results, id);
    assert!(by_id("s1")?.ok);
    assert_eq!(by_id("s2")?.error_code(), Some(agentry::ErrorCode::Ebudget));
    assert_eq!(by_id("s3")?.error_code(), Some(agentry::ErrorCode::Eperm));
    let waited = by_id("w1")?;
    assert!(
        waited.ok,
        "a child's failure is an observation, not an error"
    );
    let data = waited.data.unwrap_or_default();
    assert_eq!(data["stop_reason"], "max_steps");
    assert_eq!(data["name"], "reader");
    assert!(data["why"].is_string(), "a failed child says why: {data}");
    assert!(data["left_to_delegate"]["max_steps"].is_u64(), "{data}");
    // The child's two steps were charged to the parent.
    assert_eq!(outcome.budget.spent.steps, outcome.steps + 2);
    Ok(())
}

/// A step's own tool calls count against the parent before any child is carved in
/// that step: the conductor's tally is booked by the supervisor ahead of the
/// reservation, so two spawns in one step see both calls spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_carved_mid_step_sees_that_steps_tool_calls() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("delegate", &[])?
        .grant(&["agent"])
        .max_steps(4)
        .max_tool_calls(6);
    let done = json!({"turns": [{"final": "x"}]});
    let policy = ScriptBuilder::new()
        .call(
            "s1",
            "agent.spawn",
            json!({"name": "big", "goal": "g", "budget": {"max_tool_calls": 3, "max_steps": 1}, "script": done}),
        )
        .and_call(
            "s2",
            "agent.spawn",
            json!({"name": "fits", "goal": "g", "budget": {"max_tool_calls": 1, "max_steps": 1}, "script": done}),
        )
        .finish("delegated")
        .policy();

    let (outcome, results) = run_done(&runtime, task.config(), policy).await?;
    let by_id = |id: &str| result_of(&results, id);
    // 2 spent by this step and 2 kept by the parent leave 2 of 6: 3 asked does not
    // fit, 1 does (and the finish call has its reserve, whether or not the
    // child has ended and released its share).
    assert_eq!(by_id("s1")?.error_code(), Some(agentry::ErrorCode::Ebudget));
    assert!(by_id("s2")?.ok, "{:?}", by_id("s2")?.error);
    // The two spawns and the finish call.
    assert_eq!(outcome.budget.spent.tool_calls, 3);
    Ok(())
}

/// A child carved from outside while its parent's model decides a step cannot
/// take the tool calls that step goes on to make: the parent's tool-call limit
/// holds for the whole tree. (The conductor used to grant its calls against the
/// figure its step's spend reported, which the reservation made meanwhile had
/// already given away: the tree made 7 calls against a limit of 4.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_carved_while_its_parent_decides_cannot_take_that_steps_calls()
-> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("parent", &[("a.txt", "1")])?
        .max_steps(4)
        .max_tool_calls(4);
    let (deciding_tx, deciding_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let mut held = Some((deciding_tx, go_rx));
    let read = |id: String| ToolCall::new(id, "fs.read", json!({"path": "a.txt"}));
    // Step 1 decides three reads once the test lets it; step 2 finishes.
    let policy = FnPolicy::from_async(move |ctx| {
        let gate = held.take();
        let step = ctx.step;
        Box::pin(async move {
            if let Some((deciding, go)) = gate {
                let _ = deciding.send(());
                let _ = go.await;
            }
            match step {
                1 => Decision::ToolCalls {
                    calls: (1..=3).map(|i| read(format!("r{i}"))).collect(),
                },
                _ => Decision::ToolCalls {
                    calls: vec![ToolCall::new(
                        "f",
                        agentry::tools::FINISH_TOOL,
                        json!({"answer": "read"}),
                    )],
                },
            }
        })
    });
    let parent = runtime.start(task.config(), policy).await?;
    tokio::time::timeout(Duration::from_secs(10), deciding_rx).await??;

    // Step 1 is granted and its model deciding: a child asking for all the calls
    // the parent can give (4 left, 2 kept) gets them, and makes them.
    let child_task = TestTask::new("child", &[("a.txt", "1")])?
        .max_steps(1)
        .max_tool_calls(2);
    let reads = ScriptBuilder::new()
        .calls((1..=4).map(|i| read(format!("c{i}"))).collect())
        .policy();
    let child = runtime
        .start_child(&parent, child_task.config(), reads)
        .await?;
    let child_out = tokio::time::timeout(Duration::from_secs(10), child.wait()).await??;
    assert_eq!(child_out.budget.limits.max_tool_calls, Some(2));
    assert_eq!(child_out.tool_calls, 2, "{}", child_out.detail);

    let _ = go_tx.send(());
    let parent_out = tokio::time::timeout(Duration::from_secs(10), parent.wait()).await??;
    assert_eq!(
        parent_out.budget.spent.tool_calls, 4,
        "the tree's tool calls against the root's limit of 4"
    );
    // Its reserve of 2 goes to its own step (3 reads asked), none to its finish.
    assert_eq!(
        parent_out.tool_calls, 2,
        "the parent's step got its reserve"
    );
    assert_eq!(
        parent_out.stop_reason,
        StopReason::MaxToolCalls,
        "{}",
        parent_out.detail
    );
    Ok(())
}
