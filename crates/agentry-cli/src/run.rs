//! `agentry run`: load the task and its script, prepare a fresh working
//! directory, run on the built-in tools, and wire ctrl-c to a graceful shutdown.

use std::path::PathBuf;

use agentry::{ChildPolicyFactory, Grants, Policy, Runtime, RuntimeError, Script, TaskSpec};
use agentry_models::{ModelConfig, ModelError};

use crate::{PolicyArg, RunArgs};

/// Why `agentry run` produced no outcome.
#[derive(Debug)]
pub(crate) enum RunError {
    /// The task, script, flags or working directory are unusable, or the run could
    /// not start: nothing ran (exit 2).
    BadInput(RuntimeError),
    /// The model policy cannot be used: missing key, unusable URL, server
    /// unreachable. Nothing ran (exit 2).
    Model(ModelError),
    /// The run started but its outcome was lost (exit 1).
    Lost(RuntimeError),
}

/// Runs one task to its outcome (or, for a durable run, until it parks).
pub(crate) async fn run(args: RunArgs) -> Result<crate::durable::Finished, RunError> {
    let mut task = TaskSpec::load(&args.task_dir).map_err(|e| RunError::BadInput(e.into()))?;
    let (policy, children) = load_policy(&args, &task).await?;
    let policy_spec = describe_policy(&args, &task);
    if let Some(n) = args.max_steps {
        task.limits.max_steps = Some(n);
    }
    if let Some(d) = args.deadline {
        task.limits.deadline_ms = Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    }
    let trace = args.trace.as_deref().map(absolute);
    if let Some(path) = &trace {
        check_trace_file(path).map_err(RunError::BadInput)?;
    }
    let mut runtime = task.runtime().map_err(|e| RunError::BadInput(e.into()))?;
    let store = match (&args.store, args.no_store) {
        (_, true) => None,
        (Some(path), false) => {
            runtime = crate::durable::open_sqlite(path)
                .and_then(|store| runtime.with_store(store, args.durability.into()))
                .map_err(RunError::BadInput)?;
            Some(path.clone())
        }
        // The default store: durable unless it is unusable, which is reported
        // but does not stop a run nobody asked to be durable.
        (None, false) => {
            // A planted link or someone else's file there is refused outright.
            let path = crate::default_store().map_err(RunError::BadInput)?;
            let opened = path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    crate::durable::open_sqlite(&path)
                        .and_then(|store| runtime.clone().with_store(store, args.durability.into()))
                        .map_err(|e| e.to_string())
                });
            match opened {
                Ok(durable) => {
                    runtime = durable;
                    Some(path)
                }
                Err(e) => {
                    eprintln!(
                        "agentry: warning: the default store cannot be used ({e}); this run will not be resumable (pass --store FILE, or --no-store to silence this)"
                    );
                    None
                }
            }
        }
    };
    if let Some(path) = &store
        && let Some(id) = &args.run_id
        && runtime.stored_config(id).await.is_ok()
    {
        return Err(RunError::BadInput(
            agentry::store::StoreError::Conflict {
                path: path.display().to_string(),
                run_id: id.clone(),
            }
            .into(),
        ));
    }
    // The working directory is created last, so bad input leaves nothing behind.
    let workdir = task
        .prepare_workdir(args.workdir.as_deref())
        .map_err(|e| RunError::BadInput(e.into()))?;
    let mut config = task.run_config(workdir);
    config.trace = trace;
    config.run_id = args.run_id.clone();
    config.policy_spec = Some(policy_spec);
    if !args.approve.is_empty() {
        config.approval.pre_approved = Grants::new(args.approve.iter().cloned());
    }

    if let Some(factory) = children {
        // Children spawned without an inline script use the same model.
        runtime = runtime.with_child_policy(factory);
    }
    // Listening starts here, before the run: an early ctrl-c aborts it too.
    let interrupt = match Interrupts::listen() {
        Ok(signals) => Some(tokio::spawn(shutdown_on_interrupt(
            runtime.clone(),
            signals,
        ))),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for ctrl-c; interrupting will kill the process");
            None
        }
    };
    let handle = runtime
        .start_boxed(config, policy)
        .await
        .map_err(RunError::BadInput)?;
    tracing::info!(run_id = handle.run_id(), task_id = %task.task_id, "run started");
    if let Some(path) = &store {
        let flag = if args.store.is_some() {
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
    let finished = crate::durable::drive(&handle, &[], store.as_deref()).await;
    if let Some(task) = interrupt {
        task.abort();
    }
    finished
}

/// How `agentry resume` rebuilds the policy: the `--policy` flag (script paths
/// made absolute) or the task's, and the model server, as JSON.
fn describe_policy(args: &RunArgs, task: &TaskSpec) -> String {
    let policy = match (&args.policy, &task.model) {
        (Some(PolicyArg::Script(file)), _) => format!("script:{}", absolute(file).display()),
        (Some(PolicyArg::Model { provider, model }), _) => {
            format!("{}:{model}", provider_prefix(*provider))
        }
        (None, Some(spec)) => spec.clone(),
        (None, None) => task
            .script
            .as_deref()
            .map(|f| format!("script:{}", absolute(f).display()))
            .unwrap_or_default(),
    };
    let base_url = args.base_url.as_deref().or(task.base_url.as_deref());
    serde_json::json!({
        "policy": policy,
        "base_url": base_url,
        "task_dir": absolute(&task.dir),
    })
    .to_string()
}

/// The run's policy, and for a model policy the factory its child agents use.
pub(crate) type LoadedPolicy = (Box<dyn Policy>, Option<ChildPolicyFactory>);

/// Builds the policy the flags (or the task) name. A model policy is checked
/// before anything runs: its key is present, its URL usable, its server answers.
async fn load_policy(args: &RunArgs, task: &TaskSpec) -> Result<LoadedPolicy, RunError> {
    // The task may name a model ([policy] model); the --policy flag wins.
    let from_task = match (&args.policy, &task.model) {
        (None, Some(spec)) => Some(crate::parse_policy(spec).map_err(|m| {
            RunError::BadInput(RuntimeError::task(
                task.dir.join("task.toml"),
                format!("policy.model: {m}"),
            ))
        })?),
        _ => None,
    };
    let base_url = args.base_url.as_deref().or(task.base_url.as_deref());
    let script_path = match args.policy.as_ref().or(from_task.as_ref()) {
        Some(PolicyArg::Model { provider, model }) => {
            return model_policy(*provider, model, base_url).await;
        }
        Some(PolicyArg::Script(file)) => file.clone(),
        None => task.script.clone().ok_or_else(|| {
            RunError::BadInput(RuntimeError::task(
                task.dir.join(agentry::task::DEFAULT_SCRIPT),
                "no policy script: this file does not exist; create it, set [policy] script in task.toml, or pass --policy script:FILE",
            ))
        })?,
    };
    if args.base_url.is_some() {
        return Err(RunError::Model(ModelError::BadSpec {
            spec: "--base-url".into(),
            reason: "applies only to --policy openai:MODEL or anthropic:MODEL".into(),
        }));
    }
    let script = Script::load(&script_path).map_err(|e| RunError::BadInput(e.into()))?;
    Ok((Box::new(script.into_policy()), None))
}

fn provider_prefix(provider: agentry_models::Provider) -> &'static str {
    match provider {
        agentry_models::Provider::OpenAi => "openai",
        agentry_models::Provider::Anthropic => "anthropic",
    }
}

