//! Which policy a run gets: a script or a model, from the flags or the task,
//! checked before anything runs; and the description a run stores so that
//! `resume` can rebuild the same policy (written by [`describe_policy`], read by
//! [`stored_policy`] and [`stored_task_dir`]).

use std::path::{Path, PathBuf};

use agentry::protocol::stored_policy::{RootSpec, StoredFallback, StoredPolicy};
use agentry::task::Compaction;
use agentry::{ChildPolicyFactory, Policy, RunConfig, RuntimeError, Script, TaskSpec};
use agentry_models::{
    ChainModel, CompactionMode, ContextWindow, ModelConfig, ModelError, Provider,
};

use crate::args::{FallbackArg, PolicyArg, RunArgs, absolute, fallback_model, parse_policy};
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
    /// The fallback models, in order.
    pub(crate) fallback: Vec<FallbackArg>,
    /// The extra CA file the run was started with (`[policy] ca_cert`).
    pub(crate) ca_cert: Option<PathBuf>,
    /// The context window the run was started with, if one was set.
    pub(crate) context_tokens: Option<u64>,
}

/// What a model policy is built from besides its own name and server.
pub(crate) struct ModelOptions<'a> {
    /// The fallback models, in order.
    pub(crate) fallback: &'a [FallbackArg],
    /// Prompt-cache marks on requests.
    pub(crate) prompt_cache: bool,
    /// A CA file trusted besides the system's and SSL_CERT_FILE's
    /// (`[policy] ca_cert`), by every model of the chain.
    pub(crate) ca_cert: Option<&'a Path>,
    /// How requests fit the context window.
    pub(crate) context: ContextSettings,
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
    /// Sets the window, the per-result cap and the compaction on `config`.
    pub(crate) fn apply(&self, config: &mut ModelConfig) {
        config.context_tokens = self.context_tokens;
        if let Some(cap) = self.result_cap {
            config.result_cap = cap;
        }
        config.compaction = self.compaction;
    }

    /// The task's own settings (`[policy] context_tokens`, `result_cap`,
    /// `compaction`).
    pub(crate) fn of_task(task: &TaskSpec) -> Self {
        ContextSettings {
            context_tokens: task.context_tokens,
            set_by: "policy.context_tokens",
            result_cap: task.result_cap,
            compaction: compaction_mode(task.compaction),
        }
    }

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
            let fallback = run_fallback(args, task)?;
            let options = ModelOptions {
                fallback: &fallback,
                prompt_cache: task.prompt_cache,
                ca_cert: task.ca_cert.as_deref(),
                context: ContextSettings::of_run(args, task),
            };
            return model_policy(*provider, model, base_url, options).await;
        }
        Some(PolicyArg::Script(file)) => file.clone(),
        None => task.script.clone().ok_or_else(|| {
            RunError::BadInput(RuntimeError::task(
                task.dir.join(agentry::task::DEFAULT_SCRIPT),
                "no policy script: this file does not exist; create it, set [policy] script in task.toml, or pass --policy script:FILE",
            ))
        })?,
    };
    for (flag, given) in [
        ("--base-url", args.base_url.is_some()),
        ("--fallback", !args.fallback.is_empty()),
    ] {
        if given {
            return Err(RunError::Model(ModelError::BadSpec {
                spec: flag.into(),
                reason: "applies only to --policy openai:MODEL or anthropic:MODEL".into(),
            }));
        }
    }
    LoadedPolicy::script(&script_path)
}

/// The run's fallback models: `--fallback` flags, else task.toml's.
fn run_fallback(args: &RunArgs, task: &TaskSpec) -> Result<Vec<FallbackArg>, RunError> {
    if !args.fallback.is_empty() {
        return Ok(args.fallback.clone());
    }
    task.fallback
        .iter()
        .enumerate()
        .map(|(i, f)| {
            fallback_model(&f.model, f.base_url.clone()).map_err(|m| {
                RunError::BadInput(RuntimeError::task(
                    task.dir.join("task.toml"),
                    format!("policy.fallback[{i}]: {m}"),
                ))
            })
        })
        .collect()
}

/// A model policy with its fallback chain, checked before anything runs (every
/// key present, every URL usable, at least one server answering), and its
/// children's factory (the same chain). Prints the primary's context window
/// (on stderr: stdout may be `--json`'s one object).
pub(crate) async fn model_policy(
    provider: Provider,
    model: &str,
    base_url: Option<&str>,
    options: ModelOptions<'_>,
) -> Result<LoadedPolicy, RunError> {
    let primary = chain_model(provider, model, base_url, &options)?;
    eprintln!(
        "agentry: context window: {}; {} reserved for output",
        primary.window, primary.model.config.max_output_tokens
    );
    let mut chain = vec![primary.model];
    for f in options.fallback {
        chain.push(chain_model(f.provider, &f.model, f.base_url.as_deref(), &options)?.model);
    }
    chain_policy(chain).await
}

