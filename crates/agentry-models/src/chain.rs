//! The fallback chain: models tried in order for each turn.
//!
//! A turn goes to the first model; when that model's server is unavailable
//! after its retries (connection refused, 5xx, 429 past the `Retry-After`
//! limit, a stall: [`ModelTurn::unavailable`]), the next model takes the same
//! turn, and so on. Every turn starts again at the first model, so a primary
//! that comes back is used again at once. The output names the model that
//! decided ([`PolicyOutput::model`]), which the trace records per step.
//!
//! Only unavailability passes a turn on. A 400 or a malformed reply is a
//! problem of this request, which another model would most likely refuse too
//! (and the model must see it to correct itself); a 401/403 is a
//! configuration error the operator must fix, which a fallback would hide
//! while spending another provider's money. Both end the turn as they do
//! without a chain.

use std::time::Instant;

use agentry_policy::{Policy, PolicyContext};
use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::decision::{Decision, PolicyOutput};
use async_trait::async_trait;

use crate::anthropic::AnthropicPolicy;
use crate::config::{ModelConfig, Provider};
use crate::error::ModelError;
use crate::openai::OpenAiPolicy;
use crate::turn::ModelTurn;

/// One model of a chain: its wire protocol and how to reach it.
#[derive(Debug, Clone)]
pub struct ChainModel {
    /// The wire protocol.
    pub provider: Provider,
    /// Model name, server, key and limits.
    pub config: ModelConfig,
}

impl ChainModel {
    /// A model of `provider` with this configuration.
    pub fn new(provider: Provider, config: ModelConfig) -> Self {
        ChainModel { provider, config }
    }
}

/// One adapter of the chain.
// Clone is cheap (HTTP clients are shared): one clone per child agent.
#[derive(Clone)]
enum Adapter {
    OpenAi(OpenAiPolicy),
    Anthropic(AnthropicPolicy),
}

impl Adapter {
    fn new(model: ChainModel) -> Result<Self, ModelError> {
        Ok(match model.provider {
            Provider::OpenAi => Adapter::OpenAi(OpenAiPolicy::new(model.config)?),
            Provider::Anthropic => Adapter::Anthropic(AnthropicPolicy::new(model.config)?),
        })
    }

    fn name(&self) -> String {
        match self {
            Adapter::OpenAi(p) => p.name(),
            Adapter::Anthropic(p) => p.name(),
        }
    }

    async fn turn(&mut self, ctx: PolicyContext<'_>) -> ModelTurn {
        match self {
            Adapter::OpenAi(p) => p.turn(ctx).await,
            Adapter::Anthropic(p) => p.turn(ctx).await,
        }
    }

    async fn probe(&self) -> Result<(), ModelError> {
        match self {
            Adapter::OpenAi(p) => p.probe().await,
            Adapter::Anthropic(p) => p.probe().await,
        }
    }

    fn boxed(self) -> Box<dyn Policy> {
        match self {
            Adapter::OpenAi(p) => Box::new(p),
            Adapter::Anthropic(p) => Box::new(p),
        }
    }
}

/// A [`Policy`] over models tried in order for each turn (see the module docs).
#[derive(Clone)]
pub struct FallbackPolicy {
    /// The primary first; never empty.
    adapters: Vec<Adapter>,
}

impl FallbackPolicy {
    /// Checks every model's configuration and builds its client. Sends nothing.
    /// An empty list is refused.
    pub fn new(models: Vec<ChainModel>) -> Result<Self, ModelError> {
        if models.is_empty() {
            return Err(ModelError::EmptyChain);
        }
        let adapters = models
            .into_iter()
            .map(Adapter::new)
            .collect::<Result<_, _>>()?;
        Ok(FallbackPolicy { adapters })
    }

    /// Probes every model's server; the errors of those that did not answer,
    /// in chain order.
    pub async fn probe(&self) -> Vec<ModelError> {
        let probes = self.adapters.iter().map(Adapter::probe);
        futures::future::join_all(probes)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect()
    }

