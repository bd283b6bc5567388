//! Controllable mock tools behind the real [`Tool`] trait.
//!
//! Each mock keeps its observable state (call counts, completion order, pending
//! calls) behind shared handles the test holds on to after the tool is moved
//! into a registry. Every mock has the same contract setters (`effect`,
//! `idempotency`, `scope`, `timeout_ms`, `schema`); their default contract is
//! reversible, not idempotent, scope = name, 30 s timeout, and the schema of each
//! mock's `new`.
//!
//! | mock | does |
//! | --- | --- |
//! | [`CountingTool`] | counts executions, echoes its arguments |
//! | [`HangingTool`] | never returns; reports when its future is dropped (cancelled) |
//! | [`GateTool`] | blocks until the test answers the call through its [`GateHandle`] |
//! | [`PanicTool`] | panics |
//! | [`SleepTool`] | sleeps `ms` milliseconds (tokio time), records completion order and concurrency |
//! | [`BlockingTool`] | blocks its thread (`std::thread::sleep`): a tool that ignores cancellation |
//! | [`FlakyTool`] | fails its first N attempts with a given error, then succeeds |

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentry::{
    Effect, ErrorCode, Idempotency, Tool, ToolContext, ToolContract, ToolError, ToolOutput,
    async_trait,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// A shared counter a test reads after the tool has been moved into a registry.
#[derive(Debug, Clone, Default)]
pub struct Counter(Arc<AtomicUsize>);

impl Counter {
    /// The current value.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn incr(&self) -> usize {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn decr(&self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }

    fn raise_to(&self, value: usize) {
        self.0.fetch_max(value, Ordering::SeqCst);
    }

    /// The underlying atomic.
    pub fn arc(&self) -> Arc<AtomicUsize> {
        Arc::clone(&self.0)
    }
}

/// Contract setters shared by every mock.
macro_rules! contract_setters {
    ($ty:ty) => {
        impl $ty {
            /// Sets the effect (e.g. `read_only`, so calls may run concurrently).
            pub fn effect(mut self, effect: Effect) -> Self {
                self.contract = self.contract.effect(effect);
                self
            }

            /// Sets the idempotency class.
            pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
                self.contract = self.contract.idempotency(idempotency);
                self
            }

            /// Sets the auth scope a run must be granted.
            pub fn scope(mut self, scope: &str) -> Self {
                self.contract = self.contract.scope(scope);
                self
            }

            /// Sets the per-call timeout.
            pub fn timeout_ms(mut self, ms: u64) -> Self {
                self.contract = self.contract.timeout_ms(ms);
                self
            }

            /// Declares whether calls may run concurrently.
            pub fn parallel_safe(mut self, parallel: bool) -> Self {
                self.contract = self.contract.parallel_safe(parallel);
                self
            }

            /// Sets the per-call retry allowance.
            pub fn max_retries(mut self, retries: u32) -> Self {
                self.contract = self.contract.max_retries(retries);
                self
            }

            /// Replaces the input schema.
            pub fn schema(mut self, schema: Value) -> Self {
                self.contract.input_schema = schema;
                self
            }

            /// The contract as it will be registered.
            pub fn contract_ref(&self) -> &ToolContract {
                &self.contract
            }
        }
    };
}

/// The default schema of [`CountingTool`] and [`HangingTool`]: an object with an
/// optional `value` of any type and nothing else.
pub fn value_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "value": {} },
        "additionalProperties": false
    })
}

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

/// A wait for a mock's condition did not complete in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout(pub String);

impl std::fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WaitTimeout {}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_change_the_contract() {
        let t = CountingTool::new("count")
            .effect(Effect::ReadOnly)
            .idempotency(Idempotency::Idempotent)
            .scope("danger")
            .timeout_ms(5);
        let c = t.contract();
        assert_eq!(c.name, "count");
        assert_eq!(c.effect, Effect::ReadOnly);
        assert_eq!(c.idempotency, Idempotency::Idempotent);
        assert_eq!(c.auth_scope, "danger");
        assert_eq!(c.timeout_ms, 5);
        assert_eq!(c.input_schema, value_schema());
    }

    #[test]
    fn counter_tracks_the_maximum() {
        let c = Counter::default();
        c.raise_to(3);
        c.raise_to(2);
        assert_eq!(c.get(), 3);
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
