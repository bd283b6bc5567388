//! Loading a task directory (`task.toml`, `script.json`, `workspace/`).
//!
//! A task directory is the CLI's unit of work:
//!
//! ```text
//! TASK_DIR/
//!   task.toml      goal, budget, grants, command tools, acceptance checks, policy,
//!                  progress window
//!   script.json    the scripted policy (optional: `[policy] script` or --policy)
//!   workspace/     initial files, copied into a fresh working directory per run
//! ```
//!
//! Parsing is two-phase: serde (`deny_unknown_fields`) only checks which keys
//! exist, one table at a time so an unknown key is reported with its table; every
//! value is then validated by hand, so an error names the field and says what was
//! expected and what was found (`budget.max_steps: expected a positive integer,
//! found "ten"`). Every error is [`RuntimeError::InvalidTask`] naming the file.
//!
//! `[[tools.command]]` tables declare command tools ([`command`]); the task's
//! tools are the built-ins plus those, in [`TaskSpec::registry`].

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agentry_protocol::accept::AcceptCheck;
use agentry_protocol::budget::BudgetLimits;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use toml::Value;

use crate::config::{
    ApprovalConfig, DEFAULT_MAX_STEPS, DEFAULT_PROGRESS_WINDOW, Driver, RunConfig,
};
use crate::error::RuntimeError;
use crate::registry::{Grants, ToolRegistry};

pub mod command;

pub use command::CommandToolDecl;

/// The task file inside a task directory.
pub const TASK_FILE: &str = "task.toml";
/// The script used when `[policy] script` is absent, if it exists.
pub const DEFAULT_SCRIPT: &str = "script.json";
/// The directory of initial files.
pub const WORKSPACE_DIR: &str = "workspace";
/// Grants when `[tools] grant` is absent: read-only built-ins.
pub const DEFAULT_GRANTS: &[&str] = &["fs.read"];
/// Timeout of a command acceptance check without `timeout`.
pub const DEFAULT_CHECK_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest duration a task file may give (deadlines, timeouts, tick
/// periods): 365 days. Longer is a typo, and near `u64::MAX` seconds adding it
/// to a clock overflows.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);
/// The largest count a task file may give (steps, tool calls, tokens, ticks,
/// retries, the progress window): 2^53 - 1, the largest integer every JSON
/// reader keeps exactly.
pub const MAX_COUNT: u64 = (1 << 53) - 1;
/// The largest `budget.max_cost`: money is counted in millionths in a `u64`,
/// and a trillion keeps every amount exact.
pub const MAX_COST: f64 = 1e12;

/// A loaded, validated task directory.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// The task directory, as given.
    pub dir: PathBuf,
    /// The task id: the directory's name.
    pub task_id: String,
    /// The goal (non-empty).
    pub goal: String,
    /// Budget limits; `max_steps` defaults to [`DEFAULT_MAX_STEPS`].
    pub limits: BudgetLimits,
    /// Tool grants; default [`DEFAULT_GRANTS`].
    pub grants: Grants,
    /// Command tools the task declares (`[[tools.command]]`), in file order.
    /// Registered by [`TaskSpec::registry`], granted only through `grants`.
    pub command_tools: Vec<CommandToolDecl>,
    /// Acceptance checks, in file order.
    pub accept: Vec<AcceptCheck>,
    /// No-progress window; 0 disables the check.
    pub progress_window: usize,
    /// The policy script, resolved against `dir`; `None` when the task names none
    /// and `dir/script.json` does not exist.
    pub script: Option<PathBuf>,
    /// `dir/workspace`, if it exists.
    pub workspace: Option<PathBuf>,
    /// Which calls wait for a human decision (`[tools] approve`, `approval_timeout`).
    pub approval: ApprovalConfig,
    /// When the run steps (`[driver] mode`).
    pub driver: Driver,
    /// Periodic ticks (`[driver] every`).
    pub tick_every: Option<Duration>,
    /// A model policy instead of a script (`[policy] model = "openai:MODEL"` or
    /// `"anthropic:MODEL"`); the CLI's `--policy` overrides it.
    pub model: Option<String>,
    /// The model server (`[policy] base_url`).
    pub base_url: Option<String>,
}

