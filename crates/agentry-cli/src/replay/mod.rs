//! `agentry replay TRACE.jsonl [--store FILE --run-id ID]`: run a recorded
//! run again, its recorded decisions as the policy and the task's real tools
//! in a fresh working directory, and report drift step by step.
//!
//! Where the recording comes from: the trace's root run, or its run
//! `--run-id`; without a trace, run `--run-id` of `--store` (its session).
//! Where the task comes from: `--task`, else the trace's stop line
//! (`origin.task_dir`, which `agentry run` writes), else the store's record
//! of the run. The replay is a new run (new id, kept in memory only, its own
//! trace): the recorded run, its trace and its store are only read.
//!
//! A trace is code: before anything runs, a recording whose records
//! contradict each other is refused (`--force` overrides), and a replay that
//! would run more than read-only calls lists them with the task directory
//! and waits for a yes (`--yes`, or an answer at a terminal; `--dry-run`
//! only lists). Approvals come from the step records alone.
//!
//! Files, in import order: `error`, `recorded` (trace or store → what was
//! recorded), `check` (whether it agrees with itself), `preview` (what it
//! will run, and the yes), `normalize` (what differs by nature taken out),
//! `compare` (the verdict), `start` (the replay's run), `report`.

mod check;
mod compare;
mod error;
mod normalize;
mod preview;
mod recorded;
mod report;
mod start;

use std::path::{Path, PathBuf};

use agentry::{RunConfig, TaskSpec};

use self::compare::{Rules, judge};
pub(crate) use self::error::ReplayError;
use self::preview::{Preview, Scope, TaskFrom};
use self::recorded::Recorded;
use self::report::{Fork, Outcome, Report};
use self::start::{Plan, Replayed};
use crate::args::{PolicyArg, ReplayArgs, absolute};
use crate::policy::stored_task_dir;
use crate::store::{existing, open_store};

/// Replays and prints the report; `Ok(true)` when something drifted. With
/// `--dry-run`, prints what it would run and runs nothing (`Ok(false)`).
pub(crate) async fn replay(args: &ReplayArgs) -> Result<bool, ReplayError> {
    let (recorded, stored) = recording(args)?;
    let source = task_source(args, &recorded, stored.as_ref())?;
    let task = TaskSpec::load(&source.dir)?;
    if !cleared(args, &recorded, &task, &source)? {
        return Ok(false);
    }
    let task_dir = source.dir;
    // The replay's own trace: kept with --out, else in a scratch directory.
    let scratch = tempfile::tempdir().map_err(ReplayError::Scratch)?;
    let trace = match &args.out {
        Some(path) => absolute(path),
        None => scratch.path().join("replay.jsonl"),
    };
    let fork = args
        .fork_at
        .zip(args.policy.as_ref())
        .map(|(at, policy)| (at, policy, args.base_url.as_deref()));
    let plan = Plan {
        task: &task,
        until: args.until,
        fork,
        trace: trace.clone(),
        workdir: args.workdir.as_deref(),
    };
    let Replayed { outcome, volatile } = start::replay(&recorded, plan).await?;
    if let Some(e) = &outcome.trace_error {
        return Err(ReplayError::TraceLost {
            path: trace,
            message: e.clone(),
        });
    }
    let replayed = recorded::from_trace(&trace, Some(&outcome.run_id))?;
    // `--until` at or past the recording's last step judges it all, stop included.
    let recorded_last = recorded.steps.last().map_or(0, |s| s.step);
    let until = args.until.filter(|&n| n < recorded_last);
    let rules = Rules {
        volatile,
        last: until.or(args.fork_at.map(|at| at.saturating_sub(1))),
    };
    let verdict = judge(&recorded, &replayed, &rules);
    let report = Report {
        recorded_run_id: &recorded.run_id,
        run_id: &outcome.run_id,
        task_dir: absolute(&task_dir).display().to_string(),
        workdir: outcome.workdir.display().to_string(),
        trace: args.out.as_ref().map(|_| trace.display().to_string()),
        until,
        verdict: &verdict,
        outcome: replayed.stop.as_ref().map(Outcome::of),
        fork: args.fork_at.zip(args.policy.as_ref()).map(|(at, p)| Fork {
            at,
            policy: describe(p),
        }),
    };
    if let Err(e) = report::print(&report, &recorded, args.json) {
        eprintln!("agentry: cannot write the report: {e}");
    }
    Ok(verdict.drifted)
}

