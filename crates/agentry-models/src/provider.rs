//! Picking the adapter for a [`Provider`]: the policy of a run, or a factory
//! for its children; for one model or a fallback chain.

use agentry_policy::{ChildPolicyFactory, Policy};

use crate::anthropic::AnthropicPolicy;
use crate::chain::{ChainModel, FallbackPolicy};
use crate::config::{ModelConfig, Provider};
use crate::error::ModelError;
use crate::openai::OpenAiPolicy;

/// Builds the policy for `provider` and checks, before any run starts, that its
/// server answers at all (an unreachable server is an error here, not mid-run).
pub async fn connect(
    provider: Provider,
    config: ModelConfig,
) -> Result<Box<dyn Policy>, ModelError> {
    match provider {
        Provider::OpenAi => {
            let p = OpenAiPolicy::new(config)?;
            p.probe().await?;
            Ok(Box::new(p))
        }
        Provider::Anthropic => {
            let p = AnthropicPolicy::new(config)?;
            p.probe().await?;
            Ok(Box::new(p))
        }
    }
}

/// A connected chain: the policy, and the models whose server did not answer
/// at start (the caller warns about them; a later turn may still reach them).
pub struct ConnectedChain {
    /// The run's policy.
    pub policy: Box<dyn Policy>,
    /// Why each unreachable model of the chain did not answer, in chain order.
    pub unreachable: Vec<ModelError>,
}

/// Builds the policy for a chain of models (the primary first) and probes
/// every server before any run starts. A chain of one behaves as [`connect`].
/// With fallbacks, a server that does not answer is only reported in
/// [`ConnectedChain::unreachable`], so a down primary does not stop a run its
/// fallback can serve; when none answers, that is an error.
pub async fn connect_chain(models: Vec<ChainModel>) -> Result<ConnectedChain, ModelError> {
    let chain = FallbackPolicy::new(models)?;
    let mut unreachable = chain.probe().await;
    let count = chain.len();
    if unreachable.len() == count {
        return Err(match (count, unreachable.pop()) {
            (1, Some(only)) => only,
            (_, last) => ModelError::NoneReachable {
                reasons: unreachable
                    .iter()
                    .chain(last.as_ref())
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            },
        });
    }
    Ok(ConnectedChain {
        policy: chain.into_policy(),
        unreachable,
    })
}

/// A factory for the runtime's child agents (`agent.spawn` without an inline
/// script): each child gets its own adapter for the same model, sharing one HTTP
/// client. Checks the configuration now; sends nothing.
pub fn child_policy_factory(
    provider: Provider,
    config: ModelConfig,
) -> Result<ChildPolicyFactory, ModelError> {
    chain_policy_factory(vec![ChainModel::new(provider, config)])
}

/// [`child_policy_factory`] for a chain: each child gets the same chain, in the
/// same order.
pub fn chain_policy_factory(models: Vec<ChainModel>) -> Result<ChildPolicyFactory, ModelError> {
    let prototype = FallbackPolicy::new(models)?;
    Ok(std::sync::Arc::new(move |_| {
        Some(prototype.clone().into_policy())
    }))
}
