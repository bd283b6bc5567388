//! The actor floor (agentry's fixed actor shape with nothing behind the
//! messages), as one agent (`actor-floor`, set against W1) and as N agents at
//! once (`actor-floor-w2`, set against W2's time and memory per agent).

use crate::actor_floor;
use crate::harness::{BenchResult, Options};
use crate::procfs::{peak_rss_mib, rss_mib};
use crate::report::{ManyFigures, Report};

/// `actor-floor`: one agent, M steps (after a 3-step warm-up episode).
pub async fn actor_floor(opts: &Options) -> BenchResult<Report> {
    let m = opts.m;
    let mut report = Report::new("actor-floor");
    report.param("m", m).param("threads", opts.threads);
    actor_floor::run(3).await?.1?;
    let (run, checked) = actor_floor::run(m).await?;
    report.step_figures(m, run.wall, run.cpu);
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

    let mut report = Report::new("actor-floor-w2");
    report
        .param("n", opts.n)
        .param("m", m)
        .param("threads", opts.threads)
        .many_figures(&ManyFigures {
            agents: n,
            m,
            wall: many.wall,
            start: many.start,
            cpu: many.cpu,
            peak_rss_mib: peak,
            rss_before_mib: rss_before,
        });
    if let Err(e) = many.checked {
        report.fail(e);
    }
    Ok(report)
}
