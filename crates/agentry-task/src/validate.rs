//! The second phase of parsing: every value of every table, by hand, so an
//! error names the field, what was expected and what was found. One function
//! per table, called in file-documentation order; the first error wins.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentry_protocol::accept::AcceptCheck;
use agentry_protocol::budget::BudgetLimits;
use agentry_runtime::config::{DEFAULT_MAX_DENIED, DEFAULT_MAX_STEPS, DEFAULT_PROGRESS_WINDOW};
use agentry_runtime::{ApprovalConfig, ChildShare, Driver, Grants, ParentReserve, TreeLimits};
use toml::Value;

use crate::accept::accept;
use crate::command::{CommandToolDecl, command_tools};
use crate::mcp::{apply_approvals, mcp_servers};
use crate::observe::observe_tables;
use crate::raw::{
    RawBudget, RawChildModel, RawDriver, RawFallback, RawPolicy, RawProgress, RawReserve, RawTask,
    RawTools, RawTree,
};
use crate::spec::{ChildModelSpec, Compaction, FallbackSpec, TaskSpec};
use crate::values::{
    FieldError, ca_file, describe, duration, field_error, millis, money, non_negative, patterns,
    positive, relative_path, section, task_id,
};
use crate::{DEFAULT_GRANTS, DEFAULT_SCRIPT, MAX_RESULT_CAP, MIN_RESULT_CAP, WORKSPACE_DIR};
use agentry_mcp::McpServerConfig;

/// `[tools]`, checked.
struct ToolsTable {
    grants: Grants,
    command_tools: Vec<CommandToolDecl>,
    mcp_servers: Vec<McpServerConfig>,
    a2a_agents: Vec<crate::a2a::A2aAgentConfig>,
    approval: ApprovalConfig,
}

/// `[driver]`, checked.
struct DriverTable {
    driver: Driver,
    tick_every: Option<Duration>,
}

/// `[policy]`, checked; `script` already falls back to `dir/script.json`.
struct PolicyTable {
    script: Option<PathBuf>,
    model: Option<String>,
    base_url: Option<String>,
    fallback: Vec<FallbackSpec>,
    prompt_cache: bool,
    ca_cert: Option<PathBuf>,
    context_tokens: Option<u64>,
    result_cap: Option<usize>,
    compaction: Compaction,
    child_models: BTreeMap<String, ChildModelSpec>,
}

impl TaskSpec {
    /// Checks every value of a task file whose keys serde accepted.
    pub(crate) fn validate(raw: RawTask, dir: &Path) -> Result<TaskSpec, FieldError> {
        let goal = goal(raw.goal)?;
        let artifacts = crate::workdir::artifacts(raw.artifacts)?;
        let limits = budget_table(raw.budget)?;
        let ToolsTable {
            grants,
            command_tools,
            mcp_servers,
            a2a_agents,
            approval,
        } = tools_table(raw.tools, dir)?;
        let DriverTable { driver, tick_every } = driver_table(raw.driver)?;
        let accept = accept_table(raw.accept)?;
        let PolicyTable {
            script,
            model,
            base_url,
            fallback,
            prompt_cache,
            ca_cert,
            context_tokens,
            result_cap,
            compaction,
            child_models,
        } = policy_table(raw.policy, dir)?;
        let ProgressTable {
            window: progress_window,
            max_denied,
        } = progress_table(raw.progress)?;
        let tree = tree_table(raw.tree)?;
        let observe = observe_tables(raw.redact, raw.trace)?;
        let sandbox = crate::sandbox::sandbox_table(raw.sandbox)?;
        let workspace = Some(dir.join(WORKSPACE_DIR)).filter(|p| p.is_dir());
        Ok(TaskSpec {
            dir: dir.to_path_buf(),
            task_id: task_id(dir),
            goal,
            artifacts,
            limits,
            grants,
            command_tools,
            mcp_servers,
            a2a_agents,
            accept,
            progress_window,
            max_denied,
            script,
            workspace,
            approval,
            driver,
            tick_every,
            model,
            base_url,
            tree,
            fallback,
            prompt_cache,
            ca_cert,
            context_tokens,
            result_cap,
            compaction,
            child_models,
            observe,
            sandbox,
        })
    }
}

