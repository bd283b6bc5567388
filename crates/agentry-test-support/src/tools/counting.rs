//! [`CountingTool`] and [`HangingTool`]: calls counted, and futures seen dropped.

use std::sync::Arc;
use std::time::Duration;

use agentry::{
    Effect, Idempotency, Tool, ToolContext, ToolContract, ToolError, ToolOutput, async_trait,
};
use serde_json::{Value, json};

use super::{Counter, WaitTimeout, value_schema};

/// Counts its executions and returns `{"args": <arguments>}`.
#[derive(Debug, Clone)]
pub struct CountingTool {
    contract: ToolContract,
    count: Counter,
}

contract_setters!(CountingTool);

impl CountingTool {
    /// A counting tool named `name` with [`value_schema`].
    pub fn new(name: &str) -> Self {
        CountingTool {
            contract: ToolContract::new(name, "Counts its executions.", value_schema()),
            count: Counter::default(),
        }
    }

    /// How many times the tool actually ran.
    pub fn counter(&self) -> Counter {
        self.count.clone()
    }
}

#[async_trait]
impl Tool for CountingTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.count.incr();
        Ok(ToolOutput::data(json!({ "args": args })))
    }
}

/// Sets a flag when dropped: proof that a call's future was really dropped.
struct DropFlag(Counter);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.incr();
    }
}

/// Never returns (`std::future::pending`). Counts calls that started and call
/// futures that were dropped, so a test can see a cancellation really happened.
///
/// Clones share their counters: keep a clone to [`HangingTool::wait_started`]
/// after moving the tool into a registry.
#[derive(Debug, Clone)]
pub struct HangingTool {
    contract: ToolContract,
    started: Arc<tokio::sync::watch::Sender<usize>>,
    dropped: Counter,
}

contract_setters!(HangingTool);

impl HangingTool {
    /// A hanging tool named `name` with [`value_schema`].
    pub fn new(name: &str) -> Self {
        HangingTool {
            contract: ToolContract::new(name, "Never returns.", value_schema()),
            started: Arc::new(tokio::sync::watch::Sender::new(0)),
            dropped: Counter::default(),
        }
    }

    /// How many calls started executing (entered the tool's body).
    pub fn started(&self) -> usize {
        *self.started.borrow()
    }

    /// Waits until at least `n` calls are executing inside the tool. Unlike the
    /// run's `ToolCallStarted` event, this proves the tool's body was entered.
    pub async fn wait_started(&self, n: usize, timeout: Duration) -> Result<(), WaitTimeout> {
        let mut rx = self.started.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|started| *started >= n))
            .await
            .is_ok_and(|r| r.is_ok());
        if reached {
            return Ok(());
        }
        Err(WaitTimeout(format!(
            "only {} of {n} calls entered {} in time",
            self.started(),
            self.contract.name
        )))
    }

    /// Call futures that were dropped (cancelled) while hanging.
    pub fn dropped(&self) -> Counter {
        self.dropped.clone()
    }
}

#[async_trait]
impl Tool for HangingTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        self.started.send_modify(|n| *n += 1);
        let _flag = DropFlag(self.dropped.clone());
        std::future::pending().await
    }
}
