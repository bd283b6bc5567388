//! On start, the named agents' unfinished runs resume as `agentry resume`
//! resumes a run (its task's runtime and MCP servers rebuilt, the processes
//! an earlier attempt left fenced, its policy rebuilt: a named model from
//! serve.toml by name, else the policy it stored); inline tasks' runs are
//! `agentry_serve::App::resume_unfinished`'s. A resumed run hibernates after
//! serve.toml's `hibernate_after` as a new one does, and one stored asleep
//! with nothing open comes back hibernated: a restart brings into memory
//! only what was running.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentry::runtime::ResumeOptions;
use agentry::{RunConfig, TaskSpec};
use agentry_serve::{App, Launched, RunMeta, ServeFile};
use futures::future::BoxFuture;

use super::models::Gates;
use crate::args::{DurabilityArg, ResumeArgs};
use crate::error::RunError;
use crate::policy::LoadedPolicy;
use crate::resume::{Rebuilt, policy_for, runtime_for};
use crate::store::open_store;

/// What resuming a named agent's run needs of the service.
#[derive(Debug, Clone)]
pub(crate) struct Resumer {
    pub(crate) file: Arc<ServeFile>,
    pub(crate) gates: Arc<Gates>,
    /// The store (a file, or a `postgres://` URL).
    pub(crate) store: PathBuf,
    /// Lease mode's lease (a node of a cluster), if on.
    pub(crate) lease: Option<std::time::Duration>,
}

/// Resumes every unfinished run of a named agent in `app`'s store; a run that
/// cannot resume is reported and left in the store. Returns how many resumed.
pub(crate) async fn resume_agents(app: &App, resumer: &Resumer) -> usize {
    let runs = match app.runtime().unfinished_runs().await {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("agentry: serve: cannot list the unfinished runs: {e}");
            return 0;
        }
    };
    let mut resumed = 0;
    for run in runs {
        let Ok(config) = app.runtime().stored_config(&run.run_id).await else {
            continue;
        };
        let meta = RunMeta::stored(&config);
        if meta.agent.is_none() {
            continue;
        }
        match resume_one(resumer, &run.run_id, &config, &meta, AtRest::Stay).await {
            Ok(launched) => {
                eprintln!("agentry: serve: resumed run {}", run.run_id);
                app.adopt(launched);
                resumed += 1;
            }
            Err(e) => {
                eprintln!("agentry: serve: run {} not resumed: {e}", run.run_id);
            }
        }
    }
    resumed
}

/// How a resumed run that was stored asleep at rest comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtRest {
    /// Hibernated, until its next input wakes it.
    Stay,
    /// Awake: something for it (an input, a due timer) is on its way.
    Wake,
}

/// Resumes one named agent's run, in lease mode when `resumer` says so.
pub(crate) async fn resume_one(
    resumer: &Resumer,
    run_id: &str,
    config: &RunConfig,
    meta: &RunMeta,
    at_rest: AtRest,
) -> Result<Launched, RunError> {
    let Resumer {
        file,
        gates,
        store,
        lease,
    } = resumer;
    let Rebuilt { runtime, mcp } = runtime_for(config).await?;
    let runtime = runtime
        .with_store(
            open_store(store).map_err(RunError::BadInput)?,
            agentry::Durability::Strict,
        )
        .map_err(RunError::BadInput)?;
    let runtime = match lease {
        Some(lease) => runtime.with_lease(*lease),
        None => runtime,
    };
    let runtime = runtime.with_async_wake_policy(wake_policy(
        Arc::clone(file),
        Arc::clone(gates),
        store.to_path_buf(),
    ));
    let LoadedPolicy { policy, children } =
        resumed_policy(file, gates, store, run_id, config, meta).await?;
    let runtime = match children {
        Some(factory) => runtime.with_child_policy(factory),
        None => runtime,
    };
    let options = ResumeOptions::default()
        .hibernate_after(file.serve.hibernate_after())
        .dormant(at_rest == AtRest::Stay);
    let handle = runtime
        .resume_with(run_id, policy, options)
        .await
        .map_err(RunError::BadInput)?;
    let ended = handle.clone();
    tokio::spawn(async move {
        let _ = ended.wait().await;
        mcp.shutdown().await;
    });
    Ok(Launched {
        handle,
        meta: meta.clone(),
    })
}

/// A resumed run's policy: its named model from serve.toml (with the
/// model's one shared gate), else the policy it stored.
async fn resumed_policy(
    file: &ServeFile,
    gates: &Gates,
    store: &Path,
    run_id: &str,
    config: &RunConfig,
    meta: &RunMeta,
) -> Result<LoadedPolicy, RunError> {
    match &meta.model {
        Some(name) if file.models.contains_key(name) => {
            let dir = crate::policy::stored_task_dir(config).ok_or_else(|| {
                RunError::BadInput(agentry::RuntimeError::NotResumable {
                    run_id: run_id.to_string(),
                    message: "its task directory is gone".into(),
                })
            })?;
            let task = TaskSpec::load(&dir)?;
            super::models::named_policy(file, gates, name, &task).await
        }
        Some(_) | None => policy_for(&resume_args(run_id, store), config).await,
    }
}

/// Builds a resumed run's policy again each time it wakes, as its resume
/// built it.
fn wake_policy(
    file: Arc<ServeFile>,
    gates: Arc<Gates>,
    store: PathBuf,
) -> impl Fn(&RunConfig) -> BoxFuture<'static, Result<Box<dyn agentry::Policy>, agentry::RuntimeError>>
+ Send
+ Sync
+ 'static {
    move |config: &RunConfig| {
        let (file, gates, store, config) = (
            Arc::clone(&file),
            Arc::clone(&gates),
            store.clone(),
            config.clone(),
        );
        Box::pin(async move {
            let run_id = config.run_id.clone().unwrap_or_default();
            let meta = RunMeta::stored(&config);
            resumed_policy(&file, &gates, &store, &run_id, &config, &meta)
                .await
                .map(|l| l.policy)
                .map_err(|e| not_rebuilt(run_id, &e))
        })
    }
}

/// A woken run whose policy could not be built again: it cannot go on.
pub(super) fn not_rebuilt(run_id: String, e: &RunError) -> agentry::RuntimeError {
    agentry::RuntimeError::NotResumable {
        run_id,
        message: format!("its policy could not be built again: {e}"),
    }
}

/// `agentry resume RUN_ID --store STORE`, with the stored policy.
fn resume_args(run_id: &str, store: &Path) -> ResumeArgs {
    ResumeArgs {
        run_id: run_id.to_string(),
        store: Some(store.to_path_buf()),
        decide: Vec::new(),
        policy: None,
        base_url: None,
        fallback: Vec::new(),
        otlp: None,
        json: true,
        durability: DurabilityArg::Strict,
        lease: None,
    }
}