fn goal(v: Option<Value>) -> Result<String, FieldError> {
    match v {
        None => Err(field_error!(
            "goal: missing; say what the task is, e.g. goal = \"...\""
        )),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s),
        Some(v) => Err(field_error!(
            "goal: expected a non-empty string, found {}",
            describe(&v)
        )),
    }
}

/// `[budget]`; `max_steps` defaults to [`DEFAULT_MAX_STEPS`].
fn budget_table(v: Option<Value>) -> Result<BudgetLimits, FieldError> {
    let limits = match v {
        Some(v) => budget(section("budget", v)?)?,
        None => BudgetLimits::default(),
    };
    Ok(BudgetLimits {
        max_steps: limits.max_steps.or(Some(DEFAULT_MAX_STEPS)),
        ..limits
    })
}

/// A `[budget]` table alone (a service request's, see `json::budget_from_json`).
pub(crate) fn budget_alone(v: Value) -> Result<BudgetLimits, FieldError> {
    budget(section("budget", v)?)
}

fn budget(raw: RawBudget) -> Result<BudgetLimits, FieldError> {
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

/// `[tools]`: grants (default [`DEFAULT_GRANTS`]), approvals, command tools.
fn tools_table(v: Option<Value>, dir: &Path) -> Result<ToolsTable, FieldError> {
    let Some(v) = v else {
        return Ok(ToolsTable {
            grants: Grants::new(DEFAULT_GRANTS.iter().copied()),
            command_tools: Vec::new(),
            mcp_servers: Vec::new(),
            a2a_agents: Vec::new(),
            approval: ApprovalConfig::default(),
        });
    };
    let tools = section::<RawTools>("tools", v)?;
    let mut approval = ApprovalConfig::default();
    if let Some(approve) = tools.approve {
        approval.require = Grants::new(patterns("tools.approve", approve)?);
    }
    if let Some(t) = tools.approval_timeout {
        approval.timeout = Some(duration("tools.approval_timeout", &t)?);
    }
    let command_tools = match tools.command {
        Some(v) => command_tools(v)?,
        None => Vec::new(),
    };
    let mcp_servers = match tools.mcp {
        Some(v) => mcp_servers(v, dir)?,
        None => Vec::new(),
    };
    apply_approvals(&mcp_servers, &mut approval);
    let a2a_agents = match tools.a2a {
        Some(v) => crate::a2a::a2a_agents(v, dir)?,
        None => Vec::new(),
    };
    let grants = match tools.grant {
        Some(grant) => Grants::new(patterns("tools.grant", grant)?),
        None => Grants::new(DEFAULT_GRANTS.iter().copied()),
    };
    Ok(ToolsTable {
        grants,
        command_tools,
        mcp_servers,
        a2a_agents,
        approval,
    })
}

/// `[driver]`: `mode` (`pull` unless ticks are set) and `every` (ticks).
fn driver_table(v: Option<Value>) -> Result<DriverTable, FieldError> {
    let Some(v) = v else {
        return Ok(DriverTable {
            driver: Driver::Pull,
            tick_every: None,
        });
    };
    let d = section::<RawDriver>("driver", v)?;
    let every = d.every.map(|e| duration("driver.every", &e)).transpose()?;
    let driver = match d.mode {
        None if every.is_some() => Driver::Events,
        None => Driver::Pull,
        Some(Value::String(m)) if m == "pull" => Driver::Pull,
        Some(Value::String(m)) if m == "events" => Driver::Events,
        Some(other) => {
            return Err(field_error!(
                "driver.mode: expected \"pull\" or \"events\", found {}",
                describe(&other)
            ));
        }
    };
    if every.is_some() && driver == Driver::Pull {
        return Err(field_error!(
            "driver.every: ticks need mode = \"events\" (a time-driven agent sleeps between ticks)"
        ));
    }
    if every.is_some_and(|e| e.is_zero()) {
        return Err(field_error!("driver.every: must be longer than zero"));
    }
    Ok(DriverTable {
        driver,
        tick_every: every,
    })
}

/// `[[accept]]`, in file order.
fn accept_table(v: Option<Value>) -> Result<Vec<AcceptCheck>, FieldError> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                let at = format!("accept[{i}]");
                accept(&at, section(&at, v)?)
            })
            .collect(),
        Some(v) => Err(field_error!(
            "accept: expected an array of tables ([[accept]]), found {}",
            describe(&v)
        )),
    }
}