// Raw shapes: serde checks only the keys. Values stay `toml::Value` so that type
// errors are reported by `validate` with the field's full path.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    goal: Option<Value>,
    budget: Option<Value>,
    tools: Option<Value>,
    accept: Option<Value>,
    policy: Option<Value>,
    progress: Option<Value>,
    driver: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    mode: Option<Value>,
    every: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    max_steps: Option<Value>,
    max_tool_calls: Option<Value>,
    max_tokens: Option<Value>,
    max_cost: Option<Value>,
    deadline: Option<Value>,
    max_retries: Option<Value>,
    max_ticks: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTools {
    grant: Option<Value>,
    approve: Option<Value>,
    approval_timeout: Option<Value>,
    command: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccept {
    file: Option<Value>,
    equals: Option<Value>,
    contains: Option<Value>,
    command: Option<Value>,
    timeout: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    script: Option<Value>,
    model: Option<Value>,
    base_url: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProgress {
    window: Option<Value>,
}

impl TaskSpec {
    /// Loads `dir/task.toml`. A missing directory or file is an error naming it.
    pub fn load(dir: &Path) -> Result<TaskSpec, RuntimeError> {
        if !dir.is_dir() {
            return Err(RuntimeError::task(
                dir,
                "task directory does not exist or is not a directory",
            ));
        }
        let file = dir.join(TASK_FILE);
        let text = std::fs::read_to_string(&file)
            .map_err(|e| RuntimeError::task(&file, format!("cannot read task file: {e}")))?;
        TaskSpec::parse(&text, dir)
    }

    /// Parses task.toml text for the task directory `dir` (errors name
    /// `dir/task.toml`). Looks at the file system only to find the default script,
    /// the workspace, and the directory's name when `dir` is `.` or similar.
    pub fn parse(text: &str, dir: &Path) -> Result<TaskSpec, RuntimeError> {
        let file = dir.join(TASK_FILE);
        let table: toml::Table =
            toml::from_str(text).map_err(|e| RuntimeError::task(&file, syntax_error(text, &e)))?;
        // Top-level keys: the file itself is the table, so no prefix.
        let raw: RawTask = Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| RuntimeError::task(&file, e.message().trim()))?;
        validate(raw, dir).map_err(|m| RuntimeError::task(&file, m))
    }

    /// Creates a fresh working directory for one run and copies `workspace/` into it.
    ///
    /// `workdir`, when given, must not exist or be an empty directory. By default a
    /// new directory `runs/<task_id>-<uuid v7>` is made under
    /// `std::env::temp_dir()/agentry`, which must be this user's own (see
    /// [`crate::tempdir`]). Symbolic links (and other special files) in
    /// the workspace are refused before anything is created: copying one would
    /// either follow it out of the task directory or hand the run a link whose
    /// meaning depends on where it happens to live. Returns the canonical path.
    pub fn prepare_workdir(&self, workdir: Option<&Path>) -> Result<PathBuf, RuntimeError> {
        let plan = match &self.workspace {
            Some(ws) => plan_copy(ws)?,
            None => Vec::new(),
        };
        let target = match workdir {
            Some(dir) => {
                ensure_empty_or_absent(dir)?;
                std::fs::create_dir_all(dir).map_err(|e| workdir_err(dir, e))?;
                dir.to_path_buf()
            }
            None => {
                let root = crate::tempdir::private_temp_dir()?.join("runs");
                std::fs::create_dir_all(&root).map_err(|e| workdir_err(&root, e))?;
                let dir = root.join(format!("{}-{}", self.task_id, uuid::Uuid::now_v7()));
                // `create_dir`, not `create_dir_all`: a fresh directory, never a reused one.
                std::fs::create_dir(&dir).map_err(|e| workdir_err(&dir, e))?;
                dir
            }
        };
        let target = std::fs::canonicalize(&target).map_err(|e| workdir_err(&target, e))?;
        if let Some(ws) = &self.workspace {
            for (rel, is_dir) in &plan {
                let to = target.join(rel);
                let done = if *is_dir {
                    std::fs::create_dir(&to)
                } else {
                    std::fs::copy(ws.join(rel), &to).map(|_| ())
                };
                done.map_err(|e| workdir_err(&to, e))?;
            }
        }
        Ok(target)
    }

    /// The built-in tools plus the task's `[[tools.command]]` tools, for
    /// [`Runtime::new`](crate::Runtime::new) (or use
    /// [`Runtime::for_task`](crate::Runtime::for_task)).
    ///
    /// Declared tools are registered, not granted: the task's `[tools] grant`
    /// must name them (`grant = ["fs.*", "ledger.append"]`), else a call gets
    /// `EPERM`. An error names task.toml and the declaration
    /// (`tools.command[1]: ...`); [`TaskSpec::parse`] already checked what it can,
    /// so this fails only for a hand-edited spec.
    pub fn registry(&self) -> Result<ToolRegistry, RuntimeError> {
        let file = self.dir.join(TASK_FILE);
        let mut registry = ToolRegistry::with_builtins()?;
        for (i, decl) in self.command_tools.iter().enumerate() {
            let invalid = |e: &dyn std::fmt::Display| {
                RuntimeError::task(&file, format!("tools.command[{i}]: {e}"))
            };
            let tool = decl.build().map_err(|e| invalid(&e))?;
            registry.register(Arc::new(tool)).map_err(|e| invalid(&e))?;
        }
        Ok(registry)
    }

    /// The run configuration for this task in `workdir` (no trace, fresh run id).
    pub fn run_config(&self, workdir: PathBuf) -> RunConfig {
        let mut config = RunConfig::new(self.goal.clone(), workdir);
        config.task_id = self.task_id.clone();
        config.accept = self.accept.clone();
        config.limits = self.limits;
        config.grants = self.grants.clone();
        config.progress_window = self.progress_window;
        config.approval = self.approval.clone();
        config.driver = self.driver;
        config.tick_every = self.tick_every;
        config
    }
}

fn workdir_err(path: &Path, source: std::io::Error) -> RuntimeError {
    RuntimeError::Workdir {
        path: path.to_path_buf(),
        source,
    }
}

fn ensure_empty_or_absent(dir: &Path) -> Result<(), RuntimeError> {
    let refuse = |why: &str| {
        workdir_err(
            dir,
            std::io::Error::new(std::io::ErrorKind::AlreadyExists, why.to_string()),
        )
    };
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(workdir_err(dir, e)),
        Ok(meta) if !meta.is_dir() => Err(refuse(
            "exists and is not a directory; pass a new or empty directory",
        )),
        Ok(_) => {
            let mut entries = std::fs::read_dir(dir).map_err(|e| workdir_err(dir, e))?;
            if entries.next().is_some() {
                Err(refuse(
                    "exists and is not empty; pass a new or empty directory so every run starts fresh",
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Lists the workspace (relative path, is-directory), parents before children,
/// refusing anything that is neither a regular file nor a directory.
fn plan_copy(ws: &Path) -> Result<Vec<(PathBuf, bool)>, RuntimeError> {
    let mut plan = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let here = ws.join(&rel);
        let read_err =
            |e: std::io::Error| RuntimeError::task(&here, format!("cannot read workspace: {e}"));
        let mut entries = std::fs::read_dir(&here)
            .map_err(read_err)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(read_err)?;
        // Sorted, so the copy (and any error) is the same on every machine.
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| RuntimeError::task(&path, format!("cannot read workspace: {e}")))?;
            let child = rel.join(entry.file_name());
            if kind.is_symlink() {
                return Err(RuntimeError::task(
                    &path,
                    "workspace: symbolic links are not supported; replace it with a regular file or directory",
                ));
            } else if kind.is_dir() {
                plan.push((child.clone(), true));
                pending.push(child);
            } else if kind.is_file() {
                plan.push((child, false));
            } else {
                return Err(RuntimeError::task(
                    &path,
                    "workspace: only regular files and directories can be copied",
                ));
            }
        }
    }
    Ok(plan)
}

fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!(
                "not valid TOML at line {line}, column {column}: {}",
                e.message().trim()
            )
        }
        None => format!("not valid TOML: {}", e.message().trim()),
    }
}