    /// How many models the chain holds.
    pub fn len(&self) -> usize {
        self.adapters.len()
    }

    /// Never true: a chain holds at least its primary.
    pub fn is_empty(&self) -> bool {
        self.adapters.is_empty()
    }

    /// The policy to run: the adapter itself for a chain of one (so a run
    /// without fallbacks behaves exactly as before), else the chain.
    pub fn into_policy(mut self) -> Box<dyn Policy> {
        if self.adapters.len() == 1
            && let Some(only) = self.adapters.pop()
        {
            return only.boxed();
        }
        Box::new(self)
    }
}

#[async_trait]
impl Policy for FallbackPolicy {
    fn name(&self) -> String {
        let names: Vec<String> = self.adapters.iter().map(Adapter::name).collect();
        names.join(" > ")
    }

    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput {
        let started = Instant::now();
        let mut passed: Vec<String> = Vec::new();
        let mut last = None;
        for adapter in &mut self.adapters {
            // The wall-clock budget keeps running while earlier models fail:
            // each later one is shown what is left of it.
            let budget = time_left(ctx.budget, started);
            if !passed.is_empty() && budget.remaining.wall_ms_left == Some(0) {
                break;
            }
            let turn = adapter
                .turn(PolicyContext {
                    budget: &budget,
                    ..ctx
                })
                .await;
            if !turn.unavailable {
                return turn.output;
            }
            tracing::warn!(model = %turn.output.model, "model unavailable; the next model of the fallback chain takes the turn");
            passed.push(turn.output.model.clone());
            last = Some(turn.output);
        }
        // Every model was unavailable (or the deadline came first): the last
        // failure is the turn's, saying which models were tried.
        let Some(mut out) = last else {
            // Unreachable: the chain is never empty and the first model is
            // always tried; a decision all the same rather than a panic.
            return PolicyOutput::new(
                Decision::Failed {
                    message: "the fallback chain has no model".into(),
                    fatal: true,
                },
                self.name(),
            );
        };
        if let Decision::Failed { message, .. } = &mut out.decision {
            message.push_str(&format!(
                " (no model of the fallback chain was available; tried: {})",
                passed.join(", ")
            ));
        }
        out
    }
}

/// `budget` with the time spent since `started` taken off the wall clock left.
fn time_left(budget: &BudgetSnapshot, started: Instant) -> BudgetSnapshot {
    let spent = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut budget = *budget;
    budget.remaining.wall_ms_left = budget
        .remaining
        .wall_ms_left
        .map(|ms| ms.saturating_sub(spent));
    budget.elapsed_ms = budget.elapsed_ms.saturating_add(spent);
    budget
}

#[cfg(test)]
mod tests {
    use agentry_protocol::budget::{BudgetLimits, Usage};

    use super::*;

    /// A later model of the chain is shown the wall clock that is left, not
    /// the step's: its request cannot outlive the deadline.
    #[test]
    fn later_models_see_the_time_spent_by_earlier_ones() {
        let limits = BudgetLimits {
            deadline_ms: Some(10_000),
            ..BudgetLimits::default()
        };
        let budget = BudgetSnapshot::new(limits, Usage::default(), 1_000);
        let started = Instant::now() - std::time::Duration::from_secs(3);
        let later = time_left(&budget, started);
        let left = later.remaining.wall_ms_left.unwrap_or(u64::MAX);
        assert!((1..=6_000).contains(&left), "{left}");
        assert!(later.elapsed_ms >= 4_000, "{}", later.elapsed_ms);
        let gone = time_left(&budget, Instant::now() - std::time::Duration::from_secs(60));
        assert_eq!(gone.remaining.wall_ms_left, Some(0));
        // No deadline: nothing to take off.
        let open = BudgetSnapshot::new(BudgetLimits::default(), Usage::default(), 0);
        assert_eq!(time_left(&open, started).remaining.wall_ms_left, None);
    }
}
