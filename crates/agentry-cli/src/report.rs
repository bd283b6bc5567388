//! The run's report on stdout: a human summary, or exactly one JSON object.
//!
//! The summary shows what the model and the tools wrote (the answer, the
//! stop's detail, a check's output) with their control characters escaped
//! (`agentry::protocol::terminal`): an answer holding `ESC [2J` must not clear
//! the user's terminal. The JSON carries every string exactly.
//!
//! The JSON shape is a public interface of the CLI, so it is spelled out here
//! rather than borrowed from `RunOutcome`'s serialization: a field added to the
//! runtime's outcome does not silently change what scripts parse.

use std::io::Write;

use agentry::protocol::accept::{AcceptCheck, CheckOutcome};
use agentry::protocol::budget::BudgetSnapshot;
use agentry::protocol::terminal::{escape_line, escape_text};
use agentry::{RunOutcome, RunTree};
use serde::Serialize;

/// `--json` output.
#[derive(Debug, Serialize)]
struct JsonReport<'a> {
    run_id: &'a str,
    task_id: &'a str,
    stop_reason: agentry::StopReason,
    detail: &'a str,
    answer: Option<&'a str>,
    steps: u64,
    tool_calls: u64,
    workdir: String,
    trace: Option<String>,
    /// Present only when the trace could not be written completely.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_error: Option<&'a str>,
    checks: &'a [CheckOutcome],
    budget: &'a BudgetSnapshot,
    /// The agent tree, present only when the run started children.
    #[serde(skip_serializing_if = "Option::is_none")]
    tree: Option<&'a RunTree>,
}

/// Prints the outcome to stdout, ending with the run's tree if it has one.
pub(crate) fn print(
    outcome: &RunOutcome,
    tree: Option<&RunTree>,
    json: bool,
) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let report = json_report(outcome, tree);
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", summary(outcome))?;
        if let Some(tree) = tree {
            write!(out, "tree\n{}", escape_text(&tree.render()))?;
        }
    }
    out.flush()
}

/// The `--json` report of an outcome.
fn json_report<'a>(outcome: &'a RunOutcome, tree: Option<&'a RunTree>) -> JsonReport<'a> {
    JsonReport {
        run_id: &outcome.run_id,
        task_id: &outcome.task_id,
        stop_reason: outcome.stop_reason,
        detail: &outcome.detail,
        answer: outcome.answer.as_deref(),
        steps: outcome.steps,
        tool_calls: outcome.tool_calls,
        workdir: outcome.workdir.display().to_string(),
        trace: outcome.trace.as_ref().map(|p| p.display().to_string()),
        trace_error: outcome.trace_error.as_deref(),
        checks: &outcome.checks,
        budget: &outcome.budget,
        tree,
    }
}

/// The `--json` report as a JSON value (`agentry mcp` returns it as a tool's
/// structured result, so both say the same).
pub(crate) fn to_json(outcome: &RunOutcome, tree: Option<&RunTree>) -> serde_json::Value {
    serde_json::to_value(json_report(outcome, tree)).unwrap_or_default()
}

/// `--json` output when nothing could be reported but an error.
#[derive(Debug, Serialize)]
struct ErrorReport<'a> {
    error: &'a str,
    exit_code: u8,
}

/// Prints an error as the one JSON object on stdout (`--json`).
pub(crate) fn print_error(message: &str, exit_code: u8) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer(
        &mut out,
        &ErrorReport {
            error: message,
            exit_code,
        },
    )?;
    writeln!(out)?;
    out.flush()
}

/// `--json` output for a run parked on calls a crash interrupted.
#[derive(Debug, Serialize)]
struct ParkedReport<'a> {
    run_id: &'a str,
    status: agentry::RunStatus,
    store: String,
    pending_decisions: &'a [agentry::protocol::state::PendingApproval],
}