/// Whether the replay may run: a recording that contradicts itself is
/// refused (unless `--force`), and what it runs is shown and, unless all
/// read-only, confirmed. `Ok(false)`: a dry run, listed and done.
fn cleared(
    args: &ReplayArgs,
    recorded: &Recorded,
    task: &TaskSpec,
    source: &TaskSource,
) -> Result<bool, ReplayError> {
    let contradictions = check::contradictions(recorded);
    let scope = Scope {
        task_dir: absolute(&source.dir).display().to_string(),
        task_from: source.from,
        last: args.until.or(args.fork_at.map(|at| at.saturating_sub(1))),
        fork: args
            .fork_at
            .zip(args.policy.as_ref())
            .map(|(at, p)| (at, describe(p))),
        contradictions: &contradictions,
    };
    let preview = Preview::of(recorded, task, scope)?;
    if args.dry_run {
        preview::print(&preview, args.json)?;
        return Ok(false);
    }
    if !contradictions.is_empty() {
        if !args.force {
            return Err(ReplayError::Contradicts {
                contradictions: contradictions.clone(),
            });
        }
        for c in &contradictions {
            eprintln!("agentry: warning: --force: the recording contradicts itself: {c}");
        }
    }
    preview::consent(&preview, args.yes)?;
    Ok(true)
}

/// The task directory to replay against, and who named it.
struct TaskSource {
    dir: PathBuf,
    from: TaskFrom,
}

/// `--task`, else the trace's stop line, else the store's record of the run.
fn task_source(
    args: &ReplayArgs,
    recorded: &Recorded,
    stored: Option<&RunConfig>,
) -> Result<TaskSource, ReplayError> {
    // Without a trace, the recording's origin is the store's.
    let origin_from = if args.trace.is_some() {
        TaskFrom::Trace
    } else {
        TaskFrom::Store
    };
    let from_trace = || {
        let dir = recorded.origin.as_ref()?.task_dir.as_ref()?;
        Some(TaskSource {
            dir: PathBuf::from(dir),
            from: origin_from,
        })
    };
    let from_store = || {
        Some(TaskSource {
            dir: stored_task_dir(stored?)?,
            from: TaskFrom::Store,
        })
    };
    let given = args.task.clone().map(|dir| TaskSource {
        dir,
        from: TaskFrom::Flag,
    });
    given
        .or_else(from_trace)
        .or_else(from_store)
        .ok_or_else(|| ReplayError::NoTask {
            run_id: recorded.run_id.clone(),
        })
}

/// The recorded run, and the store's configuration of it when it came from
/// (or was named in) a store.
fn recording(args: &ReplayArgs) -> Result<(Recorded, Option<RunConfig>), ReplayError> {
    let from_store = |path: &Path, run_id: &str| -> Result<_, ReplayError> {
        let path = existing(path.to_path_buf())?;
        let store = open_store(&path)?;
        recorded::from_store(&*store, &path.display().to_string(), run_id)
    };
    match (&args.trace, &args.store, &args.run_id) {
        (Some(trace), store, run_id) => {
            let recorded = recorded::from_trace(trace, run_id.as_deref())?;
            let config = match store {
                Some(path) => Some(from_store(path, &recorded.run_id)?.1),
                None => None,
            };
            Ok((recorded, config))
        }
        (None, Some(store), Some(run_id)) => {
            let (recorded, config) = from_store(store, run_id)?;
            Ok((recorded, Some(config)))
        }
        // clap requires a trace, or --store with --run-id.
        (None, _, _) => Err(ReplayError::NoRun {
            from: "the command line".into(),
            what: "trace file, nor --store with --run-id".into(),
        }),
    }
}

fn describe(policy: &PolicyArg) -> String {
    match policy {
        PolicyArg::Script(file) => format!("script:{}", file.display()),
        PolicyArg::Model { provider, model } => {
            format!("{}:{model}", format!("{provider:?}").to_lowercase())
        }
    }
}
