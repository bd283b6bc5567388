//! [`GateTool`]: every call held until the test answers it through its [`GateHandle`].

use std::time::Duration;

use agentry::{
    Effect, ErrorCode, Idempotency, Tool, ToolContext, ToolContract, ToolError, ToolOutput,
    async_trait,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// A call held at a [`GateTool`], waiting for the test to answer it.
#[derive(Debug)]
pub struct GateCall {
    /// The model's call id.
    pub call_id: String,
    /// The validated arguments.
    pub args: Value,
    reply: oneshot::Sender<Result<ToolOutput, ToolError>>,
}

impl GateCall {
    /// Lets the call return `data`. False when the call is no longer waiting
    /// (it was cancelled and its future dropped).
    pub fn release(self, data: Value) -> bool {
        self.reply.send(Ok(ToolOutput::data(data))).is_ok()
    }

    /// Lets the call fail with `error`. False when the call is no longer waiting.
    pub fn fail(self, error: ToolError) -> bool {
        self.reply.send(Err(error)).is_ok()
    }

    /// True when the call's future was dropped (cancelled) while held.
    pub fn is_abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    /// Waits until the call's future is dropped (the call saw its cancellation).
    /// False when that did not happen within `timeout`.
    pub async fn abandoned(&mut self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.reply.closed())
            .await
            .is_ok()
    }
}

/// Why [`GateHandle::next_call`] returned no call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateError {
    /// No call arrived in time.
    Timeout,
    /// The tool was dropped (its registry is gone); no call can arrive.
    Closed,
}

impl std::fmt::Display for GateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateError::Timeout => f.write_str("no call reached the gate in time"),
            GateError::Closed => f.write_str("the gate tool is gone"),
        }
    }
}

impl std::error::Error for GateError {}

/// The test's end of a [`GateTool`], like tower-test's mock handle: it sees each
/// call arrive and decides when and how it returns.
#[derive(Debug)]
pub struct GateHandle {
    rx: mpsc::UnboundedReceiver<GateCall>,
}

impl GateHandle {
    /// Waits for the next call to reach the gate.
    pub async fn next_call(&mut self, timeout: Duration) -> Result<GateCall, GateError> {
        match tokio::time::timeout(timeout, self.rx.recv()).await {
            Ok(Some(call)) => Ok(call),
            Ok(None) => Err(GateError::Closed),
            Err(_) => Err(GateError::Timeout),
        }
    }

    /// A call that already arrived, without waiting.
    pub fn try_next_call(&mut self) -> Option<GateCall> {
        self.rx.try_recv().ok()
    }
}

/// Blocks every call until the test answers it through the [`GateHandle`]. If
/// the handle or the held call is dropped unanswered, the call fails `EINTERNAL`.
#[derive(Debug, Clone)]
pub struct GateTool {
    contract: ToolContract,
    tx: mpsc::UnboundedSender<GateCall>,
}

contract_setters!(GateTool);

impl GateTool {
    /// A gate tool named `name` accepting any object, and its handle.
    pub fn new(name: &str) -> (Self, GateHandle) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            GateTool {
                contract: ToolContract::new(
                    name,
                    "Returns when the test says so.",
                    json!({"type": "object"}),
                ),
                tx,
            },
            GateHandle { rx },
        )
    }
}

#[async_trait]
impl Tool for GateTool {
    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let (reply, answer) = oneshot::channel();
        let held = GateCall {
            call_id: ctx.call_id.clone(),
            args,
            reply,
        };
        if self.tx.send(held).is_err() {
            return Err(ToolError::new(
                ErrorCode::Einternal,
                "gate handle dropped before the call arrived",
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(ToolError::new(
                ErrorCode::Einternal,
                "the test dropped the held call without answering it",
            ))
        })
    }
}