/// A model policy, checked before anything runs, and its children's factory.
pub(crate) async fn model_policy(
    provider: agentry_models::Provider,
    model: &str,
    base_url: Option<&str>,
) -> Result<LoadedPolicy, RunError> {
    let config = ModelConfig::from_env(provider, model, base_url).map_err(RunError::Model)?;
    let children =
        agentry_models::child_policy_factory(provider, config.clone()).map_err(RunError::Model)?;
    let policy = agentry_models::connect(provider, config)
        .await
        .map_err(RunError::Model)?;
    Ok((policy, Some(children)))
}

/// The first ctrl-c stops the run gracefully (in-flight tools cancelled, `user_abort`,
/// trace flushed); a second one exits at once.
pub(crate) async fn shutdown_on_interrupt(runtime: Runtime, mut signals: Interrupts) {
    if !signals.next().await {
        return;
    }
    eprintln!("agentry: interrupted, stopping the run (press ctrl-c again to exit at once)");
    runtime.shutdown();
    if signals.next().await {
        std::process::exit(130);
    }
}

/// Ctrl-c notifications. On unix the handler is installed by [`Interrupts::listen`]
/// itself (tokio's portable `ctrl_c()` installs it only when first polled), so once
/// `listen` returns, SIGINT can no longer kill the process before the run records
/// its stop.
pub(crate) struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    pub(crate) fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
            Ok(Interrupts { signal })
        }
        #[cfg(not(unix))]
        {
            Ok(Interrupts {})
        }
    }

    /// Waits for the next ctrl-c; false when no more can arrive.
    async fn next(&mut self) -> bool {
        #[cfg(unix)]
        {
            self.signal.recv().await.is_some()
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.is_ok()
        }
    }
}

/// Creates the trace file (and its parents) now, so an unwritable path is reported
/// as bad input naming the file before anything runs. The run's trace writer
/// truncates it again when it starts.
fn check_trace_file(path: &std::path::Path) -> Result<(), RuntimeError> {
    let err = |source| RuntimeError::Trace {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(err)?;
    }
    std::fs::File::create(path).map(drop).map_err(err)
}

/// Makes a path absolute against the current directory, without resolving links
/// (the file may not exist yet).
pub(crate) fn absolute(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