/// Checks a table's keys. `path` names the table in the error.
fn section<T: DeserializeOwned>(path: &str, v: Value) -> Result<T, String> {
    if !v.is_table() {
        return Err(format!("{path}: expected a table, found {}", describe(&v)));
    }
    v.try_into()
        .map_err(|e: toml::de::Error| format!("{path}: {}", e.message().trim()))
}

fn validate(raw: RawTask, dir: &Path) -> Result<TaskSpec, String> {
    let goal = match raw.goal {
        None => return Err("goal: missing; say what the task is, e.g. goal = \"...\"".into()),
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        Some(v) => {
            return Err(format!(
                "goal: expected a non-empty string, found {}",
                describe(&v)
            ));
        }
    };
    let limits = match raw.budget {
        Some(v) => budget(section("budget", v)?)?,
        None => BudgetLimits::default(),
    };
    let limits = BudgetLimits {
        max_steps: limits.max_steps.or(Some(DEFAULT_MAX_STEPS)),
        ..limits
    };
    let mut approval = ApprovalConfig::default();
    let (grants, command_tools) = match raw.tools {
        Some(v) => {
            let tools = section::<RawTools>("tools", v)?;
            if let Some(approve) = tools.approve {
                approval.require = Grants::new(patterns("tools.approve", approve)?);
            }
            if let Some(t) = tools.approval_timeout {
                approval.timeout = Some(duration("tools.approval_timeout", &t)?);
            }
            let declared = match tools.command {
                Some(v) => command::command_tools(v)?,
                None => Vec::new(),
            };
            (grants(tools.grant)?, declared)
        }
        None => (Grants::new(DEFAULT_GRANTS.iter().copied()), Vec::new()),
    };
    let (driver, tick_every) = match raw.driver {
        None => (Driver::Pull, None),
        Some(v) => {
            let d = section::<RawDriver>("driver", v)?;
            let every = d.every.map(|e| duration("driver.every", &e)).transpose()?;
            let mode = match d.mode {
                None if every.is_some() => Driver::Events,
                None => Driver::Pull,
                Some(Value::String(m)) if m == "pull" => Driver::Pull,
                Some(Value::String(m)) if m == "events" => Driver::Events,
                Some(other) => {
                    return Err(format!(
                        "driver.mode: expected \"pull\" or \"events\", found {}",
                        describe(&other)
                    ));
                }
            };
            if every.is_some() && mode == Driver::Pull {
                return Err("driver.every: ticks need mode = \"events\" (a time-driven agent sleeps between ticks)".to_string());
            }
            if every.is_some_and(|e| e.is_zero()) {
                return Err("driver.every: must be longer than zero".to_string());
            }
            (mode, every)
        }
    };
    let accept = match raw.accept {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let at = format!("accept[{i}]");
                accept(&at, section(&at, v)?)
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(format!(
                "accept: expected an array of tables ([[accept]]), found {}",
                describe(&v)
            ));
        }
    };
    let (mut model, mut base_url) = (None, None);
    let script = match raw.policy {
        Some(v) => {
            let policy = section::<RawPolicy>("policy", v)?;
            model = policy
                .model
                .map(|m| model_spec("policy.model", &m))
                .transpose()?;
            base_url = match policy.base_url {
                None => None,
                Some(Value::String(u)) if u.starts_with("http://") || u.starts_with("https://") => {
                    Some(u)
                }
                Some(other) => {
                    return Err(format!(
                        "policy.base_url: expected an http:// URL, found {}",
                        describe(&other)
                    ));
                }
            };
            if base_url.is_some() && model.is_none() {
                return Err("policy.base_url: applies only with policy.model".to_string());
            }
            match policy.script {
                Some(s) => Some(dir.join(relative_path("policy.script", &s)?)),
                None => None,
            }
        }
        None => None,
    }
    .or_else(|| Some(dir.join(DEFAULT_SCRIPT)).filter(|p| p.is_file()));
    let progress_window = match raw.progress {
        Some(v) => match section::<RawProgress>("progress", v)?.window {
            Some(w) => match usize::try_from(non_negative("progress.window", &w)?) {
                // A window of one would call every step "no progress".
                Ok(1) => {
                    return Err(
                        "progress.window: must be 0 (off) or at least 2, found 1".to_string()
                    );
                }
                Ok(w) => w,
                Err(_) => return Err("progress.window: too large".to_string()),
            },
            None => DEFAULT_PROGRESS_WINDOW,
        },
        None => DEFAULT_PROGRESS_WINDOW,
    };
    let workspace = Some(dir.join(WORKSPACE_DIR)).filter(|p| p.is_dir());
    Ok(TaskSpec {
        dir: dir.to_path_buf(),
        task_id: task_id(dir),
        goal,
        limits,
        grants,
        command_tools,
        accept,
        progress_window,
        script,
        workspace,
        approval,
        driver,
        tick_every,
        model,
        base_url,
    })
}

