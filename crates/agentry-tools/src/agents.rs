//! `agent.spawn`, `agent.wait` and `agent.cancel`: how a model delegates to
//! child agents.
//!
//! The tools only translate between the model and the host: the runtime hands
//! each call an [`AgentDesk`] (in [`RunScope::agents`](crate::RunScope::agents)) that starts children
//! under the calling run — budget carved from the parent, grants no wider than
//! the parent's, cancelled with it — and waits for them. A child's failure comes
//! back as data (its stop reason), never as a crash of the parent.

use std::sync::Arc;
use std::time::Duration;

use agentry_protocol::budget::BudgetLimits;
use agentry_protocol::envelope::{ErrorCode, ToolError};
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// Name of the spawn tool.
pub const SPAWN_TOOL: &str = "agent.spawn";
/// Name of the wait tool.
pub const WAIT_TOOL: &str = "agent.wait";
/// Name of the cancel tool.
pub const CANCEL_TOOL: &str = "agent.cancel";

/// What a model asks for when it delegates (plain data, in agentry-protocol).
pub use agentry_protocol::child::ChildRequest;

/// The host side of agent delegation (defined beside the tool seam, which
/// carries it in [`RunScope::agents`](crate::RunScope::agents)).
pub use crate::tool::{AgentDesk, WaitMode};

/// A child's budget request (all optional): an amount you name comes out of
/// yours, or the spawn is refused naming what is available; an unset dimension
/// you are limited on gets half of what you can give. You always keep enough
/// (2 steps, 2 tool calls by default) to wait on your children and finish.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetArgs {
    /// Steps.
    pub max_steps: Option<u64>,
    /// Tool calls.
    pub max_tool_calls: Option<u64>,
    /// Tokens.
    pub max_tokens: Option<u64>,
    /// Wall clock, in milliseconds (clamped to the parent's deadline).
    pub deadline_ms: Option<u64>,
}

/// Arguments of `agent.spawn`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnArgs {
    /// What the child should do.
    pub goal: String,
    /// The budget it asks for.
    #[serde(default)]
    pub budget: Option<BudgetArgs>,
    /// The tools it may use (never more than the parent's); default: the parent's.
    #[serde(default)]
    pub grant: Option<Vec<String>>,
    /// For the scripted policy: the child's script (`{"turns": [...]}`).
    #[serde(default)]
    pub script: Option<Value>,
    /// A name to refer to the child by in agent.wait (unique among your children).
    #[serde(default)]
    pub name: Option<String>,
    /// Which configured model runs the child, by name (e.g. a small model for
    /// workers); default: the same kind of model as yours. An unknown name is
    /// refused with the names there are.
    #[serde(default)]
    pub model: Option<String>,
}

/// Arguments of `agent.wait`: one child (`child_id`) or several (`child_ids`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitArgs {
    /// One child: its run id as `agent.spawn` returned it, or the name you gave it.
    #[serde(default)]
    pub child_id: Option<String>,
    /// Several children, by id or name.
    #[serde(default)]
    pub child_ids: Option<Vec<String>>,
    /// With `child_ids`: `all` (default) waits for every one and returns their
    /// outcomes in the order asked; `any` returns the first to end.
    #[serde(default)]
    pub mode: Option<WaitMode>,
    /// Give up waiting after this long (the children keep running).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// Arguments of `agent.cancel`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelArgs {
    /// The child's run id, or the name you gave it.
    pub child_id: String,
}

fn desk(ctx: &ToolContext) -> Result<&Arc<dyn AgentDesk>, ToolError> {
    ctx.run.agents.as_ref().ok_or_else(|| {
        ToolError::new(
            ErrorCode::Eprecond,
            "this runtime does not run child agents",
        )
        .with_action("do the work yourself")
    })
}

/// `agent.spawn`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SpawnTool;

