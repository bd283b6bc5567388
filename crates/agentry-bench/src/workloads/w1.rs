//! W1 (per-step overhead of one agent) and the floor it is compared with.

use std::sync::Arc;
use std::time::Instant;

use agentry::Runtime;

use crate::actor_floor;
use crate::floor;
use crate::harness::{BenchResult, Options, check_add, config, warm_up, workdir};
use crate::model::{AddModel, Probe};
use crate::procfs::cpu_time;
use crate::report::Report;
use crate::tools;

/// `floor`: the bare-channel W1 step alone (after a 3-step warm-up episode).
pub async fn floor(opts: &Options) -> BenchResult<Report> {
    let m = opts.m;
    let mut report = Report::new("floor");
    report.param("m", m).param("threads", opts.threads);
    floor::run(3).await?.check(3)?;
    let run = floor::run(m).await?;
    report.step_figures(m, run.wall, run.cpu);
    if let Err(e) = run.check(m) {
        report.fail(e);
    }
    Ok(report)
}

/// `w1`: one agent, M steps, timed from just before the run starts to the
/// outcome; the floor is measured first in the same process.
pub async fn w1(opts: &Options) -> BenchResult<Report> {
    // Size: one report, figure after figure, in the order they are printed.
    let m = opts.m;
    let dir = workdir()?;
    let runtime = Runtime::new(tools::registry(None)?);
    warm_up(&runtime, dir.path()).await?;
    floor::run(3).await?.check(3)?;
    let floor_run = floor::run(m).await?;
    actor_floor::run(3).await?.1?;
    let (actor_run, actor_checked) = actor_floor::run(m).await?;

    let probe = Probe::new(m as usize);
    let model = AddModel::new(m, Arc::clone(&probe));
    let mut cfg = config(dir.path(), m);
    cfg.trace = opts.trace.clone();
    cfg.events_from_start = !opts.events_off;
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let outcome = runtime.run(cfg, model).await?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu_us = cpu_time().saturating_sub(cpu0).as_secs_f64() * 1e6 / m as f64;

    let mut report = Report::new("w1");
    report
        .param("m", m)
        .param("trace", opts.trace.is_some())
        .param("threads", opts.threads);
    if opts.events_off {
        report.param("events_from_start", false);
    }
    let us_per_step = wall * 1e6 / m as f64;
    let floor_us = floor_run.wall.as_secs_f64() * 1e6 / m as f64;
    report
        .metric_f("wall_s", wall, 6)
        .metric_f("steps_per_s", m as f64 / wall, 0)
        .metric_f("us_per_step", us_per_step, 3);
    let tenth = (m / 10) as usize;
    if tenth >= 1 {
        if let Some(first) = probe.rate(1, 1 + tenth) {
            report.metric_f("steps_per_s_first10pct", first, 0);
        }
        if let Some(last) = probe.rate(m as usize - tenth, m as usize) {
            report.metric_f("steps_per_s_last10pct", last, 0);
        }
    }
    let floor_cpu_us = floor_run.cpu.as_secs_f64() * 1e6 / m as f64;
    report
        .metric_f("floor_us_per_step", floor_us, 3)
        .metric_f("ratio_vs_floor", us_per_step / floor_us, 2)
        .metric_f("cpu_us_per_step", cpu_us, 3)
        .metric_f("floor_cpu_us_per_step", floor_cpu_us, 3)
        .metric_f("cpu_ratio_vs_floor", cpu_us / floor_cpu_us, 2);
    // The same step in agentry's actor shape with nothing behind the messages.
    let actor_us = actor_run.wall.as_secs_f64() * 1e6 / m as f64;
    report
        .metric_f("actor_floor_us_per_step", actor_us, 3)
        .metric_f("ratio_vs_actor_floor", us_per_step / actor_us, 2)
        .metric_f(
            "actor_floor_cpu_us_per_step",
            actor_run.cpu.as_secs_f64() * 1e6 / m as f64,
            3,
        );
    if let Some(path) = &opts.trace
        && let Ok(meta) = std::fs::metadata(path)
    {
        report.metric_f("trace_mib", meta.len() as f64 / (1024.0 * 1024.0), 2);
    }
    if opts.otlp {
        Box::pin(with_spans(
            &runtime,
            dir.path(),
            m,
            us_per_step,
            &mut report,
        ))
        .await?;
    }
    report.metric_f("peak_rss_mib", crate::procfs::peak_rss_mib(), 1);
    if let Err(e) = check_add(&outcome, &probe, m) {
        report.fail(e);
    }
    if let Err(e) = floor_run.check(m) {
        report.fail(e);
    }
    if let Err(e) = actor_checked {
        report.fail(e);
    }
    Ok(report)
}

/// Rounds of `w1 --otlp`: each a run without spans then one with them.
const SPAN_ROUNDS: usize = 5;

/// W1 again, its spans exported to a local OTLP receiver, in rounds that
/// alternate a run with the exporting layer switched off and one with it on;
/// the ratio is each round's (on / off), reported as the median and range, so
/// a machine busy with other work weighs on both halves of a round alike.
/// `off_us` (the run before any subscriber) is reported beside it.
async fn with_spans(
    runtime: &Runtime,
    dir: &std::path::Path,
    m: u64,
    off_us: f64,
    report: &mut Report,
) -> BenchResult<()> {
    let receiver = crate::otlp::Receiver::start()?;
    let mut exporting = crate::otlp::Exporting::install(&receiver.url)?;
    let mut ratios = Vec::with_capacity(SPAN_ROUNDS);
    let mut on_us = Vec::with_capacity(SPAN_ROUNDS);
    for _ in 0..SPAN_ROUNDS {
        exporting.set(false)?;
        let off = timed_run(runtime, dir, m).await?;
        exporting.set(true)?;
        let on = timed_run(runtime, dir, m).await?;
        ratios.push(on / off);
        on_us.push(on);
    }
    let dropped = exporting.shutdown();
    ratios.sort_by(f64::total_cmp);
    on_us.sort_by(f64::total_cmp);
    let median = ratios[SPAN_ROUNDS / 2];
    report
        .metric_f("otlp_us_per_step", on_us[SPAN_ROUNDS / 2], 3)
        .metric_f("otlp_ratio_vs_off", median, 2)
        .metric_f("otlp_ratio_min", ratios[0], 2)
        .metric_f("otlp_ratio_max", ratios[SPAN_ROUNDS - 1], 2)
        .metric_f(
            "otlp_ratio_vs_no_subscriber",
            on_us[SPAN_ROUNDS / 2] / off_us,
            2,
        )
        .metric("otlp_dropped_spans", dropped)
        .metric(
            "otlp_bytes",
            receiver.bytes.load(std::sync::atomic::Ordering::Relaxed),
        );
    Ok(())
}

/// One checked W1 run of `m` steps: microseconds per step.
async fn timed_run(runtime: &Runtime, dir: &std::path::Path, m: u64) -> BenchResult<f64> {
    let probe = Probe::new(m as usize);
    let model = AddModel::new(m, Arc::clone(&probe));
    let t0 = Instant::now();
    let outcome = runtime.run(config(dir, m), model).await?;
    let us = t0.elapsed().as_secs_f64() * 1e6 / m as f64;
    check_add(&outcome, &probe, m)?;
    Ok(us)
}