fn budget(raw: RawBudget) -> Result<BudgetLimits, String> {
    let opt = |name: &str, v: Option<Value>| {
        v.map(|v| positive(&format!("budget.{name}"), &v))
            .transpose()
    };
    Ok(BudgetLimits {
        max_steps: opt("max_steps", raw.max_steps)?,
        max_tool_calls: opt("max_tool_calls", raw.max_tool_calls)?,
        max_tokens: opt("max_tokens", raw.max_tokens)?,
        max_cost_micros: raw
            .max_cost
            .map(|v| money("budget.max_cost", &v))
            .transpose()?,
        deadline_ms: raw
            .deadline
            .map(|v| duration("budget.deadline", &v).map(millis))
            .transpose()?,
        max_ticks: opt("max_ticks", raw.max_ticks)?,
        max_retries: raw
            .max_retries
            .map(|v| non_negative("budget.max_retries", &v))
            .transpose()?,
    })
}

fn grants(grant: Option<Value>) -> Result<Grants, String> {
    let Some(grant) = grant else {
        return Ok(Grants::new(DEFAULT_GRANTS.iter().copied()));
    };
    Ok(Grants::new(patterns("tools.grant", grant)?))
}

/// A list of tool patterns (names, scopes, `prefix.*`, `*`), as in `tools.grant`.
/// `provider:model` with a provider agentry speaks.
fn model_spec(at: &str, v: &Value) -> Result<String, String> {
    match v {
        Value::String(s)
            if s.split_once(':').is_some_and(|(p, m)| {
                (p == "openai" || p == "anthropic") && !m.trim().is_empty()
            }) =>
        {
            Ok(s.clone())
        }
        other => Err(format!(
            "{at}: expected \"openai:MODEL\" or \"anthropic:MODEL\", found {}",
            describe(other)
        )),
    }
}

