//! Controllable mock tools behind the real [`Tool`](agentry::Tool) trait.
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
//! | [`BlockingTool`] | blocks its thread until released: a tool that ignores cancellation |
//! | [`FlakyTool`] | fails its first N attempts with a given error, then succeeds |

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

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

/// A wait for a mock's condition did not complete in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout(pub String);

impl std::fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WaitTimeout {}

// After the macro: the mocks use `contract_setters!`.
mod counting;
mod failing;
mod gate;
mod timing;

pub use counting::{CountingTool, HangingTool};
pub use failing::{FlakyTool, PanicTool};
pub use gate::{GateCall, GateError, GateHandle, GateTool};
pub use timing::{BlockingTool, CompletionLog, Release, SleepTool};

#[cfg(test)]
mod tests {
    use agentry::{Effect, Idempotency, Tool};

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