/// `[policy]`: a script (resolved against `dir`, default `dir/script.json` if
/// it exists), or a model and its server.
fn policy_table(v: Option<Value>, dir: &Path) -> Result<PolicyTable, FieldError> {
    let default_script = || Some(dir.join(DEFAULT_SCRIPT)).filter(|p| p.is_file());
    let Some(v) = v else {
        return Ok(PolicyTable {
            script: default_script(),
            model: None,
            base_url: None,
            fallback: Vec::new(),
            prompt_cache: true,
            ca_cert: None,
            context_tokens: None,
            result_cap: None,
            compaction: Compaction::Elide,
            child_models: BTreeMap::new(),
        });
    };
    let policy = section::<RawPolicy>("policy", v)?;
    let model = policy
        .model
        .map(|m| model_spec("policy.model", &m))
        .transpose()?;
    let base_url = policy
        .base_url
        .map(|u| server_url("policy.base_url", u))
        .transpose()?;
    if base_url.is_some() && model.is_none() {
        return Err(field_error!(
            "policy.base_url: applies only with policy.model"
        ));
    }
    let fallback = fallback_list(policy.fallback)?;
    if !fallback.is_empty() && model.is_none() {
        return Err(field_error!(
            "policy.fallback: applies only with policy.model"
        ));
    }
    let prompt_cache = match policy.prompt_cache {
        None => true,
        Some(Value::Boolean(b)) => b,
        Some(other) => {
            return Err(field_error!(
                "policy.prompt_cache: expected true or false, found {}",
                describe(&other)
            ));
        }
    };
    let script = match policy.script {
        Some(s) => Some(dir.join(relative_path("policy.script", &s)?)),
        None => default_script(),
    };
    let ca_cert = policy
        .ca_cert
        .map(|c| ca_file("policy.ca_cert", &c, dir))
        .transpose()?;
    let context_tokens = policy
        .context_tokens
        .map(|v| positive("policy.context_tokens", &v))
        .transpose()?;
    let result_cap = policy.result_cap.map(|v| result_cap(&v)).transpose()?;
    let compaction = compaction(policy.compaction)?;
    Ok(PolicyTable {
        script,
        model,
        base_url,
        fallback,
        prompt_cache,
        ca_cert,
        context_tokens,
        result_cap,
        compaction,
        child_models: child_models(policy.models, dir)?,
    })
}

/// `policy.compaction`: `elide` (the default) or `summarize`.
fn compaction(v: Option<Value>) -> Result<Compaction, FieldError> {
    match v {
        None => Ok(Compaction::Elide),
        Some(Value::String(c)) if c == "elide" => Ok(Compaction::Elide),
        Some(Value::String(c)) if c == "summarize" => Ok(Compaction::Summarize),
        Some(other) => Err(field_error!(
            "policy.compaction: expected \"elide\" or \"summarize\", found {}",
            describe(&other)
        )),
    }
}

