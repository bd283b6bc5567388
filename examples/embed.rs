//! Embedding agentry in Rust code: build a runtime, register a custom tool, run a
//! task on the scripted policy, print the outcome.
//!
//! `cargo run --example embed`

use std::sync::Arc;

use agentry::protocol::accept::AcceptCheck;
use agentry::{
    Effect, Idempotency, RunConfig, Runtime, Script, Tool, ToolContext, ToolContract, ToolError,
    ToolOutput, ToolRegistry, async_trait,
};
use serde_json::{Value, json};

/// A custom tool: adds two integers.
struct Add;

#[async_trait]
impl Tool for Add {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            "math.add",
            "Add two integers.",
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
                "additionalProperties": false
            }),
        )
        .effect(Effect::ReadOnly)
        .idempotency(Idempotency::Idempotent)
        .scope("math")
        .timeout_ms(1_000)
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let a = args["a"].as_i64().unwrap_or_default();
        let b = args["b"].as_i64().unwrap_or_default();
        Ok(ToolOutput::data(json!({ "sum": a + b })))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut registry = ToolRegistry::with_builtins()?;
    registry.register(Arc::new(Add))?;
    let runtime = Runtime::new(registry);

    let workdir = tempfile::tempdir()?;
    let mut config = RunConfig::new("add 20 and 3, write the sum to sum.txt", workdir.path());
    config.task_id = "embed-add".into();
    config.grants = agentry::Grants::new(["math", "fs.write"]);
    config.accept = vec![AcceptCheck::File {
        file: "sum.txt".into(),
        equals: Some("23".into()),
        contains: None,
    }];

    let script = Script::parse(
        r#"{"turns": [
            {"tool_calls": [{"id": "c1", "name": "math.add", "arguments": {"a": 20, "b": 3}}]},
            {"tool_calls": [{"id": "c2", "name": "fs.write", "arguments": {"path": "sum.txt", "content": "23"}}]},
            {"tool_calls": [{"id": "c3", "name": "task.finish", "arguments": {"answer": "sum=23"}}]}
        ]}"#,
    )?;
    let outcome = runtime.run(config, script.into_policy()).await?;
    println!(
        "run {} stopped: {} after {} steps, {} tool calls; answer {:?}",
        outcome.run_id, outcome.stop_reason, outcome.steps, outcome.tool_calls, outcome.answer
    );
    println!("{}", outcome.detail);
    if outcome.stop_reason != agentry::StopReason::Done {
        std::process::exit(1);
    }
    Ok(())
}
