//! `agentry tools TASK_DIR`: every tool a run of the task has — built-ins,
//! the task's command tools, its MCP servers' tools — with the contract facts
//! a reviewer checks (effect, idempotency, approval) and whether the task
//! grants it (only granted tools are shown to the model). It starts the MCP
//! servers to list them, in a scratch working directory removed afterwards,
//! so it is also the quickest check of a `[[tools.mcp]]` block.

use std::io::Write;
use std::path::Path;

use agentry::TaskSpec;
use agentry::protocol::terminal::escape_line;
use agentry::protocol::tool::{Effect, Idempotency, ToolContract};
use agentry::sandbox::{Mode, Network, SandboxSummary};
use serde::Serialize;

use crate::error::RunError;
use crate::run::FreshWorkdir;

/// One tool as `agentry tools` prints it (`--json`: an array of these).
#[derive(Debug, Serialize)]
pub(crate) struct ToolRow {
    name: String,
    /// `built-in`, `command` or `mcp:<server>`.
    source: String,
    effect: Effect,
    idempotency: Idempotency,
    /// Whether a call waits for a human's approval.
    approval: bool,
    /// Whether the task grants it (the model sees only granted tools).
    granted: bool,
    /// The kernel sandbox its processes run under (mode, network, limits);
    /// `null` for a tool that starts no process.
    sandbox: Option<SandboxSummary>,
    description: String,
}

/// Loads the task, starts its MCP servers (stopped again before this
/// returns) and describes every registered tool.
pub(crate) async fn list(task_dir: &Path) -> Result<Vec<ToolRow>, RunError> {
    let mut task = TaskSpec::load(task_dir)?;
    task.read_a2a_cards().await;
    let scratch = FreshWorkdir::prepare(&task, None)?;
    let host = crate::store::sandbox_host(None);
    let sandboxes = task.sandboxes(&scratch.path, &host)?;
    let mcp = task.start_mcp(&scratch.path, &sandboxes).await?;
    let registry = task.registry_with(&mcp);
    mcp.shutdown().await;
    drop(scratch);
    let registry = registry?;
    Ok(registry
        .specs()
        .iter()
        .filter_map(|spec| registry.get(&spec.name))
        .map(|tool| {
            let sandbox = tool.tool.sandbox().map(|over| sandboxes.summary(&over));
            row(&task, &tool.contract, sandbox)
        })
        .collect())
}

/// Prints the rows: a table, or with `json` one JSON array.
pub(crate) fn print(rows: &[ToolRow], json: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, rows)?;
        writeln!(out)
    } else {
        writeln!(out, "{}", table(rows))
    }
}

fn row(task: &TaskSpec, contract: &ToolContract, sandbox: Option<SandboxSummary>) -> ToolRow {
    ToolRow {
        sandbox,
        name: contract.name.clone(),
        source: source(task, &contract.name),
        effect: contract.effect,
        idempotency: contract.idempotency,
        approval: task.approval.required_for(contract),
        granted: task.grants.allows(contract),
        description: contract.description.clone(),
    }
}

fn source(task: &TaskSpec, name: &str) -> String {
    if task.command_tools.iter().any(|d| d.contract.name == name) {
        return "command".into();
    }
    if let Some(agent) = task
        .a2a_agents
        .iter()
        .find(|a| name == format!("{}.ask", a.name))
    {
        return format!("a2a:{}", agent.name);
    }
    match task.mcp_servers.iter().find(|s| {
        name.strip_prefix(&s.name)
            .is_some_and(|rest| rest.starts_with('.'))
    }) {
        Some(server) => format!("mcp:{}", server.name),
        None => "built-in".into(),
    }
}

/// Aligned columns, one tool per line, the description last. Names and
/// descriptions come from MCP servers too: their control characters are
/// escaped (the JSON has them exactly).
fn table(rows: &[ToolRow]) -> String {
    let shown: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                escape_line(&r.name).into_owned(),
                escape_line(&r.source).into_owned(),
            )
        })
        .collect();
    let width = |cells: &mut dyn Iterator<Item = &String>, least: usize| {
        cells
            .map(|c| c.chars().count())
            .max()
            .unwrap_or(least)
            .max(least)
    };
    let name_w = width(&mut shown.iter().map(|(n, _)| n), 4);
    let source_w = width(&mut shown.iter().map(|(_, s)| s), 6);
    let sandboxes: Vec<String> = rows
        .iter()
        .map(|r| sandbox_cell(r.sandbox.as_ref()))
        .collect();
    let sandbox_w = width(&mut sandboxes.iter(), 7);
    let mut out = format!(
        "{:name_w$}  {:source_w$}  {:21}  {:12}  {:8}  {:7}  {:sandbox_w$}  DESCRIPTION",
        "TOOL", "SOURCE", "EFFECT", "IDEMPOTENCY", "APPROVAL", "GRANTED", "SANDBOX"
    );
    for ((r, (name, source)), sandbox) in rows.iter().zip(&shown).zip(&sandboxes) {
        let first_line = short(&r.description);
        out.push_str(&format!(
            "\n{name:name_w$}  {source:source_w$}  {:21}  {:12}  {:8}  {:7}  {sandbox:sandbox_w$}  {first_line}",
            r.effect.as_str(),
            r.idempotency.as_str(),
            yes_no(r.approval),
            yes_no(r.granted),
        ));
    }
    out
}

/// The sandbox column: `-` for a tool that starts no process; the mode and
/// network; and `mode = "off"` said loudly (the `--json` rows have the limits).
fn sandbox_cell(sandbox: Option<&SandboxSummary>) -> String {
    let Some(summary) = sandbox else {
        return "-".to_string();
    };
    let network = match &summary.network {
        Network::Off => "no network".to_string(),
        Network::On => "network".to_string(),
        Network::Allow(grants) => format!(
            "ports {}",
            grants
                .iter()
                .map(|g| g.port.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    match summary.mode {
        Mode::Off => "OFF (no sandbox: full reach)".to_string(),
        Mode::WorkspaceWrite | Mode::ReadOnly => format!("{}, {network}", summary.mode.as_str()),
    }
}

/// The description's first line, escaped, cut to [`DESCRIPTION_CHARS`] (the
/// JSON has it whole).
fn short(description: &str) -> String {
    let line = escape_line(description.lines().next().unwrap_or(""));
    if line.chars().count() <= DESCRIPTION_CHARS {
        return line.into_owned();
    }
    let cut: String = line.chars().take(DESCRIPTION_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

/// How much of a description the table shows.
const DESCRIPTION_CHARS: usize = 60;

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