#[async_trait]
impl Tool for SpawnTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            SPAWN_TOOL,
            "Delegate a sub-task to a child agent. Its budget comes out of yours: what you name, or half of what you can give on a dimension you leave unset; you always keep enough to wait and finish. It may use at most your tools. Returns the child's id, its budget and what you can still delegate (left_to_delegate); call agent.wait to get its result (what the child did not use comes back to you then).",
            schema_for::<SpawnArgs>(),
        )
        .effect(Effect::Reversible)
        // Keyed by the host's operation id: a spawn re-run after a crash (or
        // proposed again) gets the child it started, never a second one.
        .idempotency(Idempotency::RequiredKey)
        .scope("agent")
        .timeout_ms(10_000)
        .max_retries(0)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: SpawnArgs = parse_args(args)?;
        let budget = args.budget.unwrap_or_default();
        let request = ChildRequest {
            goal: args.goal,
            limits: BudgetLimits {
                max_steps: budget.max_steps,
                max_tool_calls: budget.max_tool_calls,
                max_tokens: budget.max_tokens,
                deadline_ms: budget.deadline_ms,
                ..BudgetLimits::default()
            },
            grants: args.grant,
            script: args.script,
            name: args.name,
            model: args.model,
        };
        Ok(ToolOutput::data(
            desk(ctx)?.spawn(request, &ctx.operation_id).await?,
        ))
    }
}

/// `agent.wait`.
#[derive(Debug, Default, Clone, Copy)]
pub struct WaitTool;

#[async_trait]
impl Tool for WaitTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            WAIT_TOOL,
            "Wait for child agents to end and get their outcomes (stop_reason, answer, steps, tool_calls, tokens, cost, and why a child failed): one with child_id, several with child_ids and mode all (every outcome, in order) or any (the first to end, and which still run). What a child you get the outcome of did not use of its budget comes back to you (counted in left_to_delegate), as it does when you agent.cancel it.",
            schema_for::<WaitArgs>(),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope("agent")
        // The run's deadline bounds the wait; the contract's own timeout is long.
        .timeout_ms(24 * 3600 * 1000)
        .max_retries(0)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: WaitArgs = parse_args(args)?;
        let timeout = args.timeout_ms.map(Duration::from_millis);
        let (children, mode) = match (args.child_id, args.child_ids, args.mode) {
            (Some(one), None, None) => (vec![one], None),
            (None, Some(many), mode) if !many.is_empty() => (many, Some(mode.unwrap_or_default())),
            (one, many, _) => {
                let why = match (one, many) {
                    (Some(_), Some(_)) => "give child_id or child_ids, not both",
                    (None, Some(_)) => "child_ids is empty",
                    (Some(_), None) => "mode applies only to child_ids",
                    (None, None) => "name the child: child_id, or child_ids for several",
                };
                return Err(ToolError::new(ErrorCode::Einval, why)
                    .with_action("use the ids or names agent.spawn returned"));
            }
        };
        let desk = desk(ctx)?;
        let outcome = desk
            .wait(&children, mode.unwrap_or_default(), timeout, &ctx.cancel)
            .await?;
        Ok(ToolOutput::data(match mode {
            // The single-child form returns the outcome itself, as it always has.
            None => single(outcome),
            Some(_) => outcome,
        }))
    }
}

/// The single-child form's answer: that child's outcome, with what is left to
/// delegate.
fn single(mut all: Value) -> Value {
    let left = all.get_mut("left_to_delegate").map(Value::take);
    match all
        .get_mut("outcomes")
        .and_then(|o| o.get_mut(0))
        .map(Value::take)
    {
        Some(Value::Object(mut outcome)) => {
            if let Some(left) = left {
                outcome.insert("left_to_delegate".into(), left);
            }
            Value::Object(outcome)
        }
        _ => all,
    }
}

/// `agent.cancel`.
#[derive(Debug, Default, Clone, Copy)]
pub struct CancelTool;

#[async_trait]
impl Tool for CancelTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            CANCEL_TOOL,
            "Cancel a child agent and everything it started: it stops user_abort and what it did not spend returns to your budget. Returns its outcome.",
            schema_for::<CancelArgs>(),
        )
        .effect(Effect::Reversible)
        .idempotency(Idempotency::Idempotent)
        .scope("agent")
        .timeout_ms(30_000)
        .max_retries(0)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: CancelArgs = parse_args(args)?;
        let outcome = desk(ctx)?.cancel(&args.child_id).await?;
        Ok(ToolOutput::data(outcome))
    }
}