fn patterns(field: &str, value: Value) -> Result<Vec<String>, String> {
    let Value::Array(items) = value else {
        return Err(format!(
            "{field}: expected an array of strings, found {}",
            describe(&value)
        ));
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let Value::String(p) = item else {
            return Err(format!("{at}: expected a string, found {}", describe(item)));
        };
        // Mirrors `registry::pattern_matches`: a pattern that can never match is a
        // typo, and a silent one would surface only as EPERM mid-run.
        let star = p.find('*');
        let valid = !p.is_empty()
            && !p.chars().any(char::is_whitespace)
            && (star.is_none() || p == "*" || (p.ends_with(".*") && star == Some(p.len() - 1)));
        if !valid {
            return Err(format!(
                "{at}: {p:?} is not a grant pattern; use a tool name, an auth scope, \"prefix.*\" or \"*\""
            ));
        }
        out.push(p.clone());
    }
    Ok(out)
}

fn accept(at: &str, raw: RawAccept) -> Result<AcceptCheck, String> {
    let text = |field: &str, v: Option<Value>| match v {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(format!(
            "{at}.{field}: expected a string, found {}",
            describe(&v)
        )),
    };
    match (raw.file, raw.command) {
        (Some(file), None) => {
            if raw.timeout.is_some() {
                return Err(format!("{at}.timeout: only command checks take a timeout"));
            }
            let file = relative_path(&format!("{at}.file"), &file)?;
            let equals = text("equals", raw.equals)?;
            let contains = text("contains", raw.contains)?;
            if contains.as_deref() == Some("") {
                return Err(format!("{at}.contains: must not be empty"));
            }
            if equals.is_none() && contains.is_none() {
                return Err(format!(
                    "{at}: a file check needs `equals` or `contains` (or both)"
                ));
            }
            Ok(AcceptCheck::File {
                file,
                equals,
                contains,
            })
        }
        (None, Some(command)) => {
            for (field, v) in [("equals", &raw.equals), ("contains", &raw.contains)] {
                if v.is_some() {
                    return Err(format!("{at}.{field}: only file checks compare content"));
                }
            }
            let argv = match command {
                Value::String(s) if !s.trim().is_empty() => {
                    vec!["sh".to_string(), "-c".to_string(), s]
                }
                Value::Array(items) if !items.is_empty() => items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::String(s) if !s.is_empty() => Ok(s.clone()),
                        v => Err(format!(
                            "{at}.command[{i}]: expected a non-empty string, found {}",
                            describe(v)
                        )),
                    })
                    .collect::<Result<_, _>>()?,
                v => {
                    return Err(format!(
                        "{at}.command: expected a non-empty string (run with sh -c) or a non-empty array of strings (argv), found {}",
                        describe(&v)
                    ));
                }
            };
            let timeout = match raw.timeout {
                Some(v) => duration(&format!("{at}.timeout"), &v)?,
                None => DEFAULT_CHECK_TIMEOUT,
            };
            Ok(AcceptCheck::Command {
                argv,
                timeout_ms: millis(timeout),
            })
        }
        (Some(_), Some(_)) => Err(format!(
            "{at}: has both `file` and `command`; use one [[accept]] table for each"
        )),
        (None, None) => Err(format!("{at}: expected `file` or `command`")),
    }
}

fn positive(at: &str, v: &Value) -> Result<u64, String> {
    match v {
        Value::Integer(n) if *n > 0 => bounded_count(at, *n),
        v => Err(format!(
            "{at}: expected a positive integer, found {}",
            describe(v)
        )),
    }
}

fn non_negative(at: &str, v: &Value) -> Result<u64, String> {
    match v {
        Value::Integer(n) if *n >= 0 => bounded_count(at, *n),
        v => Err(format!(
            "{at}: expected a non-negative integer (0 disables), found {}",
            describe(v)
        )),
    }
}

/// A non-negative TOML integer, at most [`MAX_COUNT`].
fn bounded_count(at: &str, n: i64) -> Result<u64, String> {
    match u64::try_from(n) {
        Ok(n) if n <= MAX_COUNT => Ok(n),
        _ => Err(format!("{at}: at most {MAX_COUNT}, found {n}")),
    }
}

/// Money as a positive number, at most [`MAX_COST`], stored in micro-units.
fn money(at: &str, v: &Value) -> Result<u64, String> {
    let amount = match v {
        Value::Float(f) => *f,
        Value::Integer(n) => *n as f64,
        v => {
            return Err(format!(
                "{at}: expected a positive number, found {}",
                describe(v)
            ));
        }
    };
    if amount.is_nan() || amount <= 0.0 || amount.is_infinite() {
        return Err(format!(
            "{at}: expected a positive number, found {}",
            describe(v)
        ));
    }
    if amount > MAX_COST {
        return Err(format!(
            "{at}: at most {MAX_COST:.0} (money is counted in millionths), found {}",
            describe(v)
        ));
    }
    let micros = (amount * 1_000_000.0).round();
    if micros < 1.0 {
        return Err(format!(
            "{at}: at least 0.000001 (money is counted in millionths), found {}",
            describe(v)
        ));
    }
    // In range: at most 1e18, below u64::MAX.
    Ok(micros as u64)
}

