//! Tools that fail: [`PanicTool`] always, [`FlakyTool`] for its first attempts.

use agentry::{
    Effect, Idempotency, Tool, ToolContext, ToolContract, ToolError, ToolOutput, async_trait,
};
use serde_json::{Value, json};

use super::{Counter, value_schema};

/// Panics on every call with a fixed message.
#[derive(Debug, Clone)]
pub struct PanicTool {
    contract: ToolContract,
    message: String,
}

contract_setters!(PanicTool);

impl PanicTool {
    /// A panicking tool named `name` accepting any object.
    pub fn new(name: &str, message: &str) -> Self {
        PanicTool {
            contract: ToolContract::new(name, "Panics.", json!({"type": "object"})),
            message: message.to_string(),
        }
    }
}

#[async_trait]
impl Tool for PanicTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    #[allow(clippy::panic, reason = "panicking is this mock's whole job")]
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        panic!("{}", self.message)
    }
}

/// Fails its first `failures` attempts with `error`, then returns
/// `{"attempt": n}`. Counts every attempt, so a test sees how often the executor
/// retried.
#[derive(Debug, Clone)]
pub struct FlakyTool {
    contract: ToolContract,
    failures: usize,
    error: ToolError,
    attempts: Counter,
}

contract_setters!(FlakyTool);

impl FlakyTool {
    /// A tool that fails `failures` times with `error` before succeeding.
    pub fn new(name: &str, failures: usize, error: ToolError) -> Self {
        FlakyTool {
            contract: ToolContract::new(name, "Fails, then succeeds.", value_schema()),
            failures,
            error,
            attempts: Counter::default(),
        }
    }

    /// How many attempts ran.
    pub fn attempts(&self) -> Counter {
        self.attempts.clone()
    }
}

#[async_trait]
impl Tool for FlakyTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, _args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let n = self.attempts.incr();
        if n <= self.failures {
            return Err(self.error.clone());
        }
        Ok(ToolOutput::data(
            json!({ "attempt": ctx.attempt, "runs": n }),
        ))
    }
}
