//! `[policy.models.NAME]`: the models a run's children may ask for by name
//! (`agent.spawn {"model": NAME}`), each checked before the run starts: a
//! model's key, URL and window; a script's file.

use std::sync::Arc;

use agentry::task::ChildModelSpec;
use agentry::{ChildPolicyFactory, Policy, Runtime, RuntimeError, Script, TaskSpec};
use agentry_models::Provider;

use crate::error::RunError;
use crate::policy::{ContextSettings, ModelOptions, chain_model};

/// `runtime` with every named child model of `task`; the models use the task's
/// CA file, prompt-cache setting and `context` like the run's own model.
pub(crate) fn with_child_models(
    mut runtime: Runtime,
    task: &TaskSpec,
    context: ContextSettings,
) -> Result<Runtime, RunError> {
    for (name, spec) in &task.child_models {
        let factory = match spec {
            ChildModelSpec::Script(path) => script_factory(Script::load(path)?),
            ChildModelSpec::Model { model, base_url } => {
                model_factory(task, &context, name, model, base_url.as_deref())?
            }
        };
        runtime = runtime.with_child_model(name, factory);
    }
    Ok(runtime)
}

/// Each child gets its own copy of the script.
fn script_factory(script: Script) -> ChildPolicyFactory {
    Arc::new(move |_| Some(Box::new(script.clone().into_policy()) as Box<dyn Policy>))
}

/// Each child gets its own adapter for the model (no server is probed now: a
/// child model that is down fails that child's turns, not the run's start).
fn model_factory(
    task: &TaskSpec,
    context: &ContextSettings,
    name: &str,
    spec: &str,
    base_url: Option<&str>,
) -> Result<ChildPolicyFactory, RunError> {
    let (provider, model) = match Provider::parse_spec(spec) {
        Some(Ok(parsed)) => parsed,
        Some(Err(e)) => return Err(RunError::Model(e)),
        None => {
            return Err(RunError::BadInput(RuntimeError::task(
                task.dir.join("task.toml"),
                format!(
                    "policy.models.{name}.model: expected \"openai:MODEL\" or \"anthropic:MODEL\", found {spec:?}"
                ),
            )));
        }
    };
    let options = ModelOptions {
        fallback: &[],
        prompt_cache: task.prompt_cache,
        ca_cert: task.ca_cert.as_deref(),
        context: *context,
    };
    let fitted = chain_model(provider, &model, base_url, &options)?;
    agentry_models::chain_policy_factory(vec![fitted.model]).map_err(RunError::Model)
}
