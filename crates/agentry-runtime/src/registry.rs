//! The tool registry: contracts and compiled schemas (grants: [`crate::grants`]).
//!
//! Built once and shared (`Arc`) by every run, so schemas are compiled once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agentry_protocol::tool::{ToolContract, ToolSpec};
use agentry_tools::Tool;
use serde_json::Value;

use crate::error::RuntimeError;

// Moved: `Grants` to `grants.rs`, `wire_name` to agentry-protocol; re-exported so
// `crate::registry::{Grants, wire_name}` keep working.
pub use crate::grants::Grants;
pub use agentry_protocol::tool::wire_name;

/// A registered tool: its implementation, contract, and compiled input schema.
pub struct RegisteredTool {
    /// The implementation.
    pub tool: Arc<dyn Tool>,
    /// The contract, read once at registration.
    pub contract: ToolContract,
    /// How long a cancelled call may run its cleanup (see `Tool::cancel_grace`).
    pub cancel_grace: std::time::Duration,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("contract", &self.contract)
            .finish()
    }
}

impl RegisteredTool {
    /// Validates arguments against the schema. The error lists every violation with
    /// its JSON path, so the model can correct the call.
    pub fn validate(&self, args: &Value) -> Result<(), String> {
        // Almost every call is valid: the boolean check skips building the error
        // iterator and its paths; the full walk runs only to explain a failure.
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let problems: Vec<String> = self
            .validator
            .iter_errors(args)
            .map(|e| {
                let path = e.instance_path().to_string();
                let at = if path.is_empty() {
                    "arguments".to_string()
                } else {
                    format!("arguments{path}")
                };
                format!("{at}: {e}")
            })
            .collect();
        if problems.is_empty() {
            // The two checks disagree only on a validator bug; refuse all the same.
            Err("arguments: do not match the input schema".to_string())
        } else {
            Err(problems.join("; "))
        }
    }
}

/// All tools a runtime can execute.
#[derive(Debug, Default)]
pub struct ToolRegistry {
    /// In registration order, so a run's visible set is one pass with no lookups.
    tools: Vec<RegisteredTool>,
    /// Name → position in `tools` and `specs`.
    index: HashMap<String, usize>,
    specs: Vec<ToolSpec>,
    /// The specs a run sees, per set of visible tools (registration positions):
    /// runs of one runtime mostly hold the same grants, and a spec's schema is a
    /// JSON tree too costly to copy for every run.
    visible: Mutex<HashMap<Vec<bool>, Arc<[ToolSpec]>>>,
    /// Whether a tool declares secret fields (`ToolContract::redact`).
    secret_fields: bool,
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// A registry with the built-in tools (`fs.read`, `fs.write`, `fs.list`, `task.finish`).
    pub fn with_builtins() -> Result<Self, RuntimeError> {
        let mut r = ToolRegistry::new();
        for t in agentry_tools::builtins() {
            r.register(t)?;
        }
        Ok(r)
    }

