//! The run's redactor: one per run (shared by a tree unless a child adds
//! patterns), built at launch, applied before everything the run writes.
//!
//! What it replaces: the built-in detectors of `agentry-redact` (compiled once
//! per process), the values of environment variables whose names contain KEY,
//! TOKEN, SECRET or PASSWORD (the environment is read once per process, when
//! the first redactor is built), the run's
//! `RunConfig.observe.redact_patterns`, and the values of the fields its tools
//! declare secret (`ToolContract.redact`), registered as calls are decided and
//! results arrive. Building it per run compiles nothing: the env values'
//! automata and each distinct pattern list are compiled once per process and
//! shared (`agentry-redact`); only a run that registers a field value gets
//! automata of its own.
//!
//! Where it sits (each write redacts on the writer's side, so a run nobody
//! traces, stores or watches pays nothing):
//! - the JSONL trace: each line after serialization, on the trace thread
//!   (`trace.rs`);
//! - the store: every batch through [`RunLog`](crate::durable::RunLog), on the
//!   store's writer thread (`durable/writer.rs`);
//! - the event stream: each event as it is built for a listener (`events.rs`),
//!   streamed text through a holdback so a secret split across deltas is
//!   caught (`policy.rs`).
//!
//! Not writes, so not redacted: the policy's view of the session (the model
//! sees real values), [`RunOutcome`](crate::RunOutcome) handed to the
//! embedder, and results a tool saves into the working directory. The store
//! holds the redacted session, so a resumed durable run's model sees
//! `[redacted:…]` where the first process's saw the value.
//!
//! A child run shares its parent's redactor (so a field value registered
//! anywhere in the tree is replaced everywhere in it) unless its own
//! `redact_patterns` add patterns the parent lacks: then it gets one of its
//! own, built from the parent's patterns and its own (fields registered in the
//! parent before are not carried over).

use std::sync::Arc;

use agentry_protocol::decision::Decision;
use agentry_protocol::envelope::ResultEnvelope;
use agentry_protocol::tool::ToolContract;
use agentry_redact::{LiteralKind, Redactor};
use serde_json::Value;

use crate::config::RunConfig;
use crate::error::RuntimeError;
use crate::registry::ToolRegistry;

/// A run's redactor and the task patterns it was built with.
#[derive(Debug)]
pub(crate) struct RunRedaction {
    /// The redactor.
    pub(crate) redactor: Arc<Redactor>,
    /// Its task patterns (a child adding none shares it).
    patterns: Vec<String>,
    /// The tools, when one of them declares secret fields (`None`: nothing to
    /// register, decisions are not even looked at).
    fields: Option<Arc<ToolRegistry>>,
}

impl RunRedaction {
    /// The redactor of a run configured with `config`, the child of a run
    /// redacting with `parent` if any. An invalid pattern is
    /// [`RuntimeError::Redaction`], naming it.
    pub(crate) fn for_run(
        config: &RunConfig,
        parent: Option<&Arc<RunRedaction>>,
        registry: &Arc<ToolRegistry>,
    ) -> Result<Arc<RunRedaction>, RuntimeError> {
        let own = &config.observe.redact_patterns;
        if let Some(parent) = parent
            && own.iter().all(|p| parent.patterns.contains(p))
        {
            return Ok(Arc::clone(parent));
        }
        let mut patterns = parent.map(|p| p.patterns.clone()).unwrap_or_default();
        for p in own {
            if !patterns.contains(p) {
                patterns.push(p.clone());
            }
        }
        let redactor = Redactor::builder().patterns(patterns.clone()).build()?;
        let fields = registry
            .declares_secret_fields()
            .then(|| Arc::clone(registry));
        Ok(Arc::new(RunRedaction {
            redactor: Arc::new(redactor),
            patterns,
            fields,
        }))
    }

    /// Built-ins only, no environment (unit tests of the actors).
    #[cfg(test)]
    pub(crate) fn for_tests() -> Arc<RunRedaction> {
        let redactor = Redactor::builder()
            .env(Vec::<(String, String)>::new())
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        Arc::new(RunRedaction {
            redactor: Arc::new(redactor),
            patterns: Vec::new(),
            fields: None,
        })
    }

