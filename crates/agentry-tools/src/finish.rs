//! `task.finish {answer}`: the model's claim that the task is done.
//!
//! The claim is only a claim: the conductor runs the task's acceptance checks
//! before the run may stop as `done`.

use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::{Effect, Idempotency, ToolContract};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{Tool, ToolContext, ToolOutput, parse_args, schema_for};

/// Name of the finish tool; the conductor watches for its successful calls.
pub const FINISH_TOOL: &str = "task.finish";

/// Arguments of `task.finish`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FinishArgs {
    /// The final answer.
    pub answer: String,
}

/// The `task.finish` tool.
#[derive(Debug, Default, Clone, Copy)]
pub struct FinishTool;

#[async_trait]
impl Tool for FinishTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            FINISH_TOOL,
            "Submit the final answer when the task is complete. The host verifies the task before accepting it.",
            schema_for::<FinishArgs>(),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope("task")
        .timeout_ms(1_000)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: FinishArgs = parse_args(args)?;
        Ok(ToolOutput::data(json!({ "answer": args.answer })))
    }
}
