//! The seam itself: what a model adapter implements and what it is shown.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use agentry_protocol::budget::BudgetSnapshot;
use agentry_protocol::child::ChildRequest;
use agentry_protocol::decision::PolicyOutput;
use agentry_protocol::state::SessionEntry;
use agentry_protocol::tool::ToolSpec;
use async_trait::async_trait;

/// What a policy sees when it decides.
#[derive(Debug, Clone, Copy)]
pub struct PolicyContext<'a> {
    /// Run id.
    pub run_id: &'a str,
    /// The step being decided, from 1.
    pub step: u64,
    /// The task goal.
    pub goal: &'a str,
    /// The tools this run may call (name, description, schema only).
    pub tools: &'a [ToolSpec],
    /// The whole session so far, oldest first.
    pub session: &'a [SessionEntry],
    /// The budget at the start of this step.
    pub budget: &'a BudgetSnapshot,
    /// Where a streaming adapter publishes the text it receives, as
    /// `token_delta` events (`None` outside a run).
    pub deltas: Option<&'a dyn DeltaSink>,
    /// The W3C `traceparent` of this decision (the run's; a model adapter sends
    /// its own request span's when spans are exported). `None` outside a run.
    pub traceparent: Option<&'a str>,
    /// With span content on (`ObserveConfig::content`): what message contents
    /// pass before an adapter records them on its request's span
    /// (`gen_ai.input.messages`, `gen_ai.output.messages`). `None`: no
    /// content is recorded.
    pub content: Option<&'a dyn Redact>,
}

/// Redacts text before it is written anywhere (the host's redactor, seen
/// from the policy seam).
pub trait Redact: Send + Sync + fmt::Debug {
    /// The text with every secret replaced; borrowed when there is none.
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str>;
}

/// Where a streaming adapter publishes the text of one model turn while it
/// arrives. The runtime's implementation turns each piece into a `token_delta`
/// run event of the step being decided; an empty piece is no event.
pub trait DeltaSink: Send + Sync + fmt::Debug {
    /// Publishes a piece of streamed text.
    fn emit(&self, text: &str);
}

/// A model adapter. Replacing the model means implementing this one trait.
///
/// Failures are data: return [`Decision::Failed`](agentry_protocol::Decision::Failed)
/// (non-fatal ones become an observation the next step can correct); never panic.
#[async_trait]
pub trait Policy: Send + 'static {
    /// A short name for the trace (e.g. `script`, `openai:gpt-4.1`).
    fn name(&self) -> String;

    /// Proposes the next action.
    async fn decide(&mut self, ctx: PolicyContext<'_>) -> PolicyOutput;
}

/// Builds a child's policy from a request when the request carries no script (a
/// model adapter would build the same model for the child).
pub type ChildPolicyFactory = Arc<dyn Fn(&ChildRequest) -> Option<Box<dyn Policy>> + Send + Sync>;