    /// Registers the values of the secret argument fields of `decision`'s
    /// calls (by their tools' contracts), before the decision is recorded or
    /// published. Free when no tool declares such fields.
    pub(crate) fn register_arguments(&self, decision: &Decision) {
        if let Some(registry) = &self.fields {
            register_arguments(&self.redactor, registry, decision);
        }
    }
}

fn register_arguments(redactor: &Redactor, registry: &ToolRegistry, decision: &Decision) {
    let Decision::ToolCalls { calls } = decision else {
        return;
    };
    for call in calls {
        let Some(tool) = registry.get(&call.name) else {
            continue;
        };
        if tool.contract.redact.is_empty() {
            continue;
        }
        // Raw arguments that do not parse carry no field to find; the
        // built-in detectors still scan their text.
        if let Ok(args) = call.arguments.to_value() {
            register_fields(redactor, &tool.contract.redact, &args);
        }
    }
}

/// Registers the values of `contract`'s secret fields found in `result`,
/// before the result is recorded or published.
pub(crate) fn register_result(
    redactor: &Redactor,
    contract: &ToolContract,
    result: &ResultEnvelope,
) {
    if contract.redact.is_empty() {
        return;
    }
    if let Some(data) = &result.data {
        register_fields(redactor, &contract.redact, data);
    }
}

/// Every value under a key named in `fields`, at any depth of `value`.
fn register_fields(redactor: &Redactor, fields: &[String], value: &Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if let Some(name) = fields.iter().find(|f| *f == key) {
                    register_leaves(redactor, name, v);
                } else {
                    register_fields(redactor, fields, v);
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                register_fields(redactor, fields, v);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// Registers every string and number inside a secret field's value.
fn register_leaves(redactor: &Redactor, name: &str, value: &Value) {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Object(map) => {
            for v in map.values() {
                register_leaves(redactor, name, v);
            }
            return;
        }
        Value::Array(items) => {
            for v in items {
                register_leaves(redactor, name, v);
            }
            return;
        }
        Value::Null | Value::Bool(_) => return,
    };
    if let Err(e) = redactor.add_literal(&text, LiteralKind::Field(name.to_string())) {
        // The value is not named: it is the secret.
        tracing::warn!(field = name, error = %e, "a secret field's value could not be registered for redaction");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Arc<ToolRegistry> {
        Arc::new(ToolRegistry::new())
    }

    #[test]
    fn a_child_adding_no_pattern_shares_its_parents_redactor() {
        let dir = std::env::temp_dir();
        let mut config = RunConfig::new("g", &dir);
        config.observe.redact_patterns = vec!["card-[0-9]{4}".into()];
        let parent = RunRedaction::for_run(&config, None, &registry()).unwrap();
        let same =
            RunRedaction::for_run(&RunConfig::new("g", &dir), Some(&parent), &registry()).unwrap();
        assert!(Arc::ptr_eq(&parent, &same));
        config.observe.redact_patterns = vec!["pin-[0-9]{4}".into()];
        let own = RunRedaction::for_run(&config, Some(&parent), &registry()).unwrap();
        assert!(!Arc::ptr_eq(&parent, &own));
        let text = own.redactor.redact_str("card-1234 pin-5678").into_owned();
        assert!(!text.contains("1234") && !text.contains("5678"), "{text}");
    }

    #[test]
    fn an_invalid_pattern_is_a_typed_error_naming_it() {
        let mut config = RunConfig::new("g", std::env::temp_dir());
        config.observe.redact_patterns = vec!["ok".into(), "unclosed(".into()];
        let err = RunRedaction::for_run(&config, None, &registry()).unwrap_err();
        assert!(matches!(err, RuntimeError::Redaction(_)), "{err:?}");
        assert!(err.to_string().contains("unclosed("), "{err}");
    }

    #[test]
    fn secret_fields_are_found_at_any_depth() {
        let r = Redactor::builder()
            .env(Vec::<(String, String)>::new())
            .build()
            .unwrap();
        let fields = vec!["password".to_string()];
        let args = serde_json::json!({"user": "ann", "auth": {"password": "hunter2-x"}, "list": [{"password": 4711}]});
        register_fields(&r, &fields, &args);
        let out = r.redact_str("ann hunter2-x 4711").into_owned();
        assert_eq!(
            out,
            "ann [redacted:field:password] [redacted:field:password]"
        );
    }
}
