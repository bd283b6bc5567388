//! Which policy a run gets: a script or a model, from the flags or the task,
//! checked before anything runs; and the JSON a run stores so that `resume`
//! can rebuild the same policy (written by [`describe_policy`], read by
//! [`stored_policy`] and [`stored_task_dir`]).

use std::path::{Path, PathBuf};

use agentry::task::Compaction;
use agentry::{ChildPolicyFactory, Policy, RunConfig, RuntimeError, Script, TaskSpec};
use agentry_models::{CompactionMode, ModelConfig, ModelError, Provider};

use crate::args::{PolicyArg, RunArgs, absolute, parse_policy};
use crate::error::RunError;

/// The run's policy, and for a model policy the factory its child agents use.
pub(crate) struct LoadedPolicy {
    /// The run's own policy.
    pub(crate) policy: Box<dyn Policy>,
    /// How children spawned without an inline script get theirs (the same model).
    pub(crate) children: Option<ChildPolicyFactory>,
}

impl LoadedPolicy {
    /// A script file's policy (children pass their own scripts).
    pub(crate) fn script(path: &Path) -> Result<Self, RunError> {
        let script = Script::load(path)?;
        Ok(LoadedPolicy {
            policy: Box::new(script.into_policy()),
            children: None,
        })
    }
}

/// A policy choice and its model server, from the flags or the store.
pub(crate) struct PolicyChoice {
    /// Script or model.
    pub(crate) policy: PolicyArg,
    /// The model server, if one was named.
    pub(crate) base_url: Option<String>,
    /// The context window the run was started with, if one was set.
    pub(crate) context_tokens: Option<u64>,
}

/// How a model policy fits its requests: the window, if set, and what set it
/// (named in the printed line and in errors); the per-result cap.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContextSettings {
    /// The window in tokens; `None`: the model table's, else the default.
    pub(crate) context_tokens: Option<u64>,
    /// The flag or field that set `context_tokens`.
    pub(crate) set_by: &'static str,
    /// The per-result cap in bytes; `None`: the default.
    pub(crate) result_cap: Option<usize>,
    /// What happens to older turns that no longer fit.
    pub(crate) compaction: CompactionMode,
}

impl ContextSettings {
    /// `--context-tokens`, else the task's `[policy] context_tokens`.
    pub(crate) fn of_run(args: &RunArgs, task: &TaskSpec) -> Self {
        let (context_tokens, set_by) = match (args.context_tokens, task.context_tokens) {
            (Some(n), _) => (Some(n), "--context-tokens"),
            (None, n) => (n, "policy.context_tokens"),
        };
        ContextSettings {
            context_tokens,
            set_by,
            result_cap: task.result_cap,
            compaction: compaction_mode(task.compaction),
        }
    }
}

/// Builds the policy the flags (or the task) name. A model policy is checked
/// before anything runs: its key is present, its URL usable, its server answers.
pub(crate) async fn load_policy(args: &RunArgs, task: &TaskSpec) -> Result<LoadedPolicy, RunError> {
    // The task may name a model ([policy] model); the --policy flag wins.
    let from_task = match (&args.policy, &task.model) {
        (None, Some(spec)) => Some(parse_policy(spec).map_err(|m| {
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
            let settings = ContextSettings::of_run(args, task);
            return model_policy(*provider, model, base_url, settings).await;
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
    LoadedPolicy::script(&script_path)
}

/// A model policy, checked before anything runs, and its children's factory.
/// Prints the context window it fits requests to (on stderr: stdout may be
/// `--json`'s one object).
pub(crate) async fn model_policy(
    provider: Provider,
    model: &str,
    base_url: Option<&str>,
    settings: ContextSettings,
) -> Result<LoadedPolicy, RunError> {
    let mut config = ModelConfig::from_env(provider, model, base_url).map_err(RunError::Model)?;
    config.context_tokens = settings.context_tokens;
    if let Some(cap) = settings.result_cap {
        config.result_cap = cap;
    }
    config.compaction = settings.compaction;
    let window = config.window(settings.set_by).map_err(RunError::Model)?;
    eprintln!(
        "agentry: context window: {window}; {} reserved for output",
        config.max_output_tokens
    );
    let children =
        agentry_models::child_policy_factory(provider, config.clone()).map_err(RunError::Model)?;
    let policy = agentry_models::connect(provider, config)
        .await
        .map_err(RunError::Model)?;
    Ok(LoadedPolicy {
        policy,
        children: Some(children),
    })
}

/// The task's `[policy] compaction` as the adapters take it.
pub(crate) fn compaction_mode(c: Compaction) -> CompactionMode {
    match c {
        Compaction::Elide => CompactionMode::Elide,
        Compaction::Summarize => CompactionMode::Summarize,
    }
}

/// How `agentry resume` rebuilds the policy: the `--policy` flag (script paths
/// made absolute) or the task's, and the model server, as JSON.
pub(crate) fn describe_policy(args: &RunArgs, task: &TaskSpec) -> String {
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
        "context_tokens": args.context_tokens.or(task.context_tokens),
    })
    .to_string()
}

fn provider_prefix(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => "openai",
        Provider::Anthropic => "anthropic",
    }
}

/// The policy a stored run was started with (`run` records it as JSON).
pub(crate) fn stored_policy(spec: Option<&str>, run_id: &str) -> Result<PolicyChoice, RunError> {
    let missing = || {
        RunError::BadInput(RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message: "the store does not say which policy it ran with; pass --policy".into(),
        })
    };
    let value: serde_json::Value = spec
        .and_then(|s| serde_json::from_str(s).ok())
        .ok_or_else(missing)?;
    let policy = value
        .get("policy")
        .and_then(|p| p.as_str())
        .filter(|p| !p.is_empty())
        .ok_or_else(missing)?;
    let policy = parse_policy(policy).map_err(|m| {
        RunError::BadInput(RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message: format!("its stored policy {policy:?} is unusable ({m}); pass --policy"),
        })
    })?;
    let base_url = value
        .get("base_url")
        .and_then(|b| b.as_str())
        .map(str::to_string);
    let context_tokens = value.get("context_tokens").and_then(|n| n.as_u64());
    Ok(PolicyChoice {
        policy,
        base_url,
        context_tokens,
    })
}

/// The task directory a stored run came from, if the CLI started it.
pub(crate) fn stored_task_dir(config: &RunConfig) -> Option<PathBuf> {
    config
        .policy_spec
        .as_deref()
        .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
        .and_then(|v| v.get("task_dir")?.as_str().map(PathBuf::from))
        .filter(|d| d.join("task.toml").is_file())
}
