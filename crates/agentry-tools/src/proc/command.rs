//! [`CommandTool`]: a command-backed tool with a full contract and an argv template.

use std::ffi::OsString;

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::ToolContract;
use async_trait::async_trait;
use serde_json::Value;

use super::config::ProcConfig;
use super::env::host_env;
use super::run::{Invocation, run};
use crate::tool::{Tool, ToolContext, ToolOutput};

/// Why a [`CommandTool`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandToolError {
    /// The argv template has no program.
    #[error("the argv template of {tool} is empty")]
    EmptyArgv {
        /// The tool's name.
        tool: String,
    },
    /// `argv[0]` is a placeholder: the model would choose the program.
    #[error("argv[0] of {tool} must be a literal program, not the placeholder {element}")]
    ProgramPlaceholder {
        /// The tool's name.
        tool: String,
        /// The offending template element.
        element: String,
    },
    /// A placeholder (or the stdin field) names no property of the input schema.
    #[error("{tool} uses the field {field}, which is not a property of its input schema")]
    UnknownField {
        /// The tool's name.
        tool: String,
        /// The field name.
        field: String,
    },
}

/// One element of an argv template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArgTemplate {
    /// Passed as is.
    Literal(String),
    /// `{name}`: one element, the argument's value.
    Field(String),
    /// `{name...}`: one element per item of an array argument.
    Spread(String),
}

impl ArgTemplate {
    /// An element is a placeholder only if it is exactly `{name}` or `{name...}`
    /// with `name` made of `[A-Za-z0-9_-]`, not starting with a digit; anything
    /// else (`{}` for `find -exec`, `--x={y}`) is literal.
    fn parse(element: &str) -> ArgTemplate {
        let Some(inner) = element
            .strip_prefix('{')
            .and_then(|rest| rest.strip_suffix('}'))
        else {
            return ArgTemplate::Literal(element.to_string());
        };
        let (name, spread) = match inner.strip_suffix("...") {
            Some(name) => (name, true),
            None => (inner, false),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        match (valid, spread) {
            (false, _) => ArgTemplate::Literal(element.to_string()),
            (true, false) => ArgTemplate::Field(name.to_string()),
            (true, true) => ArgTemplate::Spread(name.to_string()),
        }
    }
}

/// A tool backed by a command: a full [`ToolContract`] plus an argv template.
///
/// Template elements that are exactly `{field}` are replaced by the argument of
/// that name (a string, number or boolean becomes one element; anything else is
/// `EINVAL`); `{field...}` expands an array argument to one element per item (a
/// scalar gives one element). A missing or `null` argument gives no element, so
/// make a field required in the schema when its position matters. There is no
/// shell and no splitting: a value with spaces stays one element. Values are not
/// otherwise checked, so put `--` (or the program's equivalent) before
/// positional placeholders when a value starting with `-` must not be read as
/// an option. `argv[0]` must be literal. The arguments are schema-validated by
/// the executor before the tool runs.
///
/// The process runs in the run's working directory, with the same machinery as
/// `proc.run` (output caps, process group kill, environment allowlist with the
/// host's values), plus any fixed variables added with [`CommandTool::with_env`],
/// plus the host's ids of the call (`AGENTRY_RUN_ID`, `AGENTRY_CALL_ID`,
/// `AGENTRY_OPERATION_ID`, `AGENTRY_SPAWN_ID`: see the [module docs](super));
/// a `required_key` command drops a duplicate by the operation id.
/// Data and refs have the `proc.run` shape. See the [module docs](super) for an
/// example.
#[derive(Debug, Clone)]
pub struct CommandTool {
    contract: ToolContract,
    argv: Vec<ArgTemplate>,
    stdin_field: Option<String>,
    env: Vec<(String, String)>,
    config: ProcConfig,
    sandbox: agentry_sandbox::SandboxOverride,
}

impl CommandTool {
    /// A tool with this contract running this argv template. Fails when the
    /// template is empty, `argv[0]` is a placeholder, or a placeholder names a
    /// field missing from the schema's `properties`.
    pub fn new<I, S>(contract: ToolContract, argv: I) -> Result<Self, CommandToolError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let argv: Vec<ArgTemplate> = argv
            .into_iter()
            .map(|a| ArgTemplate::parse(a.as_ref()))
            .collect();
        let tool = contract.name.clone();
        match argv.first() {
            None => return Err(CommandToolError::EmptyArgv { tool }),
            Some(ArgTemplate::Field(name)) => {
                return Err(CommandToolError::ProgramPlaceholder {
                    tool,
                    element: format!("{{{name}}}"),
                });
            }
            Some(ArgTemplate::Spread(name)) => {
                return Err(CommandToolError::ProgramPlaceholder {
                    tool,
                    element: format!("{{{name}...}}"),
                });
            }
            Some(ArgTemplate::Literal(_)) => {}
        }
        for element in &argv {
            match element {
                ArgTemplate::Literal(_) => {}
                ArgTemplate::Field(name) | ArgTemplate::Spread(name) => {
                    check_field(&contract, name)?;
                }
            }
        }
        Ok(CommandTool {
            contract,
            argv,
            stdin_field: None,
            env: Vec::new(),
            config: ProcConfig::default(),
            sandbox: agentry_sandbox::SandboxOverride::default(),
        })
    }

