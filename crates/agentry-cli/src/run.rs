//! `agentry run`: load the task and its policy, put the runtime on its store,
//! prepare a fresh working directory, start the run with ctrl-c wired to an
//! interrupt (at a terminal) or a graceful shutdown, and drive it to its outcome.

use std::path::{Path, PathBuf};

use agentry::{Grants, Policy, RunConfig, RunHandle, Runtime, RuntimeError, TaskSpec};

use crate::args::{RunArgs, absolute};
use crate::child_models::with_child_models;
use crate::drive::{Finished, drive};
use crate::error::RunError;
use crate::policy::{ContextSettings, LoadedPolicy, describe_policy, load_policy};
use crate::signals::CtrlC;
use crate::store::{default_store, open_sqlite};

/// The runtime on the store a run is committed to, if any.
struct Stored {
    runtime: Runtime,
    /// The store's file; `None` for a run kept in memory only.
    path: Option<PathBuf>,
}

/// A run ready to start: its runtime (on its store, with the task's tools and
/// child models), its configuration and its policy. `agentry run` and `agentry
/// mcp`'s `run_task` both start runs from one of these.
pub(crate) struct Prepared {
    /// The runtime to start the run on.
    pub(crate) runtime: Runtime,
    /// The run's configuration, working directory created.
    pub(crate) config: RunConfig,
    /// The run's policy.
    pub(crate) policy: Box<dyn Policy>,
    /// The store's file; `None` for a run kept in memory only.
    pub(crate) store: Option<PathBuf>,
}

/// Runs one task to its outcome (or, for a durable run, until it parks).
pub(crate) async fn run(args: RunArgs) -> Result<Finished, RunError> {
    let Prepared {
        runtime,
        config,
        policy,
        store,
    } = prepare(&args).await?;
    // Listening starts here, before the run: an early ctrl-c aborts it too.
    let ctrl_c = CtrlC::listen(&runtime)
        .inspect_err(|e| {
            tracing::warn!(error = %e, "cannot listen for ctrl-c; interrupting will kill the process");
        })
        .ok();
    let task_id = config.task_id.clone();
    let handle = runtime
        .start_boxed(config, policy)
        .await
        .map_err(RunError::BadInput)?;
    if let Some(ctrl_c) = &ctrl_c {
        ctrl_c.attach(&handle);
    }
    tracing::info!(run_id = handle.run_id(), task_id = %task_id, "run started");
    if let Some(path) = &store {
        announce_store(&handle, path, args.store.is_some());
    }
    let finished = drive(&handle, &[], store.as_deref()).await;
    drop(ctrl_c);
    finished
}

/// Loads the task and its policy and puts the runtime on its store. Bad input
/// is found before anything is created; the working directory comes last.
pub(crate) async fn prepare(args: &RunArgs) -> Result<Prepared, RunError> {
    let mut task = TaskSpec::load(&args.task_dir)?;
    let LoadedPolicy { policy, children } = load_policy(args, &task).await?;
    let policy_spec = describe_policy(args, &task);
    override_limits(args, &mut task);
    let trace = args.trace.as_deref().map(absolute);
    if let Some(path) = &trace {
        check_trace_file(path).map_err(RunError::BadInput)?;
    }
    let Stored { runtime, path } = open_store(args, task.runtime()?)?;
    // Checked before the working directory exists, like the run's own model.
    let runtime = with_child_models(runtime, &task, ContextSettings::of_run(args, &task))?;
    refuse_taken_run_id(&runtime, path.as_deref(), args.run_id.as_deref()).await?;
    // The working directory is created last, so bad input leaves nothing behind.
    let workdir = task.prepare_workdir(args.workdir.as_deref())?;
    let mut config = task.run_config(workdir);
    config.trace = trace;
    config.run_id = args.run_id.clone();
    config.policy_spec = Some(policy_spec);
    if !args.approve.is_empty() {
        config.approval.pre_approved = Grants::new(args.approve.iter().cloned());
    }
    let runtime = match children {
        // Children spawned without an inline script use the same model.
        Some(factory) => runtime.with_child_policy(factory),
        None => runtime,
    };
    Ok(Prepared {
        runtime,
        config,
        policy,
        store: path,
    })
}

/// `--max-steps` and `--deadline` replace the task's.
fn override_limits(args: &RunArgs, task: &mut TaskSpec) {
    if let Some(n) = args.max_steps {
        task.limits.max_steps = Some(n);
    }
    if let Some(d) = args.deadline {
        task.limits.deadline_ms = Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    }
}

/// Puts the runtime on the store the flags name: none with `--no-store`,
/// `--store FILE`, else the default store, which is durable unless it is
/// unusable — reported, but it does not stop a run nobody asked to be durable.
fn open_store(args: &RunArgs, runtime: Runtime) -> Result<Stored, RunError> {
    let durability = args.durability.into();
    match (&args.store, args.no_store) {
        (_, true) => Ok(Stored {
            runtime,
            path: None,
        }),
        (Some(path), false) => {
            let runtime = open_sqlite(path)
                .and_then(|store| runtime.with_store(store, durability))
                .map_err(RunError::BadInput)?;
            Ok(Stored {
                runtime,
                path: Some(path.clone()),
            })
        }
        (None, false) => {
            // A planted link or someone else's file there is refused outright.
            let path = default_store().map_err(RunError::BadInput)?;
            let opened = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    open_sqlite(&path)
                        .and_then(|store| runtime.clone().with_store(store, durability))
                        .map_err(|e| e.to_string())
                });
            Ok(match opened {
                Ok(durable) => Stored {
                    runtime: durable,
                    path: Some(path),
                },
                Err(e) => {
                    eprintln!(
                        "agentry: warning: the default store cannot be used ({e}); this run will not be resumable (pass --store FILE, or --no-store to silence this)"
                    );
                    Stored {
                        runtime,
                        path: None,
                    }
                }
            })
        }
    }
}

/// With a store, `--run-id` must be new to it.
async fn refuse_taken_run_id(
    runtime: &Runtime,
    store: Option<&Path>,
    run_id: Option<&str>,
) -> Result<(), RunError> {
    if let Some(path) = store
        && let Some(id) = run_id
        && runtime.stored_config(id).await.is_ok()
    {
        return Err(RunError::BadInput(
            agentry::store::StoreError::Conflict {
                path: path.display().to_string(),
                run_id: id.to_string(),
            }
            .into(),
        ));
    }
    Ok(())
}

/// Says where a durable run is stored and how to resume it.
fn announce_store(handle: &RunHandle, path: &Path, named: bool) {
    let flag = if named {
        format!(" --store {}", path.display())
    } else {
        String::new()
    };
    eprintln!(
        "agentry: run {} is stored in {} (resume it with: agentry resume {}{flag})",
        handle.run_id(),
        path.display(),
        handle.run_id(),
    );
}

/// Creates the trace file (and its parents) now, so an unwritable path is reported
/// as bad input naming the file before anything runs. The run's trace writer
/// truncates it again when it starts.
fn check_trace_file(path: &Path) -> Result<(), RuntimeError> {
    let err = |source| RuntimeError::Trace {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::File::create(path).map(drop).map_err(err)
}