/// A chain of models as a run's policy, checked (at least one server
/// answers), and its children's factory (the same chain).
pub(crate) async fn chain_policy(chain: Vec<ChainModel>) -> Result<LoadedPolicy, RunError> {
    let children = agentry_models::chain_policy_factory(chain.clone()).map_err(RunError::Model)?;
    let connected = agentry_models::connect_chain(chain)
        .await
        .map_err(RunError::Model)?;
    for e in &connected.unreachable {
        eprintln!(
            "agentry: warning: {e}; its turns go to the next model of the fallback chain until it answers"
        );
    }
    Ok(LoadedPolicy {
        policy: connected.policy,
        children: Some(children),
    })
}

/// One model of a chain and the context window it fits requests to.
pub(crate) struct FittedModel {
    pub(crate) model: ChainModel,
    pub(crate) window: ContextWindow,
}

/// One model as `options` configure it (key from its provider's variable, the
/// prompt cache, the CA file, the context settings), and the window it fits
/// requests to; a window not above the reserved output is an error.
pub(crate) fn chain_model(
    provider: Provider,
    model: &str,
    base_url: Option<&str>,
    options: &ModelOptions<'_>,
) -> Result<FittedModel, RunError> {
    let mut config = ModelConfig::from_env(provider, model, base_url)
        .map_err(RunError::Model)?
        .prompt_cache(options.prompt_cache);
    if let Some(path) = options.ca_cert {
        config = config.ca_cert(path);
    }
    options.context.apply(&mut config);
    let window = config
        .window(options.context.set_by)
        .map_err(RunError::Model)?;
    Ok(FittedModel {
        model: ChainModel::new(provider, config),
        window,
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
/// made absolute) or the task's, the model server and the fallback chain.
pub(crate) fn describe_policy(args: &RunArgs, task: &TaskSpec) -> StoredPolicy {
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
    // The chain as the run uses it: the flags', else the task's (a script
    // policy has none).
    let fallback: Vec<StoredFallback> = match (&args.policy, args.fallback.is_empty()) {
        (Some(PolicyArg::Script(_)), _) => Vec::new(),
        (_, false) => args
            .fallback
            .iter()
            .map(|f| StoredFallback {
                model: format!("{}:{}", provider_prefix(f.provider), f.model),
                base_url: f.base_url.clone(),
            })
            .collect(),
        (_, true) => task
            .fallback
            .iter()
            .map(|f| StoredFallback {
                model: f.model.clone(),
                base_url: f.base_url.clone(),
            })
            .collect(),
    };
    let text = |path: &Path| absolute(path).display().to_string();
    StoredPolicy::Root(RootSpec {
        policy,
        base_url: base_url.map(str::to_string),
        fallback,
        prompt_cache: Some(task.prompt_cache),
        task_dir: Some(text(&task.dir)),
        ca_cert: task.ca_cert.as_deref().map(text),
        context_tokens: args.context_tokens.or(task.context_tokens),
        ..RootSpec::default()
    })
}

pub(crate) fn provider_prefix(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => "openai",
        Provider::Anthropic => "anthropic",
    }
}

/// The policy a stored run was started with (`run` records it: a
/// [`RootSpec`]).
pub(crate) fn stored_policy(
    spec: Option<&StoredPolicy>,
    run_id: &str,
) -> Result<PolicyChoice, RunError> {
    let refused = |message: String| {
        RunError::BadInput(RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message,
        })
    };
    let missing =
        || refused("the store does not say which policy it ran with; pass --policy".into());
    let Some(StoredPolicy::Root(root)) = spec else {
        return Err(missing());
    };
    if root.policy.is_empty() {
        return Err(missing());
    }
    let policy = parse_policy(&root.policy).map_err(|m| {
        refused(format!(
            "its stored policy {:?} is unusable ({m}); pass --policy",
            root.policy
        ))
    })?;
    let fallback = root
        .fallback
        .iter()
        .map(|f| fallback_model(&f.model, f.base_url.clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| {
            refused(format!(
                "its stored fallback models are unusable ({m}); pass --policy"
            ))
        })?;
    Ok(PolicyChoice {
        policy,
        base_url: root.base_url.clone(),
        fallback,
        ca_cert: root.ca_cert.as_deref().map(PathBuf::from),
        context_tokens: root.context_tokens,
    })
}

/// The root description a run stored, if the CLI (or the service) stored one.
fn stored_root(config: &RunConfig) -> Option<&RootSpec> {
    match config.policy_spec.as_ref()? {
        StoredPolicy::Root(root) => Some(root),
        StoredPolicy::Child(_) | StoredPolicy::Text(_) => None,
    }
}

/// Whether a stored run marks requests for the prompt cache (on unless its
/// task turned it off).
pub(crate) fn stored_prompt_cache(config: &RunConfig) -> bool {
    stored_root(config)
        .and_then(|root| root.prompt_cache)
        .unwrap_or(true)
}

/// The task directory a stored run came from, if the CLI started it.
pub(crate) fn stored_task_dir(config: &RunConfig) -> Option<PathBuf> {
    stored_root(config)
        .and_then(|root| root.task_dir.as_deref())
        .map(PathBuf::from)
        .filter(|d| d.join("task.toml").is_file())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};

    fn run_args(args: &[&str]) -> RunArgs {
        let mut all = vec!["agentry", "run", "examples/sum"];
        all.extend(args);
        let command = Cli::parse_from(all).command;
        let Command::Run(args) = command else {
            panic!("{command:?}")
        };
        args
    }

    fn task(policy: &str) -> TaskSpec {
        let text = format!("goal = \"g\"\n[policy]\n{policy}");
        TaskSpec::parse(&text, Path::new("/nowhere/t")).unwrap()
    }

    /// What `run` stores is what `resume` rebuilds: the chain from the flags
    /// (which replace the task's), or else the task's, and prompt_cache.
    #[test]
    fn the_stored_policy_carries_the_fallback_chain_for_resume() {
        let task = task(
            "model = \"openai:a\"\nprompt_cache = false\n\
             fallback = [\"anthropic:b\", { model = \"openai:c\", base_url = \"http://127.0.0.1:9/v1\" }]",
        );
        let stored = describe_policy(&run_args(&[]), &task);
        let choice = stored_policy(Some(&stored), "r").unwrap();
        let expected = [
            FallbackArg {
                provider: Provider::Anthropic,
                model: "b".into(),
                base_url: None,
            },
            FallbackArg {
                provider: Provider::OpenAi,
                model: "c".into(),
                base_url: Some("http://127.0.0.1:9/v1".into()),
            },
        ];
        assert_eq!(choice.fallback, expected);
        let mut config = RunConfig::new("g", "/nowhere/w");
        config.policy_spec = Some(stored);
        assert!(!stored_prompt_cache(&config));

        let flags = run_args(&["--fallback", "anthropic:z=http://127.0.0.1:8"]);
        let stored = describe_policy(&flags, &task);
        let choice = stored_policy(Some(&stored), "r").unwrap();
        assert_eq!(choice.fallback, flags.fallback);

        // Runs stored before fallbacks existed: no chain, cache marks on.
        let old = StoredPolicy::parse(r#"{"policy": "openai:a", "base_url": null}"#);
        assert!(stored_policy(Some(&old), "r").unwrap().fallback.is_empty());
        config.policy_spec = Some(old);
        assert!(stored_prompt_cache(&config));
    }

    /// A run stored by an `agentry` before the description was typed (the
    /// text inside `policy_spec`, nulls and all) resumes with what it stored.
    #[test]
    fn a_description_stored_before_it_was_typed_is_read_for_resume() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("task.toml"), "goal = \"g\"\n").unwrap();
        let text = format!(
            r#"{{"base_url":"http://127.0.0.1:9/v1","ca_cert":null,"context_tokens":9000,"fallback":[{{"base_url":null,"model":"anthropic:b"}}],"policy":"openai:a","prompt_cache":false,"task_dir":{:?}}}"#,
            dir.path().display().to_string()
        );
        // The configuration as the store keeps it: `policy_spec` a JSON string.
        let mut stored = serde_json::to_value(RunConfig::new("g", "/nowhere/w")).unwrap();
        stored["policy_spec"] = serde_json::Value::String(text);
        let config: RunConfig = serde_json::from_value(stored).unwrap();
        let choice = stored_policy(config.policy_spec.as_ref(), "r").unwrap();
        assert_eq!(
            choice.policy,
            PolicyArg::Model {
                provider: Provider::OpenAi,
                model: "a".into()
            }
        );
        assert_eq!(choice.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(
            choice.fallback,
            [FallbackArg {
                provider: Provider::Anthropic,
                model: "b".into(),
                base_url: None,
            }]
        );
        assert_eq!((choice.ca_cert, choice.context_tokens), (None, Some(9000)));
        assert!(!stored_prompt_cache(&config));
        assert_eq!(stored_task_dir(&config).as_deref(), Some(dir.path()));
    }
}
