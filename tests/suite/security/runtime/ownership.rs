//! Issue 16 item 7: a run resumed while it still runs (run ownership).

use std::sync::Arc;
use std::time::Duration;

use agentry::store::{RunOwner, Write};
use agentry::{Durability, Effect, Grants, Runtime, RuntimeError, SqliteStore, StopReason, Store};
use agentry_test_support::{GateTool, ScriptBuilder, TestError, TestTask, runtime_with};
use serde_json::json;

use super::WAIT;

/// A durable runtime on `db` with a read-only gate tool `look` (so a
/// resumed run may run the call again) and its handle.
fn gated(db: &std::path::Path) -> Result<(Runtime, agentry_test_support::GateHandle), TestError> {
    let (gate, held) = GateTool::new("look");
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(db)?);
    let runtime = runtime_with(vec![Arc::new(gate.effect(Effect::ReadOnly))])?
        .with_store(store, Durability::Strict)?;
    Ok((runtime, held))
}

fn look_then_finish() -> ScriptBuilder {
    ScriptBuilder::new()
        .call("l1", "look", json!({}))
        .finish("looked")
}

fn task(id: &str) -> Result<TestTask, TestError> {
    Ok(TestTask::new("look once", &[])?.grant(&["look"]).run_id(id))
}

fn owner_of(db: &std::path::Path, run_id: &str) -> Result<RunOwner, TestError> {
    let store = SqliteStore::open(db)?;
    Ok(store
        .load(run_id)?
        .ok_or("no run")?
        .owner
        .ok_or("no owner")?)
}

/// Starts `task` on a first runtime on `db` and lets it go mid-call (as a
/// crash would): the run is stored, owned by this process, unfinished.
async fn abandoned_mid_call(
    db: &std::path::Path,
    task: &TestTask,
    script: ScriptBuilder,
) -> Result<(), TestError> {
    let (first, mut held) = gated(db)?;
    let handle = first.start(task.config(), script.policy()).await?;
    let call = held.next_call(WAIT).await?;
    first.abandon().await;
    drop(call);
    let _ = tokio::time::timeout(WAIT, handle.wait()).await;
    Ok(())
}

/// Two runtimes in one process on one store: while the first runs the
/// run, the second's resume is refused naming the owner process and since
/// when (it used to start a second copy of the run); once the first lets
/// go, the second takes over and finishes it, the call run again only
/// because it is read-only.
#[tokio::test]
async fn a_run_is_not_resumed_while_its_owner_runs_it() -> Result<(), TestError> {
    let task = task("owned-1")?;
    let db = task.root().join("runs.db");
    let (first, mut held) = gated(&db)?;
    let config = task.config();
    let handle = first.start(config, look_then_finish().policy()).await?;
    let call = held.next_call(WAIT).await?;

    let (second, mut held2) = gated(&db)?;
    match second.resume("owned-1", look_then_finish().policy()).await {
        Err(RuntimeError::Owned { run_id, owner }) => {
            assert_eq!(run_id, "owned-1");
            assert!(
                owner.contains(&format!("process {}", std::process::id())),
                "{owner}"
            );
            assert!(owner.contains(" since 20"), "{owner}");
        }
        other => panic!(
            "expected Owned, got {:?}",
            other.map(|h| h.run_id().to_string())
        ),
    }
    // The refusal changed nothing: the first still owns and runs it.
    let before = owner_of(&db, "owned-1")?;
    assert_eq!(before.pid, std::process::id());

    first.abandon().await;
    drop(call);
    let _ = tokio::time::timeout(WAIT, handle.wait()).await;
    let resumed = second
        .resume("owned-1", look_then_finish().policy())
        .await?;
    let again = held2.next_call(WAIT).await?;
    again.release(json!({"seen": true}));
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    // A stopped run is nobody's.
    let store = SqliteStore::open(&db)?;
    assert_eq!(store.load("owned-1")?.ok_or("no run")?.owner, None);
    Ok(())
}

/// An owner that cannot be checked by pid (another machine) is alive while
/// its heartbeat is fresh and taken over once it is 30 s old; a claim is a
/// compare-and-set, so a takeover naming an owner that changed meanwhile
/// loses.
#[tokio::test]
async fn an_owner_on_another_machine_is_taken_over_only_once_its_heartbeat_expired()
-> Result<(), TestError> {
    let task = task("remote-1")?;
    let db = task.root().join("runs.db");
    abandoned_mid_call(&db, &task, look_then_finish()).await?;

    let ours = owner_of(&db, "remote-1")?;
    let now = agentry::protocol::now_millis();
    let remote = |token: &str, heartbeat_ms: u64| RunOwner {
        token: token.into(),
        host: "elsewhere".into(),
        machine: "another-boot/pid:[1]".into(),
        pid: 4242,
        pid_start: Some(1),
        since_ms: now - 60_000,
        heartbeat_ms,
        epoch: 0,
    };
    let store = SqliteStore::open(&db)?;
    store.commit(&[Write::Claim {
        run_id: "remote-1".into(),
        owner: remote("remote-a", now),
        replaces: Some(ours.token.clone()),
    }])?;
    let (second, mut held2) = gated(&db)?;
    match second.resume("remote-1", look_then_finish().policy()).await {
        Err(RuntimeError::Owned { owner, .. }) => {
            assert!(owner.contains("process 4242 on host elsewhere"), "{owner}");
        }
        other => panic!(
            "expected Owned, got {:?}",
            other.map(|h| h.run_id().to_string())
        ),
    }
    // Its heartbeat stops: 31 s later it is taken over.
    store.commit(&[Write::Claim {
        run_id: "remote-1".into(),
        owner: remote("remote-b", now - 31_000),
        replaces: Some("remote-a".into()),
    }])?;
    let resumed = second
        .resume("remote-1", look_then_finish().policy())
        .await?;
    held2.next_call(WAIT).await?.release(json!({}));
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}

