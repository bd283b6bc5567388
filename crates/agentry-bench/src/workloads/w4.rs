//! W4 (cancellation at a wall-clock deadline) and issue 3's `cancel` figure.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agentry::tools::proc::reap_orphans_here;
use agentry::{RunConfig, RunOutcome, Runtime, StopReason, Tool};

use crate::harness::{BenchResult, Options, config, ms, warm_up, workdir};
use crate::model::SubprocessModel;
use crate::procfs::{find_new_group, group_members, kill_hard, wait_all_gone};
use crate::report::{Report, quantile};
use crate::tools::{self, SLEEP_SUBPROCESS, SleepSubprocessTool, group_tool};

/// The W4 `--grandchildren` command.
const W4_GROUP_SCRIPT: &str = "sleep 10 & sleep 10 & wait";
/// Issue 3's cancellation command.
const CANCEL_SCRIPT: &str = "sleep 60 & sleep 60 & wait";
/// Name of the cancel benchmark's tool.
const GROUP_SLEEP: &str = "group_sleep";
/// A process group as the benchmarks spawn it: `sh` plus two `sleep`s.
const GROUP_SIZE: usize = 3;

/// `a − b` in milliseconds, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(d) => ms(d),
        None => -ms(b - a),
    }
}

/// Waits up to `limit` for group `pgid` to leave `/proc` entirely (its zombies
/// reaped); returns how many entries are left then.
async fn entries_left(pgid: i32, limit: Duration) -> usize {
    let until = Instant::now() + limit;
    loop {
        let left = group_members(pgid).len();
        if left == 0 || Instant::now() >= until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// W4's floor: the same `sleep 10` child (`kill_on_drop`) awaited by a bare tokio
/// task under `timeout_at(t0 + deadline)`, no runtime; returns deadline →
/// return in ms. What tokio's timer and dropping the wait cost here.
async fn floor_deadline_to_end_ms(deadline: Duration) -> BenchResult<f64> {
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new("sleep")
        .arg("10")
        .kill_on_drop(true)
        .spawn()?;
    let waited = tokio::time::timeout_at((t0 + deadline).into(), child.wait()).await;
    let end = Instant::now();
    if waited.is_ok() {
        return Err("the floor's sleep 10 ended before its deadline".into());
    }
    drop(child);
    Ok(signed_ms(end, t0 + deadline))
}

/// `w4`: one call of a tool that runs `sleep 10` (or, with `--grandchildren`,
/// agentry's process tool running a shell that forks two), a 200 ms run deadline.
pub async fn w4(opts: &Options) -> BenchResult<Report> {
    let deadline = Duration::from_millis(opts.deadline_ms);
    let dir = workdir()?;
    let pid = Arc::new(AtomicU32::new(0));
    let tool: Arc<dyn Tool> = if opts.grandchildren {
        reap_orphans_here()?;
        Arc::new(group_tool(SLEEP_SUBPROCESS, W4_GROUP_SCRIPT)?)
    } else {
        Arc::new(SleepSubprocessTool {
            pid: Arc::clone(&pid),
            watch_cancel: opts.watch_cancel,
        })
    };
    let runtime = Runtime::new(tools::registry(Some(tool))?);
    warm_up(&runtime, dir.path()).await?;
    let mut cfg = config(dir.path(), 2);
    cfg.limits.deadline_ms = Some(opts.deadline_ms);
    let seen = run_once(&runtime, cfg, opts.grandchildren, deadline, &pid).await?;

    let mut report = Report::new("w4");
    report
        .param("deadline_ms", opts.deadline_ms)
        .param("grandchildren", opts.grandchildren)
        .param("watch_cancel", opts.watch_cancel && !opts.grandchildren)
        .param("threads", opts.threads);
    let (end, deadline_at) = (seen.end, seen.t0 + deadline);
    let timed_out = seen.outcome.stop_reason == StopReason::Deadline;
    let killed = seen.gone.is_some() && !seen.pids.is_empty();
    report
        .metric_f("deadline_to_end_ms", signed_ms(end, deadline_at), 3)
        .metric_f("run_wall_ms", ms(end - seen.t0), 3)
        .metric("timed_out", timed_out)
        .metric("child_killed", killed)
        .metric(
            "child_dead_after_ms",
            seen.gone.map_or(serde_json::Value::Null, |g| {
                crate::report::round(ms(g.saturating_duration_since(end)), 3)
            }),
        );
    if !timed_out {
        report.fail(format!(
            "stopped {} ({}), not at the deadline",
            seen.outcome.stop_reason, seen.outcome.detail
        ));
    }
    if seen.pids.is_empty() {
        report.fail("the tool's process was never seen");
    } else if !killed {
        report
            .fail("child NOT killed: still alive 1 s after the run ended (killed by the harness)");
        for &p in &seen.pids {
            kill_hard(p);
        }
    }
    if let Some(pgid) = seen.pgid {
        kill_hard(-pgid);
        report.metric("group_size", seen.pids.len()).metric(
            "zombies_left",
            entries_left(pgid, Duration::from_millis(200)).await,
        );
    }
    // Measured after agentry's run, so it cannot disturb it.
    let floor = floor_deadline_to_end_ms(deadline).await?;
    report.metric_f("floor_deadline_to_end_ms", floor, 3);
    if floor > 0.0 {
        report.metric_f("ratio_vs_floor", signed_ms(end, deadline_at) / floor, 2);
    }
    Ok(report)
}

/// What one W4 run showed: when it started and returned, and its processes.
struct Seen {
    outcome: RunOutcome,
    t0: Instant,
    end: Instant,
    /// The tool's processes (the group's members with `--grandchildren`).
    pids: Vec<i32>,
    /// The group, with `--grandchildren`.
    pgid: Option<i32>,
    /// When the last of `pids` was gone, if within 1 s of `end`.
    gone: Option<Instant>,
}

/// Runs the W4 episode once and watches its processes: with `grandchildren`
/// the new process group (found while the run runs), else the pid the tool
/// stored in `pid`; then waits up to 1 s for them to be gone.
async fn run_once(
    runtime: &Runtime,
    cfg: RunConfig,
    grandchildren: bool,
    deadline: Duration,
    pid: &AtomicU32,
) -> BenchResult<Seen> {
    let finder = grandchildren
        .then(|| tokio::task::spawn_blocking(move || find_new_group(&[], GROUP_SIZE, deadline)));
    let t0 = Instant::now();
    let outcome = runtime.run(cfg, SubprocessModel::new(None)).await?;
    let end = Instant::now();

    let (pids, pgid) = match finder {
        Some(f) => match f.await? {
            Some((pgid, members)) => (members, Some(pgid)),
            None => (Vec::new(), None),
        },
        None => {
            let p = pid.load(Ordering::SeqCst) as i32;
            ((p > 0).then_some(p).into_iter().collect(), None)
        }
    };
    let watched = pids.clone();
    let gone = tokio::task::spawn_blocking(move || {
        wait_all_gone(&watched, end, end + Duration::from_secs(1))
    })
    .await?;
    Ok(Seen {
        outcome,
        t0,
        end,
        pids,
        pgid,
        gone,
    })
}

/// `cancel` (issue 3): R runs of agentry's command tool running
/// `sh -c 'sleep 60 & sleep 60 & wait'` under a short run deadline; the time
/// from the deadline until every process of the group is gone (zombies count
/// as gone; whether they are then reaped is reported as `zombies_left`).
pub async fn cancel(opts: &Options) -> BenchResult<Report> {
    let deadline = Duration::from_millis(opts.deadline_ms);
    let runs = opts.runs.max(1);
    reap_orphans_here()?;
    let dir = workdir()?;
    let tool = group_tool(GROUP_SLEEP, CANCEL_SCRIPT)?;
    let runtime = Runtime::new(tools::registry(Some(Arc::new(tool)))?);
    warm_up(&runtime, dir.path()).await?;

    let mut known: Vec<i32> = Vec::new();
    let (mut gone_ms, mut return_ms) = (Vec::new(), Vec::new());
    let (mut zombies_left, mut leaked) = (0usize, 0usize);
    let mut failures: Vec<String> = Vec::new();
    for run in 0..runs {
        let mut cfg = config(dir.path(), 2);
        cfg.limits.deadline_ms = Some(opts.deadline_ms);
        let skip = known.clone();
        let t0 = Instant::now();
        let deadline_at = t0 + deadline;
        let watcher = tokio::task::spawn_blocking(move || {
            let (pgid, members) = find_new_group(&skip, GROUP_SIZE, deadline)?;
            let from = deadline_at.checked_sub(Duration::from_millis(2))?;
            let gone = wait_all_gone(&members, from, deadline_at + Duration::from_secs(2));
            Some((pgid, gone))
        });
        let outcome = runtime
            .run(cfg, SubprocessModel::new(Some(GROUP_SLEEP)))
            .await?;
        return_ms.push(signed_ms(Instant::now(), deadline_at));
        if outcome.stop_reason != StopReason::Deadline {
            failures.push(format!("run {run}: stopped {}", outcome.stop_reason));
        }
        match watcher.await? {
            None => failures.push(format!("run {run}: the process group was never seen")),
            Some((pgid, gone)) => {
                known.push(pgid);
                match gone {
                    Some(at) => gone_ms.push(signed_ms(at, deadline_at)),
                    None => {
                        failures.push(format!(
                            "run {run}: group {pgid} alive 2 s after the deadline"
                        ));
                        leaked += 1;
                        kill_hard(-pgid);
                    }
                }
                zombies_left += entries_left(pgid, Duration::from_millis(100)).await;
            }
        }
    }

    let mut report = Report::new("cancel");
    report
        .param("runs", runs)
        .param("deadline_ms", opts.deadline_ms)
        .param("threads", opts.threads);
    report
        .metric_f("gone_ms_p50", quantile(&gone_ms, 0.5), 3)
        .metric_f("gone_ms_p99", quantile(&gone_ms, 0.99), 3)
        .metric_f("gone_ms_max", quantile(&gone_ms, 1.0), 3)
        .metric_f("return_ms_p50", quantile(&return_ms, 0.5), 3)
        .metric_f("return_ms_p99", quantile(&return_ms, 0.99), 3)
        .metric_f("return_ms_max", quantile(&return_ms, 1.0), 3)
        .metric("groups_leaked", leaked)
        .metric("zombies_left", zombies_left);
    if !failures.is_empty() {
        report.fail(format!(
            "{} failures; first: {}",
            failures.len(),
            failures[0]
        ));
    }
    if zombies_left > 0 {
        report.fail(format!(
            "{zombies_left} zombies not reaped 100 ms after their run"
        ));
    }
    Ok(report)
}