fn duration(at: &str, v: &Value) -> Result<Duration, String> {
    let Value::String(s) = v else {
        return Err(format!(
            "{at}: expected a duration string such as \"30s\", \"500ms\" or \"2m\", found {}",
            describe(v)
        ));
    };
    match humantime::parse_duration(s) {
        Ok(d) if d > MAX_DURATION => Err(format!("{at}: at most 365 days (\"365d\"), found {s:?}")),
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) => Err(format!("{at}: must be longer than zero, found {s:?}")),
        Err(e) => Err(format!(
            "{at}: expected a duration such as \"30s\", \"500ms\" or \"2m\", found {s:?} ({e})"
        )),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A non-empty relative path with no `..`: it must stay inside its base directory.
fn relative_path(at: &str, v: &Value) -> Result<String, String> {
    let Value::String(s) = v else {
        return Err(format!(
            "{at}: expected a relative path, found {}",
            describe(v)
        ));
    };
    let inside = !s.is_empty()
        && Path::new(s)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if inside {
        Ok(s.clone())
    } else {
        Err(format!(
            "{at}: expected a relative path without \"..\", found {s:?}"
        ))
    }
}

fn task_id(dir: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(dir)
        .or_else(|| std::fs::canonicalize(dir).ok().and_then(|p| name(&p)))
        .unwrap_or_else(|| "task".to_string())
}

/// A value as it is written in TOML, short, for "found ..." in errors.
fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Integer(n) => n.to_string(),
        // Debug, not Display: Display writes 1.8446744073709552e19 as
        // "18446744073709552000", an integer the user never wrote.
        Value::Float(f) => format!("{f:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => format!("the date-time {d}"),
        Value::Array(_) => "an array".to_string(),
        Value::Table(_) => "a table".to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
goal = "Read numbers.txt, sum the numbers, write the sum to sum.txt"
[budget]
max_steps = 8
max_tool_calls = 6
max_tokens = 100000
max_cost = 0.5
deadline = "30s"
[tools]
grant = ["fs.read", "fs.write", "net.*"]
[[accept]]
file = "sum.txt"
equals = "23"
[[accept]]
command = "test -s sum.txt"
timeout = "10s"
[[accept]]
command = ["test", "-f", "sum.txt"]
[policy]
script = "plan.json"
[progress]
window = 4
"#;

    fn parse_err(text: &str) -> String {
        match TaskSpec::parse(text, Path::new("/nowhere/t1")) {
            Err(RuntimeError::InvalidTask { file, message }) => {
                assert_eq!(file, Path::new("/nowhere/t1/task.toml"));
                message
            }
            other => panic!("expected InvalidTask, got {other:?}"),
        }
    }

    #[test]
    fn a_good_file_parses() {
        let spec = TaskSpec::parse(GOOD, Path::new("/nowhere/t1")).unwrap();
        assert_eq!(
            spec,
            TaskSpec {
                dir: PathBuf::from("/nowhere/t1"),
                task_id: "t1".into(),
                goal: "Read numbers.txt, sum the numbers, write the sum to sum.txt".into(),
                limits: BudgetLimits {
                    max_retries: None,
                    max_ticks: None,
                    max_steps: Some(8),
                    max_tool_calls: Some(6),
                    max_tokens: Some(100_000),
                    max_cost_micros: Some(500_000),
                    deadline_ms: Some(30_000),
                },
                grants: Grants::new(["fs.read", "fs.write", "net.*"]),
                command_tools: Vec::new(),
                accept: vec![
                    AcceptCheck::File {
                        file: "sum.txt".into(),
                        equals: Some("23".into()),
                        contains: None,
                    },
                    AcceptCheck::Command {
                        argv: vec!["sh".into(), "-c".into(), "test -s sum.txt".into()],
                        timeout_ms: 10_000,
                    },
                    AcceptCheck::Command {
                        argv: vec!["test".into(), "-f".into(), "sum.txt".into()],
                        timeout_ms: 30_000,
                    },
                ],
                progress_window: 4,
                script: Some(PathBuf::from("/nowhere/t1/plan.json")),
                workspace: None,
                approval: ApprovalConfig::default(),
                driver: Driver::Pull,
                tick_every: None,
                model: None,
                base_url: None,
            }
        );
    }

    #[test]
    fn a_model_policy_parses_and_bad_ones_name_the_field() {
        let text = "goal = \"g\"\n[policy]\nmodel = \"openai:qwen2.5\"\nbase_url = \"http://127.0.0.1:8080/v1\"";
        let spec = TaskSpec::parse(text, Path::new("/nowhere/m")).unwrap();
        assert_eq!(spec.model.as_deref(), Some("openai:qwen2.5"));
        assert_eq!(spec.base_url.as_deref(), Some("http://127.0.0.1:8080/v1"));
        for (text, field) in [
            ("goal = \"g\"\n[policy]\nmodel = \"gpt\"", "policy.model"),
            (
                "goal = \"g\"\n[policy]\nbase_url = \"http://x\"",
                "policy.base_url",
            ),
            (
                "goal = \"g\"\n[policy]\nmodel = \"openai:m\"\nbase_url = 3",
                "policy.base_url",
            ),
        ] {
            let err = TaskSpec::parse(text, Path::new("/nowhere/m"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }

    #[test]
    fn approvals_and_drivers_parse() {
        let text = r#"
goal = "watch the queue"
[budget]
max_ticks = 10
[tools]
grant = ["payments.*"]
approve = ["payments.refund"]
approval_timeout = "2m"
[driver]
every = "5s"
"#;
        let spec = TaskSpec::parse(text, Path::new("/nowhere/t3")).unwrap();
        assert_eq!(spec.approval.require, Grants::new(["payments.refund"]));
        assert_eq!(spec.approval.timeout, Some(Duration::from_secs(120)));
        assert_eq!(
            spec.driver,
            Driver::Events,
            "ticks imply an event-driven agent"
        );
        assert_eq!(spec.tick_every, Some(Duration::from_secs(5)));
        assert_eq!(spec.limits.max_ticks, Some(10));
        let config = spec.run_config(PathBuf::from("/tmp"));
        assert_eq!(config.tick_every, Some(Duration::from_secs(5)));

        for (text, field) in [
            ("goal = \"g\"\n[driver]\nmode = \"push\"", "driver.mode"),
            (
                "goal = \"g\"\n[driver]\nmode = \"pull\"\nevery = \"1s\"",
                "driver.every",
            ),
            ("goal = \"g\"\n[tools]\napprove = \"x\"", "tools.approve"),
            (
                "goal = \"g\"\n[tools]\napproval_timeout = 5",
                "tools.approval_timeout",
            ),
        ] {
            let err = TaskSpec::parse(text, Path::new("/nowhere/t4"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }

    #[test]
    fn defaults_apply_when_tables_are_absent() {
        let spec = TaskSpec::parse("goal = \"g\"", Path::new("/nowhere/t2")).unwrap();
        assert_eq!(
            spec.limits,
            BudgetLimits {
                max_steps: Some(DEFAULT_MAX_STEPS),
                ..BudgetLimits::default()
            }
        );
        assert_eq!(spec.grants, Grants::new(["fs.read"]));
        assert_eq!(spec.progress_window, DEFAULT_PROGRESS_WINDOW);
        assert_eq!(spec.accept, Vec::new());
        assert_eq!(spec.script, None);
        let spec = TaskSpec::parse("goal = \"g\"\n[tools]\n", Path::new("/nowhere/t2")).unwrap();
        assert_eq!(spec.grants, Grants::new(["fs.read"]));
    }

    #[test]
    fn bad_input_names_the_field() {
        let cases = [
            ("", "goal: missing"),
            ("goal = \"  \"", "goal: expected a non-empty string"),
            (
                "goal = \"g\"\n[budget]\nmax_steps = \"ten\"",
                "budget.max_steps: expected a positive integer, found \"ten\"",
            ),
            (
                "goal = \"g\"\n[budget]\nmax_tool_calls = 0",
                "budget.max_tool_calls: expected a positive integer, found 0",
            ),
            (
                "goal = \"g\"\n[budget]\nmax_cost = -1.0",
                "budget.max_cost: expected a positive number",
            ),
            (
                "goal = \"g\"\n[budget]\ndeadline = \"soon\"",
                "budget.deadline: expected a duration",
            ),
            (
                "goal = \"g\"\n[budget]\ndeadline = 30",
                "budget.deadline: expected a duration string",
            ),
            (
                "goal = \"g\"\n[budget]\nmax_step = 3",
                "budget: unknown field `max_step`",
            ),
            (
                "goal = \"g\"\nbudget = 3",
                "budget: expected a table, found 3",
            ),
            (
                "goal = \"g\"\n[budgte]",
                "unknown field `budgte`, expected one of",
            ),
            (
                "goal = \"g\"\n[tools]\ngrant = \"fs.read\"",
                "tools.grant: expected an array of strings",
            ),
            (
                "goal = \"g\"\n[tools]\ngrant = [\"f*\"]",
                "tools.grant[0]: \"f*\" is not a grant pattern",
            ),
            (
                "goal = \"g\"\n[[accept]]\nfile = \"a\"",
                "accept[0]: a file check needs `equals` or `contains`",
            ),
            (
                "goal = \"g\"\n[[accept]]\nfile = \"a\"\nequals = \"1\"\n[[accept]]\nfile = \"/etc/passwd\"\nequals = \"x\"",
                "accept[1].file: expected a relative path",
            ),
            (
                "goal = \"g\"\n[[accept]]\ncommand = []",
                "accept[0].command: expected a non-empty string",
            ),
            (
                "goal = \"g\"\n[[accept]]\ncommand = \"true\"\ntimeout = \"x\"",
                "accept[0].timeout: expected a duration",
            ),
            (
                "goal = \"g\"\n[[accept]]\nfile = \"a\"\ncommand = \"true\"",
                "accept[0]: has both `file` and `command`",
            ),
            (
                "goal = \"g\"\n[[accept]]\nequals = \"1\"",
                "accept[0]: expected `file` or `command`",
            ),
            (
                "goal = \"g\"\n[[accept]]\nfile = \"a\"\nequal = \"1\"",
                "accept[0]: unknown field `equal`",
            ),
            (
                "goal = \"g\"\n[policy]\nscript = 3",
                "policy.script: expected a relative path, found 3",
            ),
            (
                "goal = \"g\"\n[progress]\nwindow = -1",
                "progress.window: expected a non-negative integer",
            ),
            ("goal = \"g\"\n[budget\n", "not valid TOML at line 2"),
        ];
        for (text, want) in cases {
            let message = parse_err(text);
            assert!(
                message.contains(want),
                "{text:?}: got {message:?}, want {want:?}"
            );
        }
    }

    #[test]
    fn load_reports_a_missing_directory_and_file() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope");
        let err = TaskSpec::load(&missing).unwrap_err();
        assert!(
            matches!(&err, RuntimeError::InvalidTask { file, .. } if file == &missing),
            "{err}"
        );
        let err = TaskSpec::load(tmp.path()).unwrap_err();
        assert!(
            matches!(&err, RuntimeError::InvalidTask { file, .. } if file == &tmp.path().join("task.toml")),
            "{err}"
        );
    }

    fn task_dir() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("task.toml"), "goal = \"sum\"").unwrap();
        std::fs::write(tmp.path().join("script.json"), "{\"turns\":[]}").unwrap();
        let ws = tmp.path().join("workspace");
        std::fs::create_dir_all(ws.join("sub/deeper")).unwrap();
        std::fs::write(ws.join("numbers.txt"), "3\n5\n7\n8\n").unwrap();
        std::fs::write(ws.join("sub/deeper/note.txt"), "hi").unwrap();
        tmp
    }

    #[test]
    fn defaults_find_script_and_workspace() {
        let tmp = task_dir();
        let spec = TaskSpec::load(tmp.path()).unwrap();
        assert_eq!(spec.script, Some(tmp.path().join("script.json")));
        assert_eq!(spec.workspace, Some(tmp.path().join("workspace")));
        let config = spec.run_config(PathBuf::from("/w"));
        assert_eq!(config.task_id, spec.task_id);
        assert_eq!(config.workdir, PathBuf::from("/w"));
        assert_eq!(config.limits, spec.limits);
    }

    #[test]
    fn workdir_is_a_fresh_copy_per_call() {
        let tmp = task_dir();
        let spec = TaskSpec::load(tmp.path()).unwrap();
        let a = spec.prepare_workdir(None).unwrap();
        let b = spec.prepare_workdir(None).unwrap();
        assert_ne!(a, b);
        for w in [&a, &b] {
            assert!(w.starts_with(std::fs::canonicalize(std::env::temp_dir()).unwrap()));
            assert_eq!(
                std::fs::read_to_string(w.join("numbers.txt")).unwrap(),
                "3\n5\n7\n8\n"
            );
            assert_eq!(
                std::fs::read_to_string(w.join("sub/deeper/note.txt")).unwrap(),
                "hi"
            );
        }
        std::fs::write(a.join("numbers.txt"), "changed").unwrap();
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("workspace/numbers.txt")).unwrap(),
            "3\n5\n7\n8\n"
        );
        std::fs::remove_dir_all(a).unwrap();
        std::fs::remove_dir_all(b).unwrap();
    }

    #[test]
    fn a_given_workdir_must_be_new_or_empty() {
        let tmp = task_dir();
        let spec = TaskSpec::load(tmp.path()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let fresh = out.path().join("new/run");
        let got = spec.prepare_workdir(Some(&fresh)).unwrap();
        assert_eq!(got, std::fs::canonicalize(&fresh).unwrap());
        assert!(fresh.join("numbers.txt").is_file());
        let err = spec.prepare_workdir(Some(&fresh)).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        let empty = out.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        spec.prepare_workdir(Some(&empty)).unwrap();
        let file = out.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let err = spec.prepare_workdir(Some(&file)).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_in_the_workspace_are_refused() {
        let tmp = task_dir();
        std::os::unix::fs::symlink("/etc/passwd", tmp.path().join("workspace/sub/link")).unwrap();
        let spec = TaskSpec::load(tmp.path()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let target = out.path().join("run");
        let err = spec.prepare_workdir(Some(&target)).unwrap_err();
        assert!(
            matches!(&err, RuntimeError::InvalidTask { file, message }
                if file.ends_with("workspace/sub/link") && message.contains("symbolic links")),
            "{err}"
        );
        // Refused before anything was created.
        assert!(!target.exists());
    }
}
