//! A named model of serve.toml (`[models.NAME]`) as a run's policy: the
//! model and its `fallback` models in order, each with its key read only
//! from the server's environment (`api_key_env`), built with the same
//! adapters, context settings and checks as `agentry run`'s model policy.
//!
//! Each named model has one [`ModelGate`] for the life of the server
//! ([`Gates`]): every run on the model shares it, also a run that reaches it
//! as another model's fallback, so `max_concurrent`, the per-minute budgets
//! and a provider's `Retry-After` hold across runs; on a Postgres store,
//! `max_concurrent` holds across the cluster's nodes (`model_slots`). `input_price` and
//! `output_price` charge each turn's money to the run's budget.

use std::collections::BTreeMap;
use std::sync::Arc;

use agentry::TaskSpec;
use agentry::protocol::stored_policy::{RootSpec, StoredFallback};
use agentry_models::{
    ChainModel, GateLimits, ModelConfig, ModelError, ModelGate, Prices, Provider, SharedInFlight,
};
use agentry_serve::{ModelEntry, ModelLoad, ServeFile, micros_of};

use crate::error::RunError;
use crate::policy::{ContextSettings, LoadedPolicy, chain_policy, provider_prefix};

/// The provider a (checked) entry names.
fn provider(entry: &ModelEntry) -> Provider {
    match entry.provider.as_str() {
        "anthropic" => Provider::Anthropic,
        _ => Provider::OpenAi,
    }
}

/// The key of `name`'s entry from its variable; `None` without `api_key_env`
/// (a local server that takes no key). A variable not set is an error naming
/// the setting.
pub(crate) fn key_of(name: &str, entry: &ModelEntry) -> Result<Option<String>, ModelError> {
    let Some(var) = &entry.api_key_env else {
        return Ok(None);
    };
    match std::env::var(var) {
        Ok(key) if !key.trim().is_empty() => Ok(Some(key)),
        Ok(_) | Err(_) => Err(ModelError::BadSpec {
            spec: format!("models.{name}.api_key_env"),
            reason: format!("the environment variable {var} is not set"),
        }),
    }
}

/// `name` and its fallbacks, in order.
fn chain_names<'a>(file: &'a ServeFile, name: &'a str) -> Vec<(&'a str, &'a ModelEntry)> {
    let first = file.models.get_key_value(name);
    let rest = first
        .into_iter()
        .flat_map(|(_, entry)| entry.fallback.iter())
        .filter_map(|other| file.models.get_key_value(other.as_str()));
    first
        .into_iter()
        .chain(rest)
        .map(|(n, e)| (n.as_str(), e))
        .collect()
}

/// Checks at start that every key a named model needs is there.
pub(crate) fn check_keys(file: &ServeFile, name: &str) -> Result<(), ModelError> {
    for (n, entry) in chain_names(file, name) {
        key_of(n, entry)?;
    }
    Ok(())
}

/// One shared gate per named model, made once when the server starts.
#[derive(Debug, Default)]
pub(crate) struct Gates(BTreeMap<String, Arc<ModelGate>>);

impl Gates {
    /// A gate for every `[models.NAME]`, with its limits; with `shared`,
    /// each model's `max_concurrent` also holds across every process
    /// sharing it (a cluster's database).
    pub(crate) fn of(file: &ServeFile, shared: Option<Arc<dyn SharedInFlight>>) -> Gates {
        Gates(
            file.models
                .iter()
                .map(|(name, entry)| {
                    let limits = GateLimits {
                        max_concurrent: entry.max_concurrent,
                        requests_per_minute: entry.requests_per_minute,
                        tokens_per_minute: entry.tokens_per_minute,
                    };
                    let gate = match &shared {
                        Some(slots) => ModelGate::with_shared(limits, name, Arc::clone(slots)),
                        None => ModelGate::new(limits),
                    };
                    (name.clone(), gate)
                })
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<Arc<ModelGate>> {
        self.0.get(name).cloned()
    }

    /// Each model's requests in flight and held back now.
    pub(crate) fn loads(&self) -> Vec<ModelLoad> {
        self.0
            .iter()
            .map(|(name, gate)| {
                let usage = gate.usage();
                ModelLoad {
                    model: name.clone(),
                    in_flight: usage.in_flight,
                    throttled: usage.waiting,
                }
            })
            .collect()
    }
}

/// A million tokens' price as the adapters take it (millionths).
fn prices(entry: &ModelEntry) -> Option<Prices> {
    if entry.input_price.is_none() && entry.output_price.is_none() {
        return None;
    }
    let micros = |price: Option<f64>| price.and_then(micros_of).unwrap_or(0);
    Some(Prices {
        input_micros_per_mtok: micros(entry.input_price),
        output_micros_per_mtok: micros(entry.output_price),
        ..Prices::default()
    })
}

/// One model of the chain, configured as `agentry run` configures its models.
fn chain_model(
    name: &str,
    entry: &ModelEntry,
    task: &TaskSpec,
    gates: &Gates,
) -> Result<ChainModel, RunError> {
    let provider = provider(entry);
    let base = entry
        .base_url
        .as_deref()
        .unwrap_or(provider.default_base_url());
    let mut config = ModelConfig::new(&entry.model, base).prompt_cache(task.prompt_cache);
    if let Some(key) = key_of(name, entry).map_err(RunError::Model)? {
        config = config.api_key(key);
    }
    if let Some(path) = &entry.ca_cert {
        config = config.ca_cert(path);
    }
    if let Some(prices) = prices(entry) {
        config = config.prices(prices);
    }
    config.gate = gates.get(name);
    config.label = Some(name.to_string());
    let mut context = ContextSettings::of_task(task);
    if entry.context_tokens.is_some() {
        context.context_tokens = entry.context_tokens;
        context.set_by = "context_tokens of serve.toml's model";
    }
    context.apply(&mut config);
    config.window(context.set_by).map_err(RunError::Model)?;
    Ok(ChainModel::new(provider, config))
}

/// The named model's chain as a run's policy.
pub(crate) async fn named_policy(
    file: &ServeFile,
    gates: &Gates,
    name: &str,
    task: &TaskSpec,
) -> Result<LoadedPolicy, RunError> {
    let chain = chain_names(file, name)
        .into_iter()
        .map(|(n, entry)| chain_model(n, entry, task, gates))
        .collect::<Result<Vec<_>, _>>()?;
    chain_policy(chain).await
}

/// What a run on the named model stores (for the trace and `agentry runs`;
/// `agentry serve` rebuilds it from serve.toml by name on resume).
pub(crate) fn describe(file: &ServeFile, name: &str, task: &TaskSpec) -> RootSpec {
    let spec = |entry: &ModelEntry| format!("{}:{}", provider_prefix(provider(entry)), entry.model);
    let chain = chain_names(file, name);
    let Some(((_, first), rest)) = chain.split_first() else {
        return RootSpec::default();
    };
    let text = |path: &std::path::Path| {
        std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string()
    };
    RootSpec {
        policy: spec(first),
        base_url: first.base_url.clone(),
        fallback: rest
            .iter()
            .map(|(_, e)| StoredFallback {
                model: spec(e),
                base_url: e.base_url.clone(),
            })
            .collect(),
        prompt_cache: Some(task.prompt_cache),
        task_dir: Some(text(&task.dir)),
        ca_cert: first.ca_cert.as_deref().map(text),
        context_tokens: first.context_tokens.or(task.context_tokens),
        ..RootSpec::default()
    }
}
