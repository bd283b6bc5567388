//! Picking the adapter for a [`Provider`]: the policy of a run, or a factory
//! for its children.

use agentry_policy::{ChildPolicyFactory, Policy};

use crate::anthropic::AnthropicPolicy;
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

/// A factory for the runtime's child agents (`agent.spawn` without an inline
/// script): each child gets its own adapter for the same model, sharing one HTTP
/// client. Checks the configuration now; sends nothing.
pub fn child_policy_factory(
    provider: Provider,
    config: ModelConfig,
) -> Result<ChildPolicyFactory, ModelError> {
    Ok(match provider {
        Provider::OpenAi => {
            let prototype = OpenAiPolicy::new(config)?;
            std::sync::Arc::new(move |_| Some(Box::new(prototype.clone()) as Box<dyn Policy>))
        }
        Provider::Anthropic => {
            let prototype = AnthropicPolicy::new(config)?;
            std::sync::Arc::new(move |_| Some(Box::new(prototype.clone()) as Box<dyn Policy>))
        }
    })
}
