//! One `[[tools.command]]` table → a [`CommandToolDecl`], checked field by field
//! in file order, then built once so a placeholder naming no property is
//! reported at its element.

use std::collections::BTreeMap;

use agentry_protocol::tool::ToolContract;
use agentry_tools::proc::{CommandTool, CommandToolError};
use serde_json::Value as Json;
use toml::Value;

use super::fields::{
    argv, effect, env, idempotency, input_schema, max_retries, non_empty, properties,
    redact_fields, to_json, tool_name, volatile_fields,
};
use crate::raw::RawCommandTool;
use crate::values::{FieldError, describe, duration, field_error, millis};

/// A command tool declared by a task (`[[tools.command]]`), validated.
///
/// Declared tools are registered by [`TaskSpec::registry`](crate::TaskSpec::registry)
/// but granted like any other: the task's `[tools] grant` must name them (or
/// their scope).
#[derive(Debug, Clone, PartialEq)]
pub struct CommandToolDecl {
    /// The contract; `input_schema` always has `type: "object"` and
    /// `additionalProperties` (`false` unless the file says otherwise).
    pub contract: ToolContract,
    /// The argv template: `argv[0]` literal, `{field}` and `{field...}` elements
    /// replaced by arguments.
    pub argv: Vec<String>,
    /// The argument fed to the process's standard input (`stdin`).
    pub stdin: Option<String>,
    /// Fixed environment variables (`env`), set for every call.
    pub env: BTreeMap<String, String>,
    /// Its override of the task's `[sandbox]` (`sandbox = { network = true }`).
    pub sandbox: Option<agentry_sandbox::SandboxOverride>,
}

impl CommandToolDecl {
    /// Builds the tool. Cannot fail for a declaration made by
    /// [`TaskSpec::parse`](crate::TaskSpec::parse), which checks the same things
    /// first; a hand-made one may name a field its schema lacks.
    pub fn build(&self) -> Result<CommandTool, CommandToolError> {
        let mut tool = CommandTool::new(self.contract.clone(), &self.argv)?;
        if let Some(field) = &self.stdin {
            tool = tool.with_stdin_field(field.clone())?;
        }
        for (name, value) in &self.env {
            tool = tool.with_env(name, value);
        }
        if let Some(over) = &self.sandbox {
            tool = tool.with_sandbox(over.clone());
        }
        Ok(tool)
    }
}

/// The fields every declaration must have.
struct Required {
    name: String,
    description: String,
    argv: Vec<String>,
    input_schema: Json,
}

/// Checks one table; `at` names it (`tools.command[0]`).
pub(crate) fn declaration(
    at: &str,
    mut raw: RawCommandTool,
) -> Result<CommandToolDecl, FieldError> {
    let Required {
        name,
        description,
        argv,
        input_schema,
    } = required_parts(at, &mut raw)?;
    let mut contract = ToolContract::new(name, description, input_schema);
    contract_options(at, &mut raw, &mut contract)?;
    let stdin = match raw.stdin {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(v) => {
            return Err(field_error!(
                "{at}.stdin: expected the name of an argument, found {}",
                describe(&v)
            ));
        }
    };
    let env = match raw.env {
        None => BTreeMap::new(),
        Some(v) => env(&format!("{at}.env"), v)?,
    };
    let sandbox = raw
        .sandbox
        .take()
        .map(|v| crate::sandbox::sandbox_override(&format!("{at}.sandbox"), v))
        .transpose()?;
    let decl = CommandToolDecl {
        contract,
        argv,
        stdin,
        env,
        sandbox,
    };
    // The same checks the tool makes, mapped back to the element at fault.
    match decl.build() {
        Ok(_) => Ok(decl),
        Err(e) => Err(build_error_at(at, &decl, e)),
    }
}