/// `[policy.models.NAME]`: each a `model` (with an optional `base_url`) or a
/// `script`, never both.
fn child_models(
    v: Option<Value>,
    dir: &Path,
) -> Result<BTreeMap<String, ChildModelSpec>, FieldError> {
    let table = match v {
        None => return Ok(BTreeMap::new()),
        Some(Value::Table(t)) => t,
        Some(other) => {
            return Err(field_error!(
                "policy.models: expected tables [policy.models.NAME], found {}",
                describe(&other)
            ));
        }
    };
    let mut models = BTreeMap::new();
    for (name, entry) in table {
        let at = format!("policy.models.{name}");
        let raw = section::<RawChildModel>(&at, entry)?;
        let spec = match (raw.model, raw.script) {
            (Some(model), None) => ChildModelSpec::Model {
                model: model_spec(&format!("{at}.model"), &model)?,
                base_url: raw
                    .base_url
                    .map(|u| server_url(&format!("{at}.base_url"), u))
                    .transpose()?,
            },
            (None, Some(script)) if raw.base_url.is_none() => {
                ChildModelSpec::Script(dir.join(relative_path(&format!("{at}.script"), &script)?))
            }
            (None, Some(_)) => return Err(field_error!("{at}.base_url: applies only with model")),
            (Some(_), Some(_)) => return Err(field_error!("{at}: give model or script, not both")),
            (None, None) => {
                return Err(field_error!(
                    "{at}: missing model (e.g. model = \"openai:MODEL\") or script (a file)"
                ));
            }
        };
        models.insert(name, spec);
    }
    Ok(models)
}

/// A model server's URL (`http://` or `https://`).
fn server_url(at: &str, v: Value) -> Result<String, FieldError> {
    match v.as_str() {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") => Ok(u.to_string()),
        Some(_) | None => Err(field_error!(
            "{at}: expected an http:// or https:// URL, found {}",
            describe(&v)
        )),
    }
}

/// `[policy] result_cap`: bytes, from [`MIN_RESULT_CAP`] to [`MAX_RESULT_CAP`].
fn result_cap(v: &Value) -> Result<usize, FieldError> {
    let at = "policy.result_cap";
    match usize::try_from(positive(at, v)?) {
        Ok(n) if (MIN_RESULT_CAP..=MAX_RESULT_CAP).contains(&n) => Ok(n),
        _ => Err(field_error!(
            "{at}: expected {MIN_RESULT_CAP} to {MAX_RESULT_CAP} bytes, found {}",
            describe(v)
        )),
    }
}

/// `[policy] fallback`: an array of `"provider:MODEL"` strings or
/// `{ model = "provider:MODEL", base_url = "http://..." }` tables.
fn fallback_list(v: Option<Value>) -> Result<Vec<FallbackSpec>, FieldError> {
    let items = match v {
        None => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(field_error!(
                "policy.fallback: expected an array of \"openai:MODEL\" or \"anthropic:MODEL\" strings or {{ model, base_url }} tables, found {}",
                describe(&other)
            ));
        }
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            let at = format!("policy.fallback[{i}]");
            // A table is { model, base_url }; anything else is the model's name.
            if !item.is_table() {
                let model = model_spec(&at, &item)?;
                return Ok(FallbackSpec {
                    model,
                    base_url: None,
                });
            }
            let raw = section::<RawFallback>(&at, item)?;
            let model = raw.model.ok_or_else(|| {
                field_error!("{at}.model: missing; e.g. model = \"anthropic:MODEL\"")
            })?;
            Ok(FallbackSpec {
                model: model_spec(&format!("{at}.model"), &model)?,
                base_url: raw
                    .base_url
                    .map(|u| server_url(&format!("{at}.base_url"), u))
                    .transpose()?,
            })
        })
        .collect()
}

/// `provider:model` with a provider agentry speaks.
fn model_spec(at: &str, v: &Value) -> Result<String, FieldError> {
    match v.as_str() {
        Some(s)
            if s.split_once(':').is_some_and(|(p, m)| {
                (p == "openai" || p == "anthropic") && !m.trim().is_empty()
            }) =>
        {
            Ok(s.to_string())
        }
        Some(_) | None => Err(field_error!(
            "{at}: expected \"openai:MODEL\" or \"anthropic:MODEL\", found {}",
            describe(v)
        )),
    }
}

