//! What a model asks for when it delegates to a child agent (`agent.spawn`).
//!
//! Plain data: the `agent.spawn` tool (agentry-tools) builds it, the runtime
//! starts the child from it, and a policy factory (agentry-policy) may build the
//! child's model from it.

use serde_json::Value;

use crate::budget::BudgetLimits;

/// What a model asks for when it delegates.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildRequest {
    /// The child's goal.
    pub goal: String,
    /// The budget it asks for (carved out of the parent's).
    pub limits: BudgetLimits,
    /// Its grants; `None` inherits the parent's.
    pub grants: Option<Vec<String>>,
    /// An inline script for the scripted policy (the built-in, networkless model).
    pub script: Option<Value>,
    /// A name the parent can use instead of the child's id (unique per parent).
    pub name: Option<String>,
    /// Which of the models the host configures for children runs it (by name);
    /// `None`: the default child model.
    pub model: Option<String>,
}
