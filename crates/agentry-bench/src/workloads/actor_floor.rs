//! The actor floor (agentry's fixed actor shape with nothing behind the
//! messages), as one agent (`actor-floor`, set against W1) and as N agents at
//! once (`actor-floor-w2`, set against W2's time and memory per agent).

use crate::actor_floor;
use crate::harness::{BenchResult, Options};
use crate::procfs::{peak_rss_mib, rss_mib};
use crate::report::Report;

/// `actor-floor`: one agent, M steps (after a 3-step warm-up episode).
pub async fn actor_floor(opts: &Options) -> BenchResult<Report> {
    let m = opts.m;
    let mut report = Report::new("actor-floor");
    report.param("m", m).param("threads", opts.threads);
    actor_floor::run(3).await?.1?;
    let (run, checked) = actor_floor::run(m).await?;
    let wall = run.wall.as_secs_f64();
    report
        .metric_f("wall_s", wall, 6)
        .metric_f("steps_per_s", m as f64 / wall, 0)
        .metric_f("us_per_step", wall * 1e6 / m as f64, 3)
        .metric_f("cpu_us_per_step", run.cpu.as_secs_f64() * 1e6 / m as f64, 3);
    if let Err(e) = checked {
        report.fail(e);
    }
    Ok(report)
}

/// `actor-floor-w2`: N agents (five bare actors each) started, then all N
/// episodes run at once; time and memory per agent as W2 reports them.
pub async fn actor_floor_w2(opts: &Options) -> BenchResult<Report> {
    let (n, m) = (opts.n as usize, opts.m);
    actor_floor::run(3).await?.1?;
    let rss_before = rss_mib();
    let many = actor_floor::run_many(n, m).await?;
    let peak = peak_rss_mib();
    let wall = many.wall.as_secs_f64();

    let mut report = Report::new("actor-floor-w2");
    report
        .param("n", opts.n)
        .param("m", m)
        .param("threads", opts.threads)
        .metric_f("wall_s", wall, 6)
        .metric_f("steps_per_s", (n as u64 * m) as f64 / wall, 0)
        .metric_f("start_s", many.start.as_secs_f64(), 6)
        .metric_f("cpu_s", many.cpu.as_secs_f64(), 6)
        .metric_f("peak_rss_mib", peak, 1)
        .metric_f("rss_before_mib", rss_before, 1)
        .metric_f(
            "kib_per_agent",
            (peak - rss_before) * 1024.0 / n.max(1) as f64,
            2,
        );
    if let Err(e) = many.checked {
        report.fail(e);
    }
    Ok(report)
}
