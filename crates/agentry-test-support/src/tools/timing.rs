//! Tools that take time: [`SleepTool`] (tokio time, cancellable) and
//! [`BlockingTool`] (blocks its thread, ignores cancellation).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::{
    Effect, Idempotency, Tool, ToolContext, ToolContract, ToolError, ToolOutput, async_trait,
};
use serde_json::{Value, json};

use super::Counter;

/// Sleeps `ms` milliseconds of tokio time, then returns its arguments. Records the
/// call ids in completion order and the highest number of calls in flight at once.
///
/// Arguments: `{"ms": <integer>, "tag": <any, optional>}`.
#[derive(Debug, Clone)]
pub struct SleepTool {
    contract: ToolContract,
    completions: Arc<Mutex<Vec<String>>>,
    in_flight: Counter,
    max_in_flight: Counter,
}

contract_setters!(SleepTool);

impl SleepTool {
    /// A sleeping tool named `name`.
    pub fn new(name: &str) -> Self {
        SleepTool {
            contract: ToolContract::new(
                name,
                "Sleeps, then returns its arguments.",
                json!({
                    "type": "object",
                    "properties": {
                        "ms": {"type": "integer", "minimum": 0},
                        "tag": {}
                    },
                    "required": ["ms"],
                    "additionalProperties": false
                }),
            ),
            completions: Arc::default(),
            in_flight: Counter::default(),
            max_in_flight: Counter::default(),
        }
    }

    /// Call ids in the order the calls finished sleeping.
    pub fn completion_log(&self) -> CompletionLog {
        CompletionLog(Arc::clone(&self.completions))
    }

    /// The highest number of calls that were sleeping at the same time.
    pub fn max_in_flight(&self) -> Counter {
        self.max_in_flight.clone()
    }
}

/// Call ids in completion order, shared with a [`SleepTool`].
#[derive(Debug, Clone)]
pub struct CompletionLog(Arc<Mutex<Vec<String>>>);

impl CompletionLog {
    /// The ids so far.
    pub fn ids(&self) -> Vec<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// Decrements the in-flight count even when the sleep is cancelled.
struct InFlight(Counter);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decr();
    }
}

#[async_trait]
impl Tool for SleepTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
        let now = self.in_flight.incr();
        let _guard = InFlight(self.in_flight.clone());
        self.max_in_flight.raise_to(now);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.completions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(ctx.call_id.clone());
        Ok(ToolOutput::data(args))
    }
}

/// Blocks the thread it runs on for a fixed time (`std::thread::sleep`), the way a
/// tool doing blocking I/O inside `async fn` does: it cannot be cancelled until it
/// returns. Use only on a multi-thread runtime, with a short duration.
#[derive(Debug, Clone)]
pub struct BlockingTool {
    contract: ToolContract,
    block: Duration,
    finished: Counter,
}

contract_setters!(BlockingTool);

impl BlockingTool {
    /// A blocking tool named `name` that blocks for `block`, accepting any object.
    pub fn new(name: &str, block: Duration) -> Self {
        BlockingTool {
            contract: ToolContract::new(name, "Blocks its thread.", json!({"type": "object"})),
            block,
            finished: Counter::default(),
        }
    }

    /// Calls that ran to the end of their block.
    pub fn finished(&self) -> Counter {
        self.finished.clone()
    }
}

#[async_trait]
impl Tool for BlockingTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        std::thread::sleep(self.block);
        self.finished.incr();
        Ok(ToolOutput::data(args))
    }
}
