//! `agentry run`: load the task and its policy, put the runtime on its store,
//! prepare a fresh working directory, start the run with ctrl-c wired to an
//! interrupt (at a terminal) or a graceful shutdown, and drive it to its outcome.

use std::path::{Path, PathBuf};

use agentry::mcp::McpServers;
use agentry::protocol::stored_policy::StoredPolicy;
use agentry::{Grants, Policy, RunConfig, RunHandle, Runtime, RuntimeError, TaskSpec};

use crate::args::{RunArgs, absolute};
use crate::child_models::with_child_models;
use crate::drive::{Finished, drive};
use crate::error::RunError;
use crate::policy::{ContextSettings, LoadedPolicy, describe_policy, load_policy};
use crate::signals::CtrlC;
use crate::store::{default_store, open_store as open_store_at};

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
    /// The task's MCP servers, started: shut them down once the run ends.
    pub(crate) mcp: McpServers,
}

/// Runs one task to its outcome (or, for a durable run, until it parks).
pub(crate) async fn run(args: RunArgs) -> Result<Finished, RunError> {
    let Prepared {
        runtime,
        config,
        policy,
        store,
        mcp,
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
    mcp.shutdown().await;
    finished
}

/// Loads the task and its policy and puts the runtime on its store. Bad input
/// is found before anything is created; the working directory comes last.
pub(crate) async fn prepare(args: &RunArgs) -> Result<Prepared, RunError> {
    let task = TaskSpec::load(&args.task_dir)?;
    let loaded = load_policy(args, &task).await?;
    let policy_spec = describe_policy(args, &task);
    prepare_with(args, task, loaded, policy_spec).await
}

/// [`prepare`] with the task loaded and its policy chosen (`agentry serve`
/// chooses a named model's).
pub(crate) async fn prepare_with(
    args: &RunArgs,
    mut task: TaskSpec,
    loaded: LoadedPolicy,
    policy_spec: StoredPolicy,
) -> Result<Prepared, RunError> {
    let LoadedPolicy { policy, children } = loaded;
    override_limits(args, &mut task);
    let trace = args.trace.as_deref().map(absolute);
    if let Some(path) = &trace {
        check_trace_file(path).map_err(RunError::BadInput)?;
    }
    // The working directory is made before the MCP servers (their working
    // directory) and removed again if anything after it fails, so bad input
    // leaves nothing behind.
    let fresh = FreshWorkdir::prepare(&task, args.workdir.as_deref())?;
    let store_file = crate::store::store_of(args.store.as_ref(), args.no_store);
    let sandbox_host = crate::store::sandbox_host(store_file.as_deref());
    let sandboxes = task.sandboxes(&fresh.path, &sandbox_host)?;
    task.read_a2a_cards().await;
    let mcp = task.start_mcp(&fresh.path, &sandboxes).await?;
    let Stored { runtime, path } = open_store(args, task.runtime_with(&mcp)?)?;
    let runtime = with_child_models(runtime, &task, ContextSettings::of_run(args, &task))?;
    refuse_taken_run_id(&runtime, path.as_deref(), args.run_id.as_deref()).await?;
    let mut config = task.run_config(fresh.keep());
    config.sandbox_host = sandbox_host;
    config.trace = trace;
    config.run_id = args.run_id.clone();
    config.policy_spec = Some(policy_spec);
    // What `agentry replay` needs from the trace alone.
    config.origin = Some(agentry::protocol::trace::TraceOrigin {
        task_dir: Some(absolute(&task.dir).display().to_string()),
        workdir: Some(config.workdir.display().to_string()),
        approved: args.approve.clone(),
    });
    if !args.approve.is_empty() {
        // On top of what the task approves up front (an MCP override's `approve = false`).
        let entries = config.approval.pre_approved.entries().iter();
        config.approval.pre_approved = Grants::new(entries.chain(&args.approve).cloned());
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
        mcp,
    })
}

/// A working directory made for this run, removed on drop unless kept: the
/// start failed after it was made.
pub(crate) struct FreshWorkdir {
    pub(crate) path: PathBuf,
    /// The user named an empty directory that already existed: empty it, do
    /// not remove it.
    existed: bool,
    kept: bool,
}

impl FreshWorkdir {
    pub(crate) fn prepare(task: &TaskSpec, named: Option<&Path>) -> Result<FreshWorkdir, RunError> {
        let existed = named.is_some_and(Path::exists);
        let path = task.prepare_workdir(named)?;
        Ok(FreshWorkdir {
            path,
            existed,
            kept: false,
        })
    }

    pub(crate) fn keep(mut self) -> PathBuf {
        self.kept = true;
        std::mem::take(&mut self.path)
    }
}

impl Drop for FreshWorkdir {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        let removed = if self.existed {
            std::fs::read_dir(&self.path).and_then(|entries| {
                entries.flatten().try_for_each(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => std::fs::remove_dir_all(e.path()),
                    Ok(_) | Err(_) => std::fs::remove_file(e.path()),
                })
            })
        } else {
            std::fs::remove_dir_all(&self.path)
        };
        if let Err(e) = removed {
            eprintln!(
                "agentry: warning: could not remove the working directory {}: {e}",
                self.path.display()
            );
        }
    }
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
            let runtime = open_store_at(path)
                .and_then(|store| runtime.with_store(store, durability))
                .map_err(RunError::BadInput)?;
            let runtime = match args.lease {
                Some(lease) => runtime.with_lease(lease),
                None => runtime,
            };
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
                    open_store_at(&path)
                        .and_then(|store| runtime.clone().with_store(store, durability))
                        .map_err(|e| e.to_string())
                });
            Ok(match opened {
                Ok(durable) => Stored {
                    runtime: match args.lease {
                        Some(lease) => durable.with_lease(lease),
                        None => durable,
                    },
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
    agentry_files::create_output(path, false)
        .map(drop)
        .map_err(err)
}
