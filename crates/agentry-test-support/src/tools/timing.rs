//! Tools that take time: [`SleepTool`] (tokio time, cancellable) and
//! [`BlockingTool`] (blocks its thread, ignores cancellation).

use std::sync::{Arc, Condvar, Mutex, PoisonError};
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

/// Blocks the thread it runs on (a blocking wait, not an await), the way a tool
/// doing blocking I/O inside `async fn` does: it cannot be cancelled until it
/// returns. It returns when the test [releases](BlockingTool::release) it, or
/// after `block` at most, so a test can say "the run did not wait for it"
/// without betting on how long a loaded machine takes. Use only on a
/// multi-thread runtime.
#[derive(Debug, Clone)]
pub struct BlockingTool {
    contract: ToolContract,
    block: Duration,
    finished: Counter,
    gate: Release,
}

/// Lets every blocked call of a [`BlockingTool`] return.
#[derive(Debug, Clone, Default)]
pub struct Release(Arc<(Mutex<bool>, Condvar)>);

impl Release {
    /// Ends the block of every call, now and later.
    pub fn release(&self) {
        let (released, wake) = &*self.0;
        *released.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
    }

    /// Blocks the thread until released, or for `limit` at most.
    fn wait(&self, limit: Duration) {
        let (released, wake) = &*self.0;
        let guard = released.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = wake
            .wait_timeout_while(guard, limit, |released| !*released)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

contract_setters!(BlockingTool);

impl BlockingTool {
    /// A blocking tool named `name` that blocks until released, or for `block`
    /// at most, accepting any object.
    pub fn new(name: &str, block: Duration) -> Self {
        BlockingTool {
            contract: ToolContract::new(name, "Blocks its thread.", json!({"type": "object"})),
            block,
            finished: Counter::default(),
            gate: Release::default(),
        }
    }

    /// Calls that returned from their block.
    pub fn finished(&self) -> Counter {
        self.finished.clone()
    }

    /// The handle that ends the block.
    pub fn release(&self) -> Release {
        self.gate.clone()
    }
}

#[async_trait]
impl Tool for BlockingTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.gate.wait(self.block);
        self.finished.incr();
        Ok(ToolOutput::data(args))
    }
}
