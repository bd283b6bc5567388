//! Process tools inside real runs: the deadline, an abort and a shutdown kill the
//! whole process group (grandchildren included), huge output stays capped, and
//! every process a run starts gets its trace context as `TRACEPARENT`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agentry::protocol::accept::AcceptCheck;
use agentry::tools::proc::{CommandTool, reap_orphans_here};
use agentry::{ErrorCode, Runtime, StopReason, ToolContract};
use agentry_test_support::{
    ScriptBuilder, TestError, TestTask, collect_until_stopped, collect_until_stopped_within,
    run_with_events, runtime_with, tool_results,
};
use serde_json::json;

/// The shell writes its pid (= the group id: each call leads its own group) to a
/// file, then forks two grandchildren and waits.
const FORKER: &str = "echo $$ > pgid; sleep 60 & sleep 60 & wait";

/// Members of process group `pgid` that are alive or zombies.
fn group_members(pgid: i32) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command: state, ppid, pgrp, ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r.trim().to_string()) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2].parse::<i32>().ok() == Some(pgid) {
            found.push((pid, fields[0].chars().next().unwrap_or('?')));
        }
    }
    found
}

/// The host's id of the call's process group, once the shell wrote its `$$`
/// (which under the sandbox is its pid in the call's own PID namespace, not
/// the host's): the group leader whose working directory is the run's.
async fn read_pgid(workdir: &Path) -> Result<i32, TestError> {
    for _ in 0..500 {
        if let Ok(text) = std::fs::read_to_string(workdir.join("pgid"))
            && text.trim().parse::<i32>().is_ok()
        {
            return host_group_leader_in(workdir)
                .ok_or_else(|| "no group leader runs in the working directory".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err("the command never wrote its pgid".into())
}

/// A process leading its own group whose working directory is `workdir`.
fn host_group_leader_in(workdir: &Path) -> Option<i32> {
    let workdir = std::fs::canonicalize(workdir).ok()?;
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_string_lossy().parse().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let rest = stat.rsplit_once(')')?.1.to_string();
            let pgrp: i32 = rest.split_whitespace().nth(2)?.parse().ok()?;
            (cwd == workdir && pgrp == pid).then_some(pid)
        })
}

/// Polls until the group is gone (the kill and the reaping run concurrently with
/// the run's own stop); fails with what is left after 5 s.
async fn assert_group_gone(pgid: i32) -> Result<(), TestError> {
    for _ in 0..500 {
        if group_members(pgid).is_empty() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(format!("process group {pgid} survived: {:?}", group_members(pgid)).into())
}

fn forker_task(goal: &str) -> Result<TestTask, TestError> {
    Ok(TestTask::new(goal, &[])?.grant(&["proc.run"]))
}

fn forker_policy() -> agentry::ScriptedPolicy {
    ScriptBuilder::new()
        .call("p1", "proc.run", json!({"argv": ["sh", "-c", FORKER]}))
        .finish("never")
        .policy()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_kills_the_whole_process_group() -> Result<(), TestError> {
    reap_orphans_here()?;
    let runtime = Runtime::with_builtins()?;
    // 2 s, not less: under load the shell must get to write its pgid before the
    // deadline cuts it (300 ms failed so in a loaded run).
    let task = forker_task("fork and hang")?.deadline_ms(2_000);

    // The group is found while it runs (its leader is gone after the kill).
    let (ran, pgid) = tokio::join!(
        run_with_events(&runtime, task.config(), forker_policy()),
        read_pgid(task.workdir())
    );
    let (outcome, events) = ran?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::Deadline,
        "{}",
        outcome.detail
    );
    let result = &tool_results(&events)[0].1;
    assert!(
        matches!(
            result.error_code(),
            Some(ErrorCode::Etimedout | ErrorCode::Ecanceled)
        ),
        "{result:?}"
    );
    assert_group_gone(pgid?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_kills_the_whole_process_group() -> Result<(), TestError> {
    reap_orphans_here()?;
    let runtime = Runtime::with_builtins()?;
    let task = forker_task("fork and hang")?;

    let handle = runtime.start(task.config(), forker_policy()).await?;
    let pgid = read_pgid(task.workdir()).await?;
    let running = async {
        while group_members(pgid).len() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .map_err(|_| format!("the grandchildren never ran: {:?}", group_members(pgid)))?;
    handle.abort();
    let outcome = handle.wait().await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    assert_group_gone(pgid).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_kills_the_whole_process_group() -> Result<(), TestError> {
    reap_orphans_here()?;
    let runtime = Runtime::with_builtins()?;
    let task = forker_task("fork and hang")?;

    let handle = runtime.start(task.config(), forker_policy()).await?;
    let pgid = read_pgid(task.workdir()).await?;
    runtime.shutdown();
    let outcome = handle.wait().await?;

    assert_eq!(
        outcome.stop_reason,
        StopReason::UserAbort,
        "{}",
        outcome.detail
    );
    assert_group_gone(pgid).await
}

/// 100 MB of output: the envelope keeps a capped head, a `truncated` flag and a
/// ref (path, sha256, length) to the full output in the run directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_is_capped_and_referenced() -> Result<(), TestError> {
    let runtime = Runtime::with_builtins()?;
    let task = TestTask::new("flood", &[])?.grant(&["proc.run"]);
    let policy = ScriptBuilder::new()
        .call(
            "p1",
            "proc.run",
            json!({"argv": ["head", "-c", "20000000", "/dev/zero"]}),
        )
        .finish("done")
        .policy();

    // 20 MB through a pipe, hashed and written: seconds on a loaded machine.
    let handle = runtime.start(task.config(), policy).await?;
    let events = collect_until_stopped_within(handle.subscribe(), Duration::from_secs(120)).await?;
    let outcome = handle.wait().await?;

    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let result = &tool_results(&events)[0].1;
    // Its head is inline; the whole (the output's own head) was saved.
    assert!(result.cut.is_some(), "{result:?}");
    let data = task.whole_data(result)?;
    assert_eq!(data["stdout_truncated"], true);
    assert_eq!(data["stdout_bytes"], 20_000_000);
    assert!(data["stdout"].as_str().map_or(0, str::len) <= 16 * 1024);
    let full = result
        .refs
        .iter()
        .find(|r| r.bytes == 20_000_000)
        .ok_or("no ref to the full output")?;
    let on_disk = std::fs::metadata(task.workdir().join(&full.path))?.len();
    assert_eq!(on_disk, 20_000_000);
    Ok(())
}

/// Prints the process's `TRACEPARENT`.
const PRINT_TRACEPARENT: &str = "printf %s \"$TRACEPARENT\"";

/// A run whose `proc.run`, command tool and command acceptance check each print
/// (or save) `TRACEPARENT`; returns what they saw and the run's traceparent.
async fn traceparents_seen(parent: Option<&str>) -> Result<(Vec<String>, String), TestError> {
    let show = CommandTool::new(
        ToolContract::new("trace.show", "print TRACEPARENT", json!({"type": "object"})),
        ["sh", "-c", PRINT_TRACEPARENT],
    )?;
    let runtime = runtime_with(vec![Arc::new(show)])?;
    let task = TestTask::new("show the trace context", &[])?.grant(&["proc.run", "trace.show"]);
    let mut config = task.config();
    config.traceparent = parent.map(str::to_string);
    config.accept = vec![AcceptCheck::Command {
        argv: vec![
            "sh".into(),
            "-c".into(),
            format!("{PRINT_TRACEPARENT} > tp.txt"),
        ],
        timeout_ms: 30_000,
    }];
    let policy = ScriptBuilder::new()
        .call(
            "p1",
            "proc.run",
            json!({"argv": ["sh", "-c", PRINT_TRACEPARENT]}),
        )
        .call("c1", "trace.show", json!({}))
        .finish("shown")
        .policy();
    let handle = runtime.start(config, policy).await?;
    let events = collect_until_stopped(handle.subscribe()).await?;
    let outcome = handle.wait().await?;
    assert_eq!(outcome.stop_reason, StopReason::Done, "{}", outcome.detail);
    let mut seen: Vec<String> = tool_results(&events)
        .iter()
        // The process tools' results (not the finish's).
        .filter_map(|(_, r)| Some(r.data.as_ref()?.get("stdout")?.as_str()?.to_string()))
        .collect();
    seen.push(task.read_file("tp.txt")?);
    Ok((seen, handle.traceparent()))
}

/// `proc.run`, a command tool and an acceptance check run with the run's
/// traceparent; with `RunConfig.traceparent` set, it is in the given trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_get_the_runs_traceparent() -> Result<(), TestError> {
    let (seen, run_tp) = traceparents_seen(None).await?;
    assert_eq!(seen, [run_tp.as_str(); 3]);
    let parts: Vec<&str> = run_tp.split('-').collect();
    assert!(
        parts.len() == 4 && parts[0] == "00" && parts[1].len() == 32 && parts[2].len() == 16,
        "{run_tp}"
    );

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = format!("00-{trace}-00f067aa0ba902b7-01");
    let (seen, run_tp) = traceparents_seen(Some(&parent)).await?;
    assert!(run_tp.starts_with(&format!("00-{trace}-")), "{run_tp}");
    assert!(run_tp.ends_with("-01") && run_tp != parent, "{run_tp}");
    assert_eq!(seen, [run_tp.as_str(); 3]);
    Ok(())
}
