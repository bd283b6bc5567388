//! Tool contracts and tool calls.
//!
//! A contract has a model-facing part ([`ToolSpec`]: name, description, input
//! schema) and host-only fields (effect, idempotency, scope, timeout, version)
//! that the model never sees.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a tool does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Reads only; safe to run in parallel and to retry.
    ReadOnly,
    /// Changes the world in a way that can be undone (e.g. writing a workspace file).
    Reversible,
    /// Changes the world outside the host's control (payments, emails). Never retried
    /// automatically.
    IrreversibleExternal,
}

/// Whether running a call twice is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idempotency {
    /// Running twice has the same effect as once.
    Idempotent,
    /// Safe only with a caller-supplied idempotency key.
    RequiredKey,
    /// Not idempotent.
    None,
}

impl Effect {
    /// The serialized name, e.g. `"read_only"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::ReadOnly => "read_only",
            Effect::Reversible => "reversible",
            Effect::IrreversibleExternal => "irreversible_external",
        }
    }
}

impl Idempotency {
    /// The serialized name, e.g. `"required_key"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Idempotency::Idempotent => "idempotent",
            Idempotency::RequiredKey => "required_key",
            Idempotency::None => "none",
        }
    }
}

/// Expected cost of one call, for planning and budgets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCostHint {
    /// Typical latency in milliseconds.
    #[serde(default)]
    pub latency_ms: u64,
    /// Money per call, in micro-units.
    #[serde(default)]
    pub money_micros: u64,
}

/// The full contract of a tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolContract {
    /// Unique name, e.g. `fs.read`. Shown to the model.
    pub name: String,
    /// What the tool does and when to use it. Shown to the model.
    pub description: String,
    /// JSON Schema of the arguments object. Shown to the model.
    pub input_schema: Value,
    /// Human-readable preconditions the host checks before running (host only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preconditions: Vec<String>,
    /// What the tool does to the world (host only).
    pub effect: Effect,
    /// Whether repeated execution is safe (host only).
    pub idempotency: Idempotency,
    /// Expected cost (host only).
    #[serde(default)]
    pub cost: ToolCostHint,
    /// The permission scope a run must be granted to call this tool (host only).
    pub auth_scope: String,
    /// Per-call timeout in milliseconds (host only).
    pub timeout_ms: u64,
    /// Contract version, recorded in the trace (host only).
    pub version: String,
    /// Whether calls may run concurrently with other parallel-safe calls of the
    /// same step. `None`: only `read_only` tools are parallel-safe (host only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_safe: Option<bool>,
    /// How many times the executor may retry a retryable failure of one call
    /// (never for `irreversible_external` tools or permission errors) (host only).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// Names of argument and result fields whose values are secrets (host
    /// only): their values are replaced by `[redacted:field:NAME]` in everything
    /// agentry writes (trace, store, events, spans, logs); the tool and the
    /// model still see the real values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// Result fields whose values change from one run to the next by nature
    /// (a timestamp, a process id) (host only): `agentry replay` does not
    /// count a difference there as drift. A name matches that key at any
    /// depth of the result's data; a dotted path (`meta.at`) matches from its
    /// root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volatile: Vec<String>,
}

fn default_retries() -> u32 {
    2
}

impl ToolContract {
    /// A contract with conservative defaults: reversible, not idempotent, scope = name,
    /// 30 s timeout, version `1`.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        let name = name.into();
        ToolContract {
            auth_scope: name.clone(),
            name,
            description: description.into(),
            input_schema,
            preconditions: Vec::new(),
            effect: Effect::Reversible,
            idempotency: Idempotency::None,
            cost: ToolCostHint::default(),
            timeout_ms: 30_000,
            version: "1".to_string(),
            parallel_safe: None,
            max_retries: default_retries(),
            redact: Vec::new(),
            volatile: Vec::new(),
        }
    }

    /// Declares whether calls may run concurrently (overrides the effect-based default).
    pub fn parallel_safe(mut self, parallel: bool) -> Self {
        self.parallel_safe = Some(parallel);
        self
    }

    /// Marks argument and result fields whose values are secrets (see
    /// [`ToolContract::redact`]).
    pub fn redact_fields<I, S>(mut self, fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.redact = fields.into_iter().map(Into::into).collect();
        self
    }

    /// Marks result fields whose values differ from run to run (see
    /// [`ToolContract::volatile`]).
    pub fn volatile_fields<I, S>(mut self, fields: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.volatile = fields.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the per-call retry allowance.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Whether calls of this tool may run concurrently with other parallel-safe calls.
    pub fn is_parallel_safe(&self) -> bool {
        self.parallel_safe
            .unwrap_or(self.effect == Effect::ReadOnly)
    }

    /// Whether a failed call may be retried automatically at all: never for
    /// irreversible tools, and for tools with side effects only if repeating them is
    /// safe (a timed-out non-idempotent call may already have taken effect).
    pub fn may_retry(&self) -> bool {
        self.max_retries > 0
            && match self.effect {
                Effect::ReadOnly => true,
                Effect::Reversible => self.idempotency != Idempotency::None,
                Effect::IrreversibleExternal => false,
            }
    }

    /// Sets the effect.
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// Sets the idempotency.
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// Sets the auth scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.auth_scope = scope.into();
        self
    }

    /// Sets the timeout.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = ms;
        self
    }

    /// Sets the version.
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    /// Adds a documented precondition.
    pub fn precondition(mut self, text: impl Into<String>) -> Self {
        self.preconditions.push(text.into());
        self
    }

    /// The only part a model may see.
    pub fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
        }
    }
}

