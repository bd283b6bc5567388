//! What the layer keeps of a span until it closes (its fields, as they are
//! recorded), and the statuses of live runs behind the gauges.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use agentry_telemetry::fields;
use tracing::field::{Field, Visit};

/// The target of the runtime's run-status events.
pub const STATUS_TARGET: &str = "agentry::metrics";

/// A span of agentry's, with the fields the metrics need.
pub(crate) struct Timed {
    pub(crate) started: Instant,
    pub(crate) op: Op,
}

/// The three kinds of span.
pub(crate) enum Op {
    Run(RunFields),
    Chat(ChatFields),
    Tool(ToolFields),
}

impl Op {
    /// The record for a span named `name` (at agentry's span target), if the
    /// metrics count it.
    pub(crate) fn for_span(name: &str) -> Option<Op> {
        match name {
            "invoke_agent" => Some(Op::Run(RunFields::default())),
            "chat" => Some(Op::Chat(ChatFields::default())),
            "execute_tool" => Some(Op::Tool(ToolFields::default())),
            _ => None,
        }
    }
}

/// An `invoke_agent` span's fields.
#[derive(Default)]
pub(crate) struct RunFields {
    pub(crate) run_id: Option<String>,
    pub(crate) stop_reason: Option<String>,
    pub(crate) steps: u64,
    pub(crate) tokens: Tokens,
    pub(crate) cost_micros: u64,
}

/// A `chat` span's fields.
#[derive(Default)]
pub(crate) struct ChatFields {
    pub(crate) provider: String,
    pub(crate) model: String,
    pub(crate) error: Option<String>,
    pub(crate) first_chunk_ms: Option<u64>,
    pub(crate) tokens: Tokens,
}

/// An `execute_tool` span's fields.
#[derive(Default)]
pub(crate) struct ToolFields {
    pub(crate) tool: String,
    pub(crate) outcome: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) approval_wait_ms: Option<u64>,
}

/// Usage, as a span records it.
#[derive(Default, Clone, Copy)]
pub(crate) struct Tokens {
    pub(crate) input: u64,
    pub(crate) output: u64,
    pub(crate) cache_read: u64,
}

impl Tokens {
    /// Takes a usage field; false if `name` is none.
    fn take(&mut self, name: &str, value: u64) -> bool {
        match name {
            fields::USAGE_INPUT_TOKENS => self.input = value,
            fields::USAGE_OUTPUT_TOKENS => self.output = value,
            fields::USAGE_CACHE_READ_INPUT_TOKENS => self.cache_read = value,
            _ => return false,
        }
        true
    }

    /// Each kind with its label value.
    pub(crate) fn by_type(self) -> [(&'static str, u64); 3] {
        [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
        ]
    }
}

impl Op {
    fn text(&mut self, name: &str, value: &str) {
        // Only the fields counted are copied.
        let slot = match self {
            Op::Run(run) => match name {
                fields::AGENT_ID => &mut run.run_id,
                fields::STOP_REASON => &mut run.stop_reason,
                _ => return,
            },
            Op::Chat(chat) => match name {
                fields::PROVIDER_NAME => return chat.provider = value.to_string(),
                fields::REQUEST_MODEL => return chat.model = value.to_string(),
                fields::ERROR_TYPE => &mut chat.error,
                _ => return,
            },
            Op::Tool(tool) => match name {
                fields::TOOL_NAME => return tool.tool = value.to_string(),
                fields::OUTCOME => &mut tool.outcome,
                fields::ERROR_TYPE => &mut tool.error,
                _ => return,
            },
        };
        *slot = Some(value.to_string());
    }

    fn number(&mut self, name: &str, value: u64) {
        match self {
            Op::Run(run) => {
                if !run.tokens.take(name, value) {
                    match name {
                        "agentry.steps" => run.steps = value,
                        "agentry.budget.spent.cost_micros" => run.cost_micros = value,
                        _ => {}
                    }
                }
            }
            Op::Chat(chat) => {
                if !chat.tokens.take(name, value) && name == "agentry.time_to_first_chunk_ms" {
                    chat.first_chunk_ms = Some(value);
                }
            }
            Op::Tool(tool) => {
                if name == "agentry.approval_wait_ms" {
                    tool.approval_wait_ms = Some(value);
                }
            }
        }
    }
}

impl Visit for Op {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.text(field.name(), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field.name(), u64::try_from(value).unwrap_or(0));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field.name(), value);
    }

    // Formatted values (`otel.name`, content) are not counted.
    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

/// A retry event on a tool's span: its error code.
#[derive(Default)]
pub(crate) struct RetryEvent {
    pub(crate) is_retry: bool,
    pub(crate) code: String,
}

impl Visit for RetryEvent {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == fields::ERROR_TYPE {
            self.code = value.to_string();
        }
    }

    fn record_i64(&mut self, field: &Field, _value: i64) {
        if field.name() == "agentry.backoff_ms" {
            self.is_retry = true;
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

/// A run-status event (`agentry::metrics`).
#[derive(Default)]
pub(crate) struct StatusEvent {
    pub(crate) run_id: Option<String>,
    pub(crate) status: Option<Class>,
}

impl Visit for StatusEvent {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            fields::AGENT_ID => self.run_id = Some(value.to_string()),
            "agentry.status" => self.status = Some(Class::of(value)),
            _ => {}
        }
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

/// Which gauge a run's status counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// Running or stopped: only `runs_live` (while its span is open).
    Active,
    Approval,
    Decision,
    Sleeping,
    Paused,
}

impl Class {
    /// The class of a status as the runtime spells it.
    fn of(status: &str) -> Class {
        match status {
            "awaiting_approval" => Class::Approval,
            "awaiting_decision" => Class::Decision,
            "sleeping" => Class::Sleeping,
            "paused" => Class::Paused,
            _ => Class::Active,
        }
    }
}

/// The class of each live run (its span open, its id recorded), by run id.
#[derive(Default)]
pub(crate) struct Statuses(Mutex<HashMap<String, Class>>);

impl Statuses {
    /// The map; a panic elsewhere while it was held leaves it usable.
    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<String, Class>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
