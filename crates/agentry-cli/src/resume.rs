//! `agentry resume RUN_ID`: rebuild a stored run's runtime and policy, settle
//! the calls `--decide` names, and drive it on.

use agentry::mcp::McpServers;
use agentry::{RunConfig, Runtime, TaskSpec};
use agentry_models::CompactionMode;

use crate::args::{PolicyArg, ResumeArgs, absolute};
use crate::child_models::with_child_models;
use crate::drive::{Finished, drive};
use crate::error::RunError;
use crate::policy::{
    ContextSettings, LoadedPolicy, ModelOptions, PolicyChoice, compaction_mode, model_policy,
    stored_policy, stored_prompt_cache, stored_task_dir,
};
use crate::signals::CtrlC;
use crate::store::{existing, open_store, store_or_default};

/// `agentry resume RUN_ID --store FILE`.
pub(crate) async fn resume(args: ResumeArgs) -> Result<Finished, RunError> {
    let path = store_or_default(args.store.as_ref())
        .and_then(existing)
        .map_err(RunError::BadInput)?;
    let store = open_store(&path).map_err(RunError::BadInput)?;
    let config = RunConfig::from_store(&*store, &args.run_id).map_err(RunError::BadInput)?;
    let Rebuilt { runtime, mcp } = runtime_for(&config).await?;
    let runtime = runtime
        .with_store(store, args.durability.into())
        .map_err(RunError::BadInput)?;
    let runtime = match args.lease {
        Some(lease) => runtime.with_lease(lease),
        None => runtime,
    };
    let LoadedPolicy { policy, children } = policy_for(&args, &config).await?;
    let runtime = match children {
        Some(factory) => runtime.with_child_policy(factory),
        None => runtime,
    };
    let ctrl_c = CtrlC::listen(&runtime).ok();
    let handle = runtime
        .resume_boxed(&args.run_id, policy)
        .await
        .map_err(RunError::BadInput)?;
    if let Some(ctrl_c) = &ctrl_c {
        ctrl_c.attach(&handle);
    }
    if let Some(fenced) = handle.fenced() {
        report_fenced(&args.run_id, fenced);
    }
    let finished = drive(&handle, &args.decide, Some(&path)).await;
    drop(ctrl_c);
    mcp.shutdown().await;
    finished
}

/// Says on stderr what the resume killed of an earlier attempt (the run's
/// recorded process groups whose leader still lived, and processes marked
/// with the run) before it settled any call: the user learns that something
/// was still running, and what.
fn report_fenced(run_id: &str, fenced: &agentry::tools::proc::Fenced) {
    for pgid in &fenced.groups {
        eprintln!(
            "agentry: fenced process group {pgid}, left running by an earlier attempt of run {run_id}"
        );
    }
    for pid in &fenced.processes {
        eprintln!("agentry: fenced process {pid}, marked with run {run_id} by an earlier attempt");
    }
}

/// A stored run's runtime and the MCP servers its tools come from.
pub(crate) struct Rebuilt {
    pub(crate) runtime: Runtime,
    pub(crate) mcp: McpServers,
}

/// The task's own command and MCP tools are part of the stored
/// configuration's world: rebuild the registry (and the named child models)
/// from the task directory the run was started from, its MCP servers started
/// again in the run's working directory.
pub(crate) async fn runtime_for(config: &RunConfig) -> Result<Rebuilt, RunError> {
    match stored_task_dir(config) {
        Some(dir) => {
            let mut task = TaskSpec::load(&dir)?;
            // The run's stored sandbox, not the task file's current one: its
            // MCP servers run under what its processes run under.
            task.sandbox = config.sandbox.clone();
            let context = ContextSettings::of_task(&task);
            let sandboxes = task.sandboxes(&config.workdir, &config.sandbox_host)?;
            task.read_a2a_cards().await;
            let mcp = task.start_mcp(&config.workdir, &sandboxes).await?;
            let runtime = task.runtime_with(&mcp)?;
            Ok(Rebuilt {
                runtime: with_child_models(runtime, &task, context)?,
                mcp,
            })
        }
        None => Ok(Rebuilt {
            runtime: Runtime::with_builtins().map_err(RunError::BadInput)?,
            mcp: McpServers::default(),
        }),
    }
}

/// The task's `[policy] compaction`, when the run came from a task directory.
fn stored_compaction(config: &RunConfig) -> CompactionMode {
    stored_task_dir(config)
        .and_then(|dir| TaskSpec::load(&dir).ok())
        .map_or(CompactionMode::Elide, |task| {
            compaction_mode(task.compaction)
        })
}

/// `--policy` (and `--base-url`, `--fallback`), else the policy the run was
/// started with.
pub(crate) async fn policy_for(
    args: &ResumeArgs,
    config: &RunConfig,
) -> Result<LoadedPolicy, RunError> {
    let stored = stored_policy(config.policy_spec.as_ref(), &args.run_id);
    // The window and the CA file the run was started with hold whichever
    // policy resumes it.
    let stored_window = stored.as_ref().ok().and_then(|c| c.context_tokens);
    let stored_ca = stored.as_ref().ok().and_then(|c| c.ca_cert.clone());
    let PolicyChoice {
        policy,
        base_url,
        fallback,
        ca_cert,
        ..
    } = match &args.policy {
        Some(p) => PolicyChoice {
            policy: p.clone(),
            base_url: args.base_url.clone(),
            fallback: Vec::new(),
            ca_cert: stored_ca,
            context_tokens: None,
        },
        None => stored?,
    };
    let base_url = args.base_url.clone().or(base_url);
    let fallback = if args.fallback.is_empty() {
        fallback
    } else {
        args.fallback.clone()
    };
    match &policy {
        PolicyArg::Script(_) if !args.fallback.is_empty() => {
            Err(RunError::Model(agentry_models::ModelError::BadSpec {
                spec: "--fallback".into(),
                reason: "applies only to a model policy (openai:MODEL or anthropic:MODEL)".into(),
            }))
        }
        PolicyArg::Script(file) => LoadedPolicy::script(&absolute(file)),
        PolicyArg::Model { provider, model } => {
            let options = ModelOptions {
                fallback: &fallback,
                prompt_cache: stored_prompt_cache(config),
                ca_cert: ca_cert.as_deref(),
                context: ContextSettings {
                    context_tokens: stored_window,
                    set_by: "the stored run's context_tokens",
                    result_cap: Some(config.result_cap),
                    compaction: stored_compaction(config),
                },
            };
            model_policy(*provider, model, base_url.as_deref(), options).await
        }
    }
}