    /// Feeds the argument `field` (a string; numbers and booleans are rendered)
    /// to the process's standard input. Without it, or when the argument is
    /// absent, standard input is empty.
    pub fn with_stdin_field(mut self, field: impl Into<String>) -> Result<Self, CommandToolError> {
        let field = field.into();
        check_field(&self.contract, &field)?;
        self.stdin_field = Some(field);
        Ok(self)
    }

    /// Sets a fixed environment variable for every call (the embedder's choice,
    /// so it need not be allowlisted). The host's ids ([`super::HOST_ENV`]) are
    /// set after it and win.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Runs the tool's processes under the run's `[sandbox]` with these
    /// settings replacing the run's (task.toml: `sandbox = { network = true }`).
    pub fn with_sandbox(mut self, over: agentry_sandbox::SandboxOverride) -> Self {
        self.sandbox = over;
        self
    }

    /// Replaces the process configuration (caps, term grace, allowlist).
    pub fn with_config(mut self, config: ProcConfig) -> Self {
        self.config = config;
        self
    }

    /// The argv for these (schema-validated) arguments.
    fn render(&self, args: &Value) -> Result<Vec<String>, ToolError> {
        let mut argv = Vec::with_capacity(self.argv.len());
        for element in &self.argv {
            match element {
                ArgTemplate::Literal(text) => argv.push(text.clone()),
                ArgTemplate::Field(name) => match args.get(name) {
                    None | Some(Value::Null) => {}
                    Some(value) => argv.push(scalar(name, value)?),
                },
                ArgTemplate::Spread(name) => match args.get(name) {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(items)) => {
                        for item in items {
                            argv.push(scalar(name, item)?);
                        }
                    }
                    Some(value) => argv.push(scalar(name, value)?),
                },
            }
        }
        Ok(argv)
    }

    fn stdin(&self, args: &Value) -> Result<Option<String>, ToolError> {
        match self
            .stdin_field
            .as_deref()
            .map(|name| (name, args.get(name)))
        {
            None | Some((_, None | Some(Value::Null))) => Ok(None),
            Some((name, Some(value))) => scalar(name, value).map(Some),
        }
    }
}

/// Placeholders must name a declared property, so a typo fails at registration.
fn check_field(contract: &ToolContract, field: &str) -> Result<(), CommandToolError> {
    let declared = contract
        .input_schema
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|props| props.contains_key(field));
    if declared {
        Ok(())
    } else {
        Err(CommandToolError::UnknownField {
            tool: contract.name.clone(),
            field: field.to_string(),
        })
    }
}

