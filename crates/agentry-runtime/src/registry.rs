//! The tool registry: contracts and compiled schemas (grants: [`crate::grants`]).
//!
//! Built once and shared (`Arc`) by every run, so schemas are compiled once.
//! A runtime holds it in a [`LiveRegistry`]: a tool source whose set changes
//! while runs go (an MCP server's `tools/list_changed`) has a new registry
//! built and put in its place; each run reads the one in place at each step
//! (`VisibleTools` for what the model is shown, the executor per batch).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

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
    /// Wire name (what a model API sees) → name: a collision is found in one
    /// lookup, so registering n tools is linear (an MCP server may list
    /// thousands).
    wires: HashMap<String, String>,
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
        if let Some(other) = self.wires.get(&wire) {
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
        self.wires.insert(wire, name.clone());
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

    /// The registered tools, in registration order.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.iter()
    }

    /// Registered names, sorted (for error messages).
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.index.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// A runtime's registry, replaceable while its runs go. Cheap to clone;
/// clones share it.
///
/// A replacement is seen by every run from its next step: the tools shown to
/// the model (filtered by the run's grants, as at its start) and the ones its
/// calls find. A call already checked against the registry it replaced runs
/// on the tool it found there.
#[derive(Clone)]
pub struct LiveRegistry {
    inner: Arc<Live>,
}

struct Live {
    current: RwLock<Arc<ToolRegistry>>,
    /// Bumped by each replacement, so a run recomputes its visible tools only
    /// when they may have changed.
    generation: AtomicU64,
}

impl LiveRegistry {
    /// A live registry holding `registry`.
    pub fn new(registry: ToolRegistry) -> Self {
        LiveRegistry {
            inner: Arc::new(Live {
                current: RwLock::new(Arc::new(registry)),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// The registry in place now.
    pub fn current(&self) -> Arc<ToolRegistry> {
        let current = self
            .inner
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(&current)
    }

    /// How many times it was replaced.
    pub fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// Puts `registry` in place: runs see it from their next step.
    pub fn replace(&self, registry: ToolRegistry) {
        let mut current = self
            .inner
            .current
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(registry);
        // Under the lock: a reader that sees the new generation finds the
        // new registry.
        self.inner.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// A handle that does not keep the registry (and its tools) alive: what
    /// a watcher that replaces it holds, so that it ends with the runtime.
    pub fn downgrade(&self) -> WeakLiveRegistry {
        WeakLiveRegistry(Arc::downgrade(&self.inner))
    }
}

impl std::fmt::Debug for LiveRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRegistry")
            .field("generation", &self.generation())
            .field("current", &self.current())
            .finish()
    }
}

/// A [`LiveRegistry`] that may be gone ([`LiveRegistry::downgrade`]).
#[derive(Clone, Debug)]
pub struct WeakLiveRegistry(Weak<Live>);

impl WeakLiveRegistry {
    /// The registry, if a runtime still holds it.
    pub fn upgrade(&self) -> Option<LiveRegistry> {
        self.0.upgrade().map(|inner| LiveRegistry { inner })
    }
}

/// The tool specs one run shows its model: the live registry's, filtered by
/// the run's grants, recomputed only after a replacement.
pub(crate) struct VisibleTools {
    live: LiveRegistry,
    grants: crate::grants::Grants,
    generation: u64,
    specs: Arc<[ToolSpec]>,
}

impl VisibleTools {
    pub(crate) fn new(live: LiveRegistry, grants: crate::grants::Grants) -> Self {
        let generation = live.generation();
        let specs = live.current().visible_specs(|c| grants.allows(c));
        VisibleTools {
            live,
            grants,
            generation,
            specs,
        }
    }

    /// The specs for the step about to be decided.
    pub(crate) fn current(&mut self) -> Arc<[ToolSpec]> {
        let generation = self.live.generation();
        if generation != self.generation {
            let grants = &self.grants;
            self.specs = self.live.current().visible_specs(|c| grants.allows(c));
            self.generation = generation;
        }
        Arc::clone(&self.specs)
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

    /// A replacement is what a run's next step sees, through its grants;
    /// nothing is recomputed while none happens.
    #[test]
    fn a_replaced_registry_is_what_the_next_step_sees_through_its_grants() {
        use agentry_tools::fs::{ListTool, ReadTool, WriteTool};
        let names = |specs: &[ToolSpec]| specs.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
        let mut first = ToolRegistry::new();
        first.register(Arc::new(ReadTool)).unwrap();
        first.register(Arc::new(WriteTool)).unwrap();
        let live = LiveRegistry::new(first);
        let mut visible = VisibleTools::new(live.clone(), Grants::new(["fs.read", "fs.list"]));
        let before = visible.current();
        assert_eq!(names(&before), ["fs.read"]);
        assert!(Arc::ptr_eq(&before, &visible.current()), "not recomputed");

        let mut second = ToolRegistry::new();
        second.register(Arc::new(ListTool)).unwrap();
        second.register(Arc::new(WriteTool)).unwrap();
        live.replace(second);
        assert_eq!(live.generation(), 1);
        // fs.read is gone, fs.list granted and new, fs.write not granted.
        assert_eq!(names(&visible.current()), ["fs.list"]);
        assert!(live.current().get("fs.read").is_none());
        assert!(live.current().get("fs.list").is_some());

        let weak = live.downgrade();
        assert!(weak.upgrade().is_some());
        drop((live, visible));
        assert!(
            weak.upgrade().is_none(),
            "a weak handle keeps nothing alive"
        );
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