/// `[progress]`, checked.
struct ProgressTable {
    window: usize,
    max_denied: usize,
}

/// `[progress] window`: 0 (off) or at least 2; default
/// [`DEFAULT_PROGRESS_WINDOW`]. `max_denied`: 0 (off) or more; default
/// [`DEFAULT_MAX_DENIED`].
fn progress_table(v: Option<Value>) -> Result<ProgressTable, FieldError> {
    let raw = match v {
        Some(v) => section::<RawProgress>("progress", v)?,
        None => RawProgress {
            window: None,
            max_denied: None,
        },
    };
    let window = match raw.window {
        None => DEFAULT_PROGRESS_WINDOW,
        Some(w) => match usize::try_from(non_negative("progress.window", &w)?) {
            // A window of one would call every step "no progress".
            Ok(1) => {
                return Err(field_error!(
                    "progress.window: must be 0 (off) or at least 2, found 1"
                ));
            }
            Ok(w) => w,
            Err(_) => return Err(field_error!("progress.window: too large")),
        },
    };
    let max_denied = match raw.max_denied {
        None => DEFAULT_MAX_DENIED,
        Some(n) => usize::try_from(non_negative("progress.max_denied", &n)?)
            .map_err(|_| field_error!("progress.max_denied: too large"))?,
    };
    Ok(ProgressTable { window, max_denied })
}

/// `[tree]`: the tree's shape limits and how budgets pass down it.
fn tree_table(v: Option<Value>) -> Result<TreeLimits, FieldError> {
    let mut tree = TreeLimits::default();
    let Some(v) = v else { return Ok(tree) };
    let raw = section::<RawTree>("tree", v)?;
    if let Some(d) = raw.max_depth {
        tree.max_depth = u32::try_from(non_negative("tree.max_depth", &d)?)
            .map_err(|_| field_error!("tree.max_depth: too large"))?;
    }
    if let Some(n) = raw.max_children {
        tree.max_children = usize::try_from(positive("tree.max_children", &n)?)
            .map_err(|_| field_error!("tree.max_children: too large"))?;
    }
    if let Some(r) = raw.parent_reserve {
        // A bare count keeps that many steps and tool calls.
        if let Value::Integer(_) = r {
            let n = non_negative("tree.parent_reserve", &r)?;
            tree.parent_reserve = ParentReserve {
                steps: n,
                tool_calls: n,
            };
            return finish_tree(tree, raw.child_share);
        }
        let raw = section::<RawReserve>("tree.parent_reserve", r)?;
        if let Some(s) = raw.steps {
            tree.parent_reserve.steps = non_negative("tree.parent_reserve.steps", &s)?;
        }
        if let Some(c) = raw.tool_calls {
            tree.parent_reserve.tool_calls = non_negative("tree.parent_reserve.tool_calls", &c)?;
        }
    }
    finish_tree(tree, raw.child_share)
}

/// The rest of `[tree]` once `parent_reserve` is read: `child_share`.
fn finish_tree(mut tree: TreeLimits, share: Option<Value>) -> Result<TreeLimits, FieldError> {
    if let Some(s) = share {
        tree.child_share = child_share(&s)?;
    }
    Ok(tree)
}

/// `tree.child_share`: a fraction in (0, 1].
fn child_share(v: &Value) -> Result<ChildShare, FieldError> {
    let Some(share) = v.as_float().or_else(|| v.as_integer().map(|i| i as f64)) else {
        return Err(field_error!(
            "tree.child_share: expected a fraction such as 0.5, found {}",
            describe(v)
        ));
    };
    if !(share > 0.0 && share <= 1.0) {
        return Err(field_error!(
            "tree.child_share: must be more than 0 and at most 1, found {share}"
        ));
    }
    // At least one thousandth: a share that rounds to nothing would starve every child.
    Ok(ChildShare::per_mille(
        ((share * 1000.0).round() as u16).max(1),
    ))
}