/// A string, number or boolean as one argv element.
fn scalar(name: &str, value: &Value) -> Result<String, ToolError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => Err(ToolError::new(
            ErrorCode::Einval,
            format!("argument {name} must be a string, number or boolean (or an array of them)"),
        )
        .with_action("fix the arguments and call again")),
    }
}

#[async_trait]
impl Tool for CommandTool {
    /// The group gets SIGTERM, then SIGKILL after `term_grace`, then is reaped:
    /// that needs the grace plus a little for the reaping.
    fn cancel_grace(&self) -> std::time::Duration {
        self.config.term_grace + std::time::Duration::from_millis(25)
    }

    fn contract(&self) -> ToolContract {
        self.contract.clone()
    }

    fn sandbox(&self) -> Option<agentry_sandbox::SandboxOverride> {
        Some(self.sandbox.clone())
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let argv = self.render(&args)?;
        let stdin = self.stdin(&args)?;
        let mut env = host_env(&self.config.env_allowlist);
        for (name, value) in &self.env {
            env.retain(|(n, _)| n != name);
            env.push((name.clone(), OsString::from(value)));
        }
        let invocation = Invocation {
            argv,
            stdin,
            cwd: ctx.run.workdir.to_path_buf(),
            env,
            sandbox: self.sandbox.clone(),
        };
        run(invocation, &self.config, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn contract() -> ToolContract {
        ToolContract::new(
            "t",
            "d",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"}, "n": {"type": "integer"},
                "args": {"type": "array"}, "flag": {"type": "boolean"}, "opt": {"type": "string"}
            }}),
        )
    }

    #[test]
    fn placeholders_are_whole_elements_only() {
        assert_eq!(
            ArgTemplate::parse("{pattern}"),
            ArgTemplate::Field("pattern".into())
        );
        assert_eq!(
            ArgTemplate::parse("{args...}"),
            ArgTemplate::Spread("args".into())
        );
        for literal in ["{}", "{...}", "--x={y}", "{1a}", "{a b}", "{a", "a}", "x"] {
            assert_eq!(
                ArgTemplate::parse(literal),
                ArgTemplate::Literal(literal.into()),
                "{literal}"
            );
        }
    }

    #[test]
    fn render_expands_scalars_arrays_and_skips_missing() {
        let tool = CommandTool::new(
            contract(),
            [
                "prog",
                "-n",
                "{n}",
                "{flag}",
                "{pattern}",
                "{opt}",
                "--",
                "{args...}",
                "{}",
            ],
        )
        .unwrap();
        let argv = tool
            .render(&json!({"n": 3, "flag": true, "pattern": "a b", "args": ["x", 2, false]}))
            .unwrap();
        assert_eq!(
            argv,
            [
                "prog", "-n", "3", "true", "a b", "--", "x", "2", "false", "{}"
            ]
        );
        let err = tool
            .render(&json!({"pattern": {"no": "objects"}}))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
        assert!(err.message.contains("pattern"), "{}", err.message);
        let err = tool.render(&json!({"args": [[1]]})).unwrap_err();
        assert_eq!(err.code, ErrorCode::Einval);
    }

    #[test]
    fn construction_errors_name_the_problem() {
        assert_eq!(
            CommandTool::new(contract(), Vec::<String>::new()).unwrap_err(),
            CommandToolError::EmptyArgv { tool: "t".into() }
        );
        assert_eq!(
            CommandTool::new(contract(), ["{pattern}", "x"]).unwrap_err(),
            CommandToolError::ProgramPlaceholder {
                tool: "t".into(),
                element: "{pattern}".into()
            }
        );
        let err = CommandTool::new(contract(), ["grep", "{patern}"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "t uses the field patern, which is not a property of its input schema"
        );
        let err = CommandTool::new(contract(), ["cat"])
            .unwrap()
            .with_stdin_field("input")
            .unwrap_err();
        assert!(matches!(err, CommandToolError::UnknownField { .. }));
    }
}