    /// Registers a tool. Its schema must compile, and its name must be new.
    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RuntimeError> {
        let contract = tool.contract();
        let name = contract.name.clone();
        let invalid = |message: String| RuntimeError::InvalidTool {
            name: name.clone(),
            message,
        };
        if name.is_empty() || name.chars().any(char::is_whitespace) {
            return Err(invalid(
                "name must be non-empty and contain no whitespace".into(),
            ));
        }
        if self.index.contains_key(&name) {
            return Err(invalid(
                "a tool with this name is already registered".into(),
            ));
        }
        // Model APIs accept only `[a-zA-Z0-9_-]{1,64}`; adapters map other
        // characters to `_` at the wire. Two names that would meet there are refused
        // now, not on the first model call.
        let wire = wire_name(&name);
        if wire.chars().count() > 64 {
            return Err(invalid(
                "name is longer than 64 characters, too long for model APIs".into(),
            ));
        }
        if let Some(other) = self.index.keys().find(|n| wire_name(n) == wire) {
            return Err(invalid(format!(
                "collides with tool {other:?}: both are {wire:?} for a model API"
            )));
        }
        let validator = compile(&contract.input_schema)
            .map_err(|e| invalid(format!("input_schema does not compile: {e}")))?;
        self.specs.push(contract.spec());
        if let Ok(visible) = self.visible.get_mut() {
            visible.clear();
        }
        let cancel_grace = tool.cancel_grace();
        self.secret_fields |= !contract.redact.is_empty();
        self.index.insert(name, self.tools.len());
        self.tools.push(RegisteredTool {
            tool,
            contract,
            cancel_grace,
            validator,
        });
        Ok(())
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&RegisteredTool> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// The model-facing specs of the tools `shown` lets through, in registration
    /// order; shared by every caller that sees the same tools.
    pub fn visible_specs(&self, shown: impl Fn(&ToolContract) -> bool) -> Arc<[ToolSpec]> {
        let mask: Vec<bool> = self.tools.iter().map(|t| shown(&t.contract)).collect();
        let build = || -> Arc<[ToolSpec]> {
            self.specs
                .iter()
                .zip(&mask)
                .filter(|(_, shown)| **shown)
                .map(|(s, _)| s.clone())
                .collect()
        };
        match self.visible.lock() {
            Ok(mut visible) => {
                if let Some(specs) = visible.get(&mask) {
                    return Arc::clone(specs);
                }
                let specs = build();
                // Bounded: a runtime with many distinct grant sets stops caching.
                if visible.len() < 64 {
                    visible.insert(mask, Arc::clone(&specs));
                }
                specs
            }
            Err(_) => build(),
        }
    }

    /// Whether any tool declares secret fields (`ToolContract::redact`),
    /// whose values a run must register with its redactor.
    pub fn declares_secret_fields(&self) -> bool {
        self.secret_fields
    }

    /// The model-facing specs, in registration order.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Registered names, sorted (for error messages).
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.index.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// Checks that a JSON Schema compiles, with the same compiler the registry
/// uses, so a task file's declared tool is refused at load time for exactly
/// what [`ToolRegistry::register`] would refuse it for.
pub fn check_schema(schema: &Value) -> Result<(), SchemaError> {
    compile(schema).map(|_| ())
}

/// Why a JSON Schema does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SchemaError {
    /// Where in the schema, as a JSON pointer (`/properties/a/type`); empty
    /// for the schema itself.
    pub path: String,
    /// What is wrong, as the schema compiler says it.
    pub message: String,
}

fn compile(schema: &Value) -> Result<jsonschema::Validator, SchemaError> {
    jsonschema::validator_for(schema).map_err(|e| SchemaError {
        path: e.instance_path().to_string(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn check_schema_names_the_spot_in_the_schema() {
        check_schema(&json!({"type": "object"})).unwrap();
        let err = check_schema(&json!({"properties": {"a": {"type": "strin"}}})).unwrap_err();
        assert_eq!(err.path, "/properties/a/type");
        assert!(!err.message.is_empty());
    }

    #[test]
    fn runs_with_the_same_grants_share_one_spec_list() {
        use agentry_tools::fs::{ListTool, ReadTool, WriteTool};
        let mut registry = ToolRegistry::new();
        registry.register(Arc::new(ReadTool)).unwrap();
        registry.register(Arc::new(WriteTool)).unwrap();
        let names = |specs: &[ToolSpec]| specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let read = Grants::new(["fs.read"]);
        let a = registry.visible_specs(|c| read.allows(c));
        let b = registry.visible_specs(|c| read.allows(c));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(names(&a), ["fs.read"]);
        let all = registry.visible_specs(|c| Grants::all().allows(c));
        assert_eq!(names(&all), ["fs.read", "fs.write"]);
        // A tool registered later shows up: nothing stale is served.
        registry.register(Arc::new(ListTool)).unwrap();
        let all = registry.visible_specs(|c| Grants::all().allows(c));
        assert_eq!(names(&all), ["fs.read", "fs.write", "fs.list"]);
    }

    #[test]
    fn schema_errors_name_the_field() {
        let r = ToolRegistry::with_builtins().unwrap();
        let read = r.get("fs.read").unwrap();
        let err = read
            .validate(&json!({"path": "a", "extra": 1}))
            .unwrap_err();
        assert!(err.contains("extra"), "{err}");
        let err = read.validate(&json!({"path": 3})).unwrap_err();
        assert!(err.contains("/path"), "{err}");
        read.validate(&json!({"path": "a"})).unwrap();
    }

    #[test]
    fn names_that_meet_at_the_wire_are_refused() {
        struct Named(&'static str);
        #[async_trait::async_trait]
        impl agentry_tools::Tool for Named {
            fn contract(&self) -> ToolContract {
                ToolContract::new(self.0, "", json!({"type": "object"}))
            }
            async fn call(
                &self,
                _: serde_json::Value,
                _: &agentry_tools::ToolContext,
            ) -> Result<agentry_tools::ToolOutput, agentry_protocol::ToolError> {
                Ok(agentry_tools::ToolOutput::default())
            }
        }
        let mut r = ToolRegistry::with_builtins().unwrap();
        let err = r
            .register(Arc::new(Named("fs_read")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("fs.read") && err.contains("fs_read"), "{err}");
        r.register(Arc::new(Named("fs-read"))).unwrap();
        assert_eq!(wire_name("fs.read"), "fs_read");
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut r = ToolRegistry::with_builtins().unwrap();
        let err = r.register(Arc::new(agentry_tools::FinishTool)).unwrap_err();
        assert!(err.to_string().contains("already registered"));
    }
}
