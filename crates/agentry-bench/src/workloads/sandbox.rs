//! The sandbox's cost per process start (issue 34): spawn-to-exit of `true`,
//! spawned the way agentry's process tools spawn (tokio, its own process
//! group, output piped), with `mode = "off"` and under the default sandbox.
//! Each sample includes the call's set-up and tear-down (`Sandbox::call`: the
//! private TMPDIR and its Landlock ruleset; dropping it removes them).

use std::process::Stdio;
use std::time::Instant;

use agentry_sandbox::{Mode, Sandbox, SandboxPlaces, SandboxSpec, probe};

use crate::harness::{BenchResult, Options};
use crate::report::{Report, quantile};

/// Starts of `true` not timed before each series (page cache, first fork).
const WARM_UP: u64 = 20;

/// `sandbox`: `runs` starts each way, interleaved so drift hits both alike.
pub async fn sandbox(opts: &Options) -> BenchResult<Report> {
    let root = tempfile::tempdir()?;
    let workdir = root.path().join("work");
    std::fs::create_dir_all(&workdir)?;
    let places = SandboxPlaces {
        workdir: workdir.clone(),
        temp_parent: root.path().join("tmp"),
        deny: Vec::new(),
    };
    let off = Sandbox::prepare(
        &SandboxSpec {
            mode: Mode::Off,
            ..SandboxSpec::default()
        },
        &places,
    )?;
    let default = Sandbox::prepare(&SandboxSpec::default(), &places)?;
    for _ in 0..WARM_UP {
        start_true(&off, &workdir).await?;
        start_true(&default, &workdir).await?;
    }
    let mut off_us = Vec::new();
    let mut default_us = Vec::new();
    for _ in 0..opts.runs {
        off_us.push(start_true(&off, &workdir).await?);
        default_us.push(start_true(&default, &workdir).await?);
    }
    Ok(report(opts.runs, &off_us, &default_us))
}

/// One spawn-to-exit of `true` in µs, the call's set-up and tear-down included.
async fn start_true(sandbox: &Sandbox, workdir: &std::path::Path) -> BenchResult<f64> {
    let started = Instant::now();
    let call = sandbox.call()?;
    let mut command = tokio::process::Command::new("true");
    command
        .current_dir(workdir)
        .process_group(0)
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    call.apply(command.as_std_mut());
    let output = command.spawn()?.wait_with_output().await?;
    drop(call);
    let elapsed = started.elapsed().as_secs_f64() * 1e6;
    if !output.status.success() {
        return Err(format!("`true` failed: {:?}", output.status).into());
    }
    Ok(elapsed)
}

fn report(runs: u64, off_us: &[f64], default_us: &[f64]) -> Report {
    let mut report = Report::new("sandbox");
    report.param("runs", runs).param("command", "true");
    let (off_p50, off_p90) = (quantile(off_us, 0.5), quantile(off_us, 0.9));
    let (on_p50, on_p90) = (quantile(default_us, 0.5), quantile(default_us, 0.9));
    report
        .metric_f("off_us_p50", off_p50, 1)
        .metric_f("off_us_p90", off_p90, 1)
        .metric_f("default_us_p50", on_p50, 1)
        .metric_f("default_us_p90", on_p90, 1)
        .metric_f("added_us_p50", on_p50 - off_p50, 1)
        .metric_f("added_us_p90", on_p90 - off_p90, 1)
        .metric_f("ratio_p50", on_p50 / off_p50, 2)
        .metric_f("ratio_p90", on_p90 / off_p90, 2);
    let support = probe();
    report.param("landlock_abi", support.landlock_abi);
    report.param(
        "as_root_pids_cgroup",
        support.running_as_root && support.pids_cgroup,
    );
    if on_p50 - off_p50 >= 1_000.0 {
        report.note("the sandbox adds 1 ms or more per start at p50 (target: < 1 ms)");
    }
    report
}