/// `name`, `description`, `argv` and `input_schema` (which may be absent: an
/// object with no properties), in that order.
fn required_parts(at: &str, raw: &mut RawCommandTool) -> Result<Required, FieldError> {
    let name = match raw.name.take() {
        None => {
            return Err(field_error!(
                "{at}.name: missing; the tool name the model calls"
            ));
        }
        Some(v) => tool_name(&format!("{at}.name"), &v)?,
    };
    let description = match raw.description.take() {
        None => {
            return Err(field_error!(
                "{at}.description: missing; tell the model what the tool does"
            ));
        }
        Some(v) => non_empty(&format!("{at}.description"), &v)?,
    };
    let argv = match raw.argv.take() {
        None => {
            return Err(field_error!(
                "{at}.argv: missing; e.g. argv = [\"cat\", \"{{path}}\"]"
            ));
        }
        Some(v) => argv(&format!("{at}.argv"), v)?,
    };
    let schema = match raw.input_schema.take() {
        None => serde_json::json!({"type": "object", "properties": {}}),
        Some(v @ Value::Table(_)) => to_json(&format!("{at}.input_schema"), v)?,
        Some(v) => {
            return Err(field_error!(
                "{at}.input_schema: expected a table (the JSON Schema of the arguments object), found {}",
                describe(&v)
            ));
        }
    };
    Ok(Required {
        name,
        description,
        argv,
        input_schema: input_schema(&format!("{at}.input_schema"), schema)?,
    })
}

/// The optional contract fields: effect, idempotency, timeout, auth scope,
/// retries, parallel safety, version, redacted and volatile fields.
fn contract_options(
    at: &str,
    raw: &mut RawCommandTool,
    contract: &mut ToolContract,
) -> Result<(), FieldError> {
    if let Some(v) = raw.effect.take() {
        contract.effect = effect(&format!("{at}.effect"), &v)?;
    }
    if let Some(v) = raw.idempotency.take() {
        contract.idempotency = idempotency(&format!("{at}.idempotency"), &v)?;
    }
    if let Some(v) = raw.timeout.take() {
        contract.timeout_ms = millis(duration(&format!("{at}.timeout"), &v)?);
    }
    if let Some(v) = raw.auth_scope.take() {
        let field = format!("{at}.auth_scope");
        let scope = non_empty(&field, &v)?;
        if scope.chars().any(char::is_whitespace) {
            return Err(field_error!(
                "{field}: must contain no whitespace (a grant could not name it), found {scope:?}"
            ));
        }
        contract.auth_scope = scope;
    }
    if let Some(v) = raw.max_retries.take() {
        contract.max_retries = max_retries(&format!("{at}.max_retries"), &v)?;
    }
    if let Some(v) = raw.parallel_safe.take() {
        let Value::Boolean(b) = v else {
            return Err(field_error!(
                "{at}.parallel_safe: expected true or false, found {}",
                describe(&v)
            ));
        };
        contract.parallel_safe = Some(b);
    }
    if let Some(v) = raw.version.take() {
        contract.version = non_empty(&format!("{at}.version"), &v)?;
    }
    if let Some(v) = raw.redact.take() {
        contract.redact = redact_fields(&format!("{at}.redact"), v)?;
    }
    if let Some(v) = raw.volatile.take() {
        contract.volatile = volatile_fields(&format!("{at}.volatile"), v)?;
    }
    Ok(())
}

/// A build error of the tool, named by the element at fault.
// `CommandToolError` is non_exhaustive (agentry-tools): a later kind reads as is.
#[allow(clippy::wildcard_enum_match_arm)]
fn build_error_at(at: &str, decl: &CommandToolDecl, e: CommandToolError) -> FieldError {
    match e {
        CommandToolError::ProgramPlaceholder { element, .. } => {
            field_error!("{at}.argv[0]: must be a literal program, not the placeholder {element}")
        }
        CommandToolError::UnknownField { field, .. } => {
            let declared = properties(&decl.contract.input_schema);
            let declared = if declared.is_empty() {
                "it declares none".to_string()
            } else {
                format!("it declares {}", declared.join(", "))
            };
            let placeholders = [format!("{{{field}}}"), format!("{{{field}...}}")];
            match decl.argv.iter().position(|a| placeholders.contains(a)) {
                Some(i) => field_error!(
                    "{at}.argv[{i}]: {} names no property of input_schema ({declared})",
                    decl.argv[i]
                ),
                None => field_error!(
                    "{at}.stdin: {field:?} names no property of input_schema ({declared})"
                ),
            }
        }
        e @ CommandToolError::EmptyArgv { .. } => field_error!("{at}: {e}"),
        e => field_error!("{at}: {e}"),
    }
}
