//! W3 (parallel tool calls in one step) and issue 3's `parallel` figure.

use std::sync::Arc;
use std::time::Instant;

use agentry::{RunOutcome, Runtime, StopReason};

use crate::harness::{BenchResult, Options, config, ms, warm_up, workdir};
use crate::model::{EchoModel, Probe};
use crate::report::{Report, quantile};
use crate::tools;

/// Runs one echo episode of `steps` parallel steps of `k` calls; returns the
/// outcome, the wall clock, the probe, and the per-step times in ms (from the
/// model's turn timestamps).
async fn episode(
    runtime: &Runtime,
    dir: &std::path::Path,
    steps: u64,
    k: u64,
    sleep_ms: Option<u64>,
) -> BenchResult<(RunOutcome, f64, Arc<Probe>, Vec<f64>)> {
    let probe = Probe::new(steps as usize + 1);
    let model = EchoModel::new(steps, k, sleep_ms, Arc::clone(&probe));
    let mut cfg = config(dir, steps + 1);
    cfg.max_parallel = cfg.max_parallel.max(k as usize);
    let t0 = Instant::now();
    let outcome = runtime.run(cfg, model).await?;
    let wall = ms(t0.elapsed());
    let step_ms = (1..=steps as usize)
        .filter_map(|s| Some(ms(probe.turn_at(s + 1)?.checked_sub(probe.turn_at(s)?)?)))
        .collect();
    Ok((outcome, wall, probe, step_ms))
}

/// Checks the episode's outcome; the model checked the order of every result.
fn check(outcome: &RunOutcome, probe: &Probe, steps: u64, k: u64) -> Result<(), String> {
    if let Some(f) = probe.failure() {
        return Err(f);
    }
    let session = 1 + (steps + 1) + steps * k;
    if outcome.stop_reason != StopReason::Done
        || outcome.answer.as_deref() != Some("done")
        || outcome.tool_calls != steps * k
        || outcome.state.session_len != session
        || probe.turns() != steps + 1
    {
        return Err(format!(
            "stopped {} ({}) after {} turns, {} calls, session {}",
            outcome.stop_reason,
            outcome.detail,
            probe.turns(),
            outcome.tool_calls,
            outcome.state.session_len
        ));
    }
    Ok(())
}

/// W3's floor: the same S rounds of K concurrent tokio sleeps of 50 − i ms,
/// joined in request order, with no runtime. Its ms per round is what tokio's
/// 1 ms timer wheel allows (a 50 ms sleep wakes on the tick after it is due).
async fn floor_ms_per_step(steps: u64, k: u64, precise: bool) -> f64 {
    let t0 = Instant::now();
    for _ in 0..steps {
        let sleeps: Vec<_> = (0..k)
            .map(|i| {
                let d = std::time::Duration::from_millis(50u64.saturating_sub(i));
                tokio::spawn(async move {
                    if precise {
                        tools::precise_sleep(d).await;
                    } else {
                        tokio::time::sleep(d).await;
                    }
                })
            })
            .collect();
        for s in sleeps {
            let _ = s.await;
        }
    }
    ms(t0.elapsed()) / steps as f64
}

/// `w3`: S steps × K `sleep_echo` calls sleeping 50 − i ms, then a final turn.
pub async fn w3(opts: &Options) -> BenchResult<Report> {
    let (steps, k) = (opts.steps.max(1), opts.k.max(1));
    let dir = workdir()?;
    let sleep_echo = tools::SleepEchoTool {
        precise: opts.precise_sleep,
    };
    let runtime = Runtime::new(tools::registry_with(None, sleep_echo)?);
    warm_up(&runtime, dir.path()).await?;
    let floor = floor_ms_per_step(steps, k, opts.precise_sleep).await;
    let (outcome, wall, probe, step_ms) = episode(&runtime, dir.path(), steps, k, None).await?;

    let mut report = Report::new("w3");
    report
        .param("steps", steps)
        .param("k", k)
        .param("threads", opts.threads);
    if opts.precise_sleep {
        report.param("sleep", "precise");
    }
    let checked = check(&outcome, &probe, steps, k);
    report
        .metric_f("wall_s", wall / 1e3, 6)
        .metric_f("ms_per_parallel_step", wall / steps as f64, 3)
        .metric_f("floor_ms_per_parallel_step", floor, 3)
        .metric_f("ratio_to_floor", wall / steps as f64 / floor, 4)
        .metric_f("min_step_ms", quantile(&step_ms, 0.0), 3)
        .metric_f("max_step_ms", quantile(&step_ms, 1.0), 3)
        .metric("order_matches_request", checked.is_ok());
    if let Err(e) = checked {
        report.fail(e);
    }
    Ok(report)
}

/// `parallel` (issue 3): R episodes of one step of K calls that each sleep
/// 50 ms; the step's wall time against the 50 ms ideal, result order asserted.
pub async fn parallel(opts: &Options) -> BenchResult<Report> {
    let (k, runs) = (opts.k.max(1), opts.runs.max(1));
    let dir = workdir()?;
    let runtime = Runtime::new(tools::registry(None)?);
    warm_up(&runtime, dir.path()).await?;
    let mut samples = Vec::new();
    let mut failure = None;
    for _ in 0..runs {
        let (outcome, _, probe, step_ms) = episode(&runtime, dir.path(), 1, k, Some(50)).await?;
        if let Err(e) = check(&outcome, &probe, 1, k) {
            failure.get_or_insert(e);
        }
        samples.extend(step_ms);
    }
    let mut report = Report::new("parallel");
    report
        .param("k", k)
        .param("sleep_ms", 50)
        .param("runs", runs)
        .param("threads", opts.threads);
    report
        .metric("ideal_ms", 50)
        .metric_f("step_ms_p50", quantile(&samples, 0.5), 3)
        .metric_f("step_ms_min", quantile(&samples, 0.0), 3)
        .metric_f("step_ms_max", quantile(&samples, 1.0), 3)
        .metric_f("overhead_ms_p50", quantile(&samples, 0.5) - 50.0, 3)
        .metric("order_matches_request", failure.is_none());
    if let Some(e) = failure {
        report.fail(e);
    }
    Ok(report)
}