/// Reports a parked run: which calls wait, and the command that settles them.
pub(crate) fn print_parked(parked: &crate::drive::Parked, json: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let store = parked.store.display().to_string();
    if json {
        let report = ParkedReport {
            run_id: &parked.run_id,
            status: agentry::RunStatus::AwaitingDecision,
            store: store.clone(),
            pending_decisions: &parked.pending,
        };
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
        return out.flush();
    }
    writeln!(out, "{:<12} {}", "run", escape_line(&parked.run_id))?;
    writeln!(
        out,
        "{:<12} awaiting_decision: the run was interrupted during these calls, which must not run again unasked",
        "status"
    )?;
    for p in &parked.pending {
        writeln!(
            out,
            "{:<12} {} {} {} (step {})",
            "call",
            escape_line(&p.call.id),
            escape_line(&p.call.name),
            escape_line(
                &p.call
                    .arguments
                    .to_value()
                    .map(|v| v.to_string())
                    .unwrap_or_default()
            ),
            p.step
        )?;
    }
    let ids: Vec<String> = parked
        .pending
        .iter()
        .map(|p| format!("--decide {}=happened|retry|skip", escape_line(&p.call.id)))
        .collect();
    writeln!(
        out,
        "{:<12} agentry resume {} --store {} {}",
        "continue",
        escape_line(&parked.run_id),
        store,
        ids.join(" ")
    )?;
    out.flush()
}

/// The human summary: one `key value` line each, every value escaped (the
/// answer, the detail and the checks' output keep their line breaks).
fn summary(o: &RunOutcome) -> String {
    let mut s = String::new();
    let mut line = |key: &str, value: &str| {
        s.push_str(&format!("{key:<12} {}\n", escape_text(value)));
    };
    line(
        "run",
        &format!(
            "{} (task {})",
            escape_line(&o.run_id),
            escape_line(&o.task_id)
        ),
    );
    line("stop_reason", o.stop_reason.as_str());
    line("detail", &o.detail);
    line("answer", o.answer.as_deref().unwrap_or("(none)"));
    line("steps", &o.steps.to_string());
    line("tool_calls", &o.tool_calls.to_string());
    if let Some(tokens) = tokens_line(&o.budget.spent) {
        line("tokens", &tokens);
    }
    for (i, c) in o.checks.iter().enumerate() {
        let verdict = if c.passed { "pass" } else { "FAIL" };
        let key = if i == 0 { "checks" } else { "" };
        line(key, &format!("{verdict}  {}", check_line(c)));
    }
    line("workdir", &o.workdir.display().to_string());
    line(
        "trace",
        &o.trace
            .as_ref()
            .map_or("(none; pass --trace FILE)".to_string(), |p| {
                p.display().to_string()
            }),
    );
    s
}

/// What the model turns used, when they reported anything: prompt tokens (and
/// how many the provider's cache served), completion tokens, money.
fn tokens_line(spent: &agentry::protocol::budget::Usage) -> Option<String> {
    if spent.tokens() == 0 && spent.cost_micros == 0 {
        return None;
    }
    let mut s = format!("{} in", spent.tokens_in);
    if spent.cache_read_tokens + spent.cache_write_tokens > 0 {
        s.push_str(&format!(
            " ({} read from the prompt cache, {} written to it)",
            spent.cache_read_tokens, spent.cache_write_tokens
        ));
    }
    s.push_str(&format!(", {} out", spent.tokens_out));
    if spent.cost_micros > 0 {
        s.push_str(&format!(", cost {} millionths", spent.cost_micros));
    }
    Some(s)
}

fn check_line(c: &CheckOutcome) -> String {
    match &c.check {
        // A file check's detail already starts with the file name.
        AcceptCheck::File { .. } => c.detail.clone(),
        AcceptCheck::Command { argv, .. } => match argv.as_slice() {
            [sh, flag, script] if sh == "sh" && flag == "-c" => {
                format!("{script:?}: {}", c.detail)
            }
            argv => format!("{argv:?}: {}", c.detail),
        },
    }
}
