//! The sandbox's cost per process start (issue 34): spawn-to-exit of `true`,
//! spawned the way agentry's process tools spawn (tokio, its own process
//! group, output piped), with `mode = "off"` and under the default sandbox.
//! Each sample runs from the call's set-up (`Sandbox::call`: the private
//! TMPDIR, its Landlock ruleset) to every process of the call's group reaped
//! (as agentry's process group does it: this process is a child subreaper and
//! reaps the group's members after the leader) and the call dropped.

use std::process::Stdio;
use std::time::Instant;

use agentry::tools::proc::reap_orphans_here;
use agentry_sandbox::{Mode, Sandbox, SandboxPlaces, SandboxSpec, probe};

use crate::harness::{BenchResult, Options};
use crate::procfs::{children_cpu_time, cpu_time};
use crate::report::{Report, quantile};

/// Starts of `true` not timed before each series (page cache, first fork).
const WARM_UP: u64 = 20;

/// `sandbox`: `runs` starts each way, interleaved so drift hits both alike.
pub async fn sandbox(opts: &Options) -> BenchResult<Report> {
    reap_orphans_here()?;
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
    let mut off = Series::new(off);
    let mut default = Series::new(default);
    for _ in 0..opts.runs {
        off.sample(&workdir).await?;
        default.sample(&workdir).await?;
    }
    Ok(report(opts.runs, &off, &default))
}

/// One way of starting: its wall-clock samples and the CPU they took.
struct Series {
    sandbox: Sandbox,
    wall_us: Vec<f64>,
    /// This process's and its reaped descendants' CPU time, summed over the samples.
    cpu_us: f64,
}

impl Series {
    fn new(sandbox: Sandbox) -> Series {
        Series {
            sandbox,
            wall_us: Vec::new(),
            cpu_us: 0.0,
        }
    }

    async fn sample(&mut self, workdir: &std::path::Path) -> BenchResult<()> {
        let cpu_before = cpu_time() + children_cpu_time();
        self.wall_us.push(start_true(&self.sandbox, workdir).await?);
        let cpu_after = cpu_time() + children_cpu_time();
        self.cpu_us += cpu_after.saturating_sub(cpu_before).as_secs_f64() * 1e6;
        Ok(())
    }

    fn cpu_us_mean(&self) -> f64 {
        self.cpu_us / self.wall_us.len().max(1) as f64
    }
}

/// One spawn-to-exit of `true` in µs, the call's set-up and tear-down included.
async fn start_true(sandbox: &Sandbox, workdir: &std::path::Path) -> BenchResult<f64> {
    let started = Instant::now();
    let call = sandbox.call()?;
    let mut command = tokio::process::Command::new("true");
    command
        .current_dir(workdir)
        // As agentry's process tools spawn: only the variables set here.
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .process_group(0)
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    call.apply(command.as_std_mut());
    let child = command.spawn()?;
    let group = child.id().ok_or("the leader has no pid")?;
    let output = child.wait_with_output().await?;
    tokio::task::spawn_blocking(move || reap_group(group)).await?;
    drop(call);
    let elapsed = started.elapsed().as_secs_f64() * 1e6;
    if !output.status.success() {
        return Err(format!("`true` failed: {:?}", output.status).into());
    }
    Ok(elapsed)
}

/// Reaps every process left in group `group` (re-parented here), blocking until none is.
fn reap_group(group: u32) {
    let Ok(group) = libc::pid_t::try_from(group) else {
        return;
    };
    loop {
        // SAFETY: waiting on our own process group's members; no status wanted.
        let reaped = unsafe { libc::waitpid(-group, std::ptr::null_mut(), 0) };
        if reaped < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

fn report(runs: u64, off: &Series, default: &Series) -> Report {
    let (off_us, default_us) = (&off.wall_us, &default.wall_us);
    let mut report = Report::new("sandbox");
    report.param("runs", runs).param("command", "true").param(
        "measured",
        "Sandbox::call → leader exited → group reaped → call dropped",
    );
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
        .metric_f("ratio_p90", on_p90 / off_p90, 2)
        .metric_f("off_cpu_us_mean", off.cpu_us_mean(), 1)
        .metric_f("default_cpu_us_mean", default.cpu_us_mean(), 1)
        .metric_f(
            "added_cpu_us_mean",
            default.cpu_us_mean() - off.cpu_us_mean(),
            1,
        );
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