/// The model-facing view of a tool: name, description, input schema. Nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// Description.
    pub description: String,
    /// JSON Schema of the arguments.
    pub input_schema: Value,
}

/// Arguments as a model produced them: either raw JSON text (what a real model
/// emits, possibly broken) or an already-parsed value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolArguments {
    /// Raw JSON text; parsed by the executor, and `EINVAL` if it is not valid JSON.
    Raw(String),
    /// A JSON value.
    Parsed(Value),
}

impl ToolArguments {
    /// Parses into a JSON value. The error message names the JSON problem.
    pub fn to_value(&self) -> Result<Value, String> {
        match self {
            ToolArguments::Parsed(v) => Ok(v.clone()),
            ToolArguments::Raw(s) if s.trim().is_empty() => Ok(Value::Object(Default::default())),
            ToolArguments::Raw(s) => {
                serde_json::from_str(s).map_err(|e| format!("arguments are not valid JSON: {e}"))
            }
        }
    }
}

impl From<Value> for ToolArguments {
    fn from(v: Value) -> Self {
        ToolArguments::Parsed(v)
    }
}

/// One call the policy proposes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's call id; results are keyed by it.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments.
    pub arguments: ToolArguments,
}

impl ToolCall {
    /// A call with parsed arguments.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: Value) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: ToolArguments::Parsed(arguments),
        }
    }
}

/// The name a model API sees (every character outside `[a-zA-Z0-9_-]` → `_`).
/// The registry refuses two tools that meet here; model adapters map back.
pub fn wire_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn raw_and_parsed_arguments_round_trip() {
        let c: ToolCall =
            serde_json::from_value(json!({"id":"1","name":"x","arguments":"{\"a\":1}"})).unwrap();
        assert_eq!(c.arguments, ToolArguments::Raw("{\"a\":1}".into()));
        assert_eq!(c.arguments.to_value().unwrap(), json!({"a":1}));
        let c: ToolCall =
            serde_json::from_value(json!({"id":"1","name":"x","arguments":{"a":1}})).unwrap();
        assert_eq!(c.arguments, ToolArguments::Parsed(json!({"a":1})));
    }

    #[test]
    fn broken_json_names_the_problem() {
        let err = ToolArguments::Raw("{\"a\":".into()).to_value().unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
    }

    #[test]
    fn wire_names_keep_only_what_model_apis_take() {
        assert_eq!(wire_name("fs.read"), "fs_read");
        assert_eq!(wire_name("a-b_c.d e"), "a-b_c_d_e");
    }

    #[test]
    fn spec_hides_host_fields() {
        let c = ToolContract::new("t", "d", json!({"type":"object"})).scope("secret");
        let v = serde_json::to_value(c.spec()).unwrap();
        assert_eq!(v.as_object().unwrap().len(), 3);
    }
}

/// A process group a call started, as recorded with its intent: after a crash
/// the resumed run kills it (if it is still the same group) before the call is
/// run again, settled or reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessGroupRecord {
    /// The group id (its leader's pid).
    pub pgid: i32,
    /// When the leader started (clock ticks since boot, `/proc/<pid>/stat`
    /// field 22), so a reused pid is not taken for it; `None` where the
    /// platform does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_start: Option<u64>,
    /// The spawn's mark (`AGENTRY_SPAWN_ID`), which its processes carry in
    /// their environment, also those that left the group.
    pub spawn_id: String,
}

/// A task a call started on another system (a remote A2A agent's task), as
/// recorded with the call's intent before the call waits for it: after a
/// crash the resumed run follows this task to its end instead of starting a
/// second one or asking a human (`ToolContext::remote`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteRef {
    /// Which kind of system the id belongs to (`a2a`): a tool follows only
    /// references of its own kind.
    pub kind: String,
    /// The task's id on that system.
    pub id: String,
    /// The conversation the task belongs to there, if the system has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// Gives each call without an id (empty or blank) `call_<turn>_<k>` (`k` its
/// place among `calls`), with a suffix while that id is in `taken`, which it
/// then joins: a host-made id never duplicates one already in use.
pub fn assign_blank_ids(
    calls: &mut [ToolCall],
    turn: u64,
    taken: &mut std::collections::HashSet<String>,
) {
    for (k, call) in calls.iter_mut().enumerate() {
        if !call.id.trim().is_empty() {
            continue;
        }
        let base = format!("call_{turn}_{k}");
        let mut id = base.clone();
        let mut n = 1u64;
        while taken.contains(&id) {
            n += 1;
            id = format!("{base}_{n}");
        }
        taken.insert(id.clone());
        call.id = id;
    }
}
