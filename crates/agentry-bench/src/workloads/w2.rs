//! W2: N agents × M steps started at once on one runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agentry::{RunConfig, RunHandle, RunOutcome, Runtime};

use crate::alloc_count;
use crate::harness::{BenchResult, Options, check_add, config, warm_up, workdir};
use crate::model::{AddModel, Probe};
use crate::procfs::{cpu_time, peak_rss_mib, rss_mib};
use crate::report::{ManyFigures, Report};
use crate::tools;
use crate::{actor_floor, floor};

/// How many starts between two RSS checks of the start loop.
const RSS_CHECK_EVERY: usize = 1024;

/// Aborts every run of `runtime` when RSS passes `cap_mib` or `timeout` passes,
/// so a too-large N stops short instead of exhausting the machine.
fn spawn_guard(runtime: Runtime, cap_mib: f64, timeout: Duration) -> Arc<AtomicBool> {
    let tripped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&tripped);
    tokio::spawn(async move {
        let until = Instant::now() + timeout;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if rss_mib() > cap_mib || Instant::now() > until {
                flag.store(true, Ordering::SeqCst);
                runtime.shutdown();
                return;
            }
        }
    });
    tripped
}

/// `w2`: creates N models (untimed), then starts N runs and waits for all.
pub async fn w2(opts: &Options) -> BenchResult<Report> {
    let (n, m) = (opts.n as usize, opts.m);
    let dir = workdir()?;
    let runtime = Runtime::new(tools::registry(None)?);
    warm_up(&runtime, dir.path()).await?;
    let mut cfg = config(dir.path(), m);
    cfg.events_from_start = !opts.events_off;
    let (probes, models) = AddModel::many(n, m);
    let mut handles: Vec<RunHandle> = Vec::with_capacity(n);

    let rss_before = rss_mib();
    let guard = spawn_guard(
        runtime.clone(),
        opts.max_rss_mib,
        Duration::from_secs(opts.timeout_s),
    );
    alloc_count::reset_peak();
    let alloc0 = alloc_count::counts();
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    start_all(
        &runtime,
        &cfg,
        models,
        &mut handles,
        &guard,
        opts.max_rss_mib,
    )
    .await?;
    let started = handles.len();
    let start = t0.elapsed();
    let mut outcomes = Vec::with_capacity(started);
    for h in &handles {
        outcomes.push(h.wait().await?);
    }
    let elapsed = t0.elapsed();
    let cpu = cpu_time().saturating_sub(cpu0);
    let allocs = alloc0.zip(alloc_count::counts());
    let peak = peak_rss_mib();
    let rss_done = rss_mib();
    drop(handles);
    let rss_dropped = rss_mib();

    let mut report = Report::new("w2");
    report
        .param("n", opts.n)
        .param("m", m)
        .param("threads", opts.threads);
    if opts.events_off {
        report.param("events_from_start", false);
    }
    report
        .many_figures(&ManyFigures {
            agents: started,
            m,
            wall: elapsed,
            start,
            cpu,
            peak_rss_mib: peak,
            rss_before_mib: rss_before,
        })
        .metric_f("rss_all_done_mib", rss_done, 1)
        .metric_f("rss_handles_dropped_mib", rss_dropped, 1);
    if let Some((before, after)) = allocs {
        report.alloc_figures(started, before, after);
    }
    if guard.load(Ordering::SeqCst) {
        report.fail(format!(
            "aborted: RSS passed {} MiB or {} s passed after {started} of {n} agents started",
            opts.max_rss_mib, opts.timeout_s
        ));
    }
    measure_floors(&mut report, started, m, elapsed, start).await?;
    check_all(&mut report, &outcomes, &probes, m);
    Ok(report)
}

/// W1's check on every agent's outcome; the report fails naming the first.
fn check_all(report: &mut Report, outcomes: &[RunOutcome], probes: &[Arc<Probe>], m: u64) {
    let mut failed = 0;
    let mut first = None;
    for (outcome, probe) in outcomes.iter().zip(probes) {
        if let Err(e) = check_add(outcome, probe, m) {
            failed += 1;
            first.get_or_insert(e);
        }
    }
    if let Some(e) = first {
        let started = outcomes.len();
        report.fail(format!("{failed} of {started} agents failed; first: {e}"));
    }
}

/// Starts one run per model into `handles`; stops starting (and aborts them all) once RSS
/// passes `max_rss_mib`, checked every [`RSS_CHECK_EVERY`] starts.
async fn start_all(
    runtime: &Runtime,
    cfg: &RunConfig,
    models: Vec<AddModel>,
    handles: &mut Vec<RunHandle>,
    guard: &AtomicBool,
    max_rss_mib: f64,
) -> BenchResult<()> {
    for (i, model) in models.into_iter().enumerate() {
        handles.push(runtime.start(cfg.clone(), model).await?);
        if i % RSS_CHECK_EVERY == 0 && rss_mib() > max_rss_mib {
            guard.store(true, Ordering::SeqCst);
            runtime.shutdown();
            break;
        }
    }
    Ok(())
}

/// The floors, run after agentry's run (its peak RSS is already read) and after
/// its handles are dropped, on the same runtime: the same N × M on bare tokio
/// channels, and on bare actors in agentry's shape; `wall` and `start` are
/// agentry's.
async fn measure_floors(
    report: &mut Report,
    agents: usize,
    m: u64,
    wall: Duration,
    start: Duration,
) -> BenchResult<()> {
    let (floor_wall, _, floor_checked) = floor::run_many(agents, m).await?;
    let actor = actor_floor::run_many(agents, m).await?;
    let (wall, start) = (wall.as_secs_f64(), start.as_secs_f64());
    let floor_s = floor_wall.as_secs_f64();
    let actor_s = actor.wall.as_secs_f64();
    let actor_start_s = actor.start.as_secs_f64();
    report
        .metric_f("floor_wall_s", floor_s, 6)
        .metric_f("ratio_vs_floor", wall / floor_s, 2)
        .metric_f("actor_floor_wall_s", actor_s, 6)
        .metric_f("ratio_vs_actor_floor", wall / actor_s, 2)
        .metric_f("actor_floor_start_s", actor_start_s, 6)
        .metric_f("ratio_start_vs_actor_floor", start / actor_start_s, 2);
    for checked in [floor_checked, actor.checked] {
        if let Err(e) = checked {
            report.fail(e);
        }
    }
    Ok(())
}