/// A resumed run goes on writing the trace it started; the first step
/// line its new process writes carries every ref (lines of the old
/// process may be lost with it), so folding the step lines still gives
/// the world, and the stop line has the whole map.
#[tokio::test]
async fn a_resumed_runs_first_trace_line_carries_the_whole_map() -> Result<(), TestError> {
    let task = TestTask::new("write, look, finish", &[])?
        .grant(&["fs.write", "look"])
        .run_id("traced-1")
        .trace();
    let db = task.root().join("runs.db");
    let script = || {
        ScriptBuilder::new()
            .call("w1", "fs.write", json!({"path": "a.txt", "content": "a"}))
            .call("l1", "look", json!({}))
            .finish("done")
    };
    abandoned_mid_call(&db, &task, script()).await?;

    let (second, mut held2) = gated(&db)?;
    let resumed = second.resume("traced-1", script().policy()).await?;
    held2.next_call(WAIT).await?.release(json!({}));
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);

    let lines = task.read_trace()?;
    let steps: Vec<_> = lines.iter().filter(|l| l["kind"] == "step").collect();
    // Step 1 by the first process, steps 2 and 3 by the second.
    let numbers: Vec<_> = steps.iter().map(|s| s["step"].as_u64()).collect();
    assert_eq!(numbers, [Some(1), Some(2), Some(3)]);
    for (step, want) in [(0, true), (1, true), (2, false)] {
        let changed = &steps[step]["state"]["world"]["refs_changed"];
        assert_eq!(
            changed.get("a.txt").is_some(),
            want,
            "step {}: {changed}",
            step + 1
        );
    }
    let stop = lines.last().ok_or("empty trace")?;
    assert!(
        stop["world"]["refs"]["a.txt"]["sha256"].is_string(),
        "{stop}"
    );
    Ok(())
}

/// A live owner refreshes its heartbeat (every 2 s) while the run runs.
#[tokio::test]
async fn a_live_owner_keeps_its_heartbeat_fresh() -> Result<(), TestError> {
    let task = task("beat-1")?;
    let db = task.root().join("runs.db");
    let (runtime, mut held) = gated(&db)?;
    let mut config = task.config();
    config.grants = Grants::new(["look"]);
    let handle = runtime.start(config, look_then_finish().policy()).await?;
    let call = held.next_call(WAIT).await?;
    let first = owner_of(&db, "beat-1")?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = owner_of(&db, "beat-1")?;
        if now.heartbeat_ms > first.heartbeat_ms {
            assert_eq!(now.token, first.token);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no heartbeat in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    call.release(json!({}));
    let outcome = tokio::time::timeout(WAIT, handle.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}

/// A resume that fails after it claimed the run (here its trace file
/// cannot be opened) lets the claim go: the run is nobody's, so another
/// resumer takes it at once instead of waiting for a lease that nobody
/// renews (in a cluster, a live node's claim was never taken over).
#[tokio::test]
async fn a_resume_that_fails_after_its_claim_leaves_the_run_unowned() -> Result<(), TestError> {
    let task = task("failed-resume-1")?.trace();
    let db = task.root().join("runs.db");
    abandoned_mid_call(&db, &task, look_then_finish()).await?;

    let trace = task.trace_path();
    std::fs::remove_file(&trace)?;
    std::fs::create_dir(&trace)?;
    let (second, mut held2) = gated(&db)?;
    let refused = second
        .resume("failed-resume-1", look_then_finish().policy())
        .await;
    assert!(refused.is_err(), "a trace path that is a directory resumed");
    let store = SqliteStore::open(&db)?;
    let run = store.load("failed-resume-1")?.ok_or("no run")?;
    assert_eq!(run.owner, None, "the failed resume kept its claim");

    std::fs::remove_dir(&trace)?;
    let resumed = second
        .resume("failed-resume-1", look_then_finish().policy())
        .await?;
    held2.next_call(WAIT).await?.release(json!({}));
    let outcome = tokio::time::timeout(WAIT, resumed.wait()).await??;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    Ok(())
}
