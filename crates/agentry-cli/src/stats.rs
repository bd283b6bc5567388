//! `agentry stats`: statistics of finished runs from a store or trace files
//! (`agentry::insight::stats`), as aligned tables or one JSON object.

use agentry::RuntimeError;
use agentry::insight::stats::{Figures, Group, Report, StatsError, StatsOptions};
use agentry::protocol::terminal::escape_line;

use crate::args::StatsArgs;

/// Why `agentry stats` printed nothing (exit 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum StatsCliError {
    /// No usable store (missing file, not a store, a default store not ours).
    #[error(transparent)]
    Store(#[from] RuntimeError),
    /// A store or trace that could not be read.
    #[error(transparent)]
    Read(#[from] StatsError),
}

/// `agentry stats`.
pub(crate) fn stats(args: &StatsArgs) -> Result<(), StatsCliError> {
    let mut options = StatsOptions::new(args.by.into());
    if let Some(since) = args.since {
        options = options.since(since);
    }
    let report = if args.trace.is_empty() {
        let path = crate::store::existing(crate::store::store_or_default(args.store.as_ref())?)?;
        let store = crate::store::open_store(&path)?;
        agentry::insight::stats::from_store(store.as_ref(), &options)?
    } else {
        agentry::insight::stats::from_traces(&args.trace, &options)?
    };
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        print!("{}", render(&report));
    }
    Ok(())
}

/// The report as text: a line saying what was counted, then per group a table
/// of its figures (an `all` row, then a row per stop reason) and a table of
/// its tool calls (per tool: `all`, then per stop reason).
pub(crate) fn render(report: &Report) -> String {
    let by = match report.by {
        agentry::insight::stats::GroupBy::Task => "task",
        agentry::insight::stats::GroupBy::Model => "model",
        agentry::insight::stats::GroupBy::Tool => "tool",
    };
    let mut out = format!(
        "{} finished runs by {by}; {} unfinished not counted",
        report.runs, report.unfinished
    );
    if let Some(since) = report.since_ms {
        out.push_str(&format!(
            "; {} stopped before {} left out",
            report.excluded,
            agentry::protocol::rfc3339_seconds(since)
        ));
    }
    out.push('\n');
    for group in &report.groups {
        out.push('\n');
        out.push_str(&render_group(by, group));
    }
    out
}

const FIGURE_HEADER: [&str; 10] = [
    "STOP REASON",
    "RUNS",
    "SUCCESS",
    "STEPS mean/p50/p95",
    "TOOL CALLS/RUN",
    "TOOL ERR",
    "TOKENS/RUN in/out/cached",
    "COST/RUN",
    "WALL mean/p50/p95",
    "RETRIES/RUN",
];

fn render_group(by: &str, group: &Group) -> String {
    // Keys and tool names come from the runs' records: shown escaped.
    let mut out = format!("{by} {}\n", escape_line(&group.key));
    let rows = std::iter::once(("all", &group.all))
        .chain(group.by_stop_reason.iter().map(|(r, f)| (r.as_str(), f)))
        .map(|(reason, f)| figure_row(reason, f))
        .collect();
    out.push_str(&table(&FIGURE_HEADER, rows, 1));
    let mut tool_rows = Vec::new();
    for (tool, all) in &group.all.tool_calls.by_tool {
        let splits = group
            .by_stop_reason
            .iter()
            .filter_map(|(r, f)| f.tool_calls.by_tool.get(tool).map(|t| (r.as_str(), t)));
        for (reason, t) in std::iter::once(("all", all)).chain(splits) {
            let codes: Vec<String> = t.by_code.iter().map(|(c, n)| format!("{c}={n}")).collect();
            tool_rows.push(vec![
                escape_line(tool).into_owned(),
                reason.to_string(),
                t.calls.to_string(),
                t.errors.to_string(),
                percent(t.error_rate),
                codes.join(" "),
            ]);
        }
    }
    if !tool_rows.is_empty() {
        out.push('\n');
        let header = [
            "TOOL",
            "STOP REASON",
            "CALLS",
            "ERRORS",
            "ERROR RATE",
            "CODES",
        ];
        out.push_str(&table(&header, tool_rows, 2));
    }
    out
}

fn figure_row(reason: &str, f: &Figures) -> Vec<String> {
    let t = &f.tokens;
    vec![
        reason.to_string(),
        f.runs.to_string(),
        percent(f.success_rate),
        format!("{:.1}/{}/{}", f.steps.mean, f.steps.p50, f.steps.p95),
        format!("{:.1}", f.tool_calls.per_run),
        percent(f.tool_calls.error_rate),
        format!(
            "{:.0}/{:.0}/{:.0}",
            t.input_per_run, t.output_per_run, t.cached_per_run
        ),
        format!("{:.6}", f.cost.per_run),
        format!(
            "{}/{}/{}",
            millis(f.wall_ms.mean),
            millis(f.wall_ms.p50 as f64),
            millis(f.wall_ms.p95 as f64)
        ),
        format!("{:.1}", f.retries.per_run),
    ]
}

fn percent(rate: f64) -> String {
    format!("{:.1}%", rate * 100.0)
}

/// A duration in milliseconds, as people read it: `850ms`, `12.3s`, `4.2m`.
fn millis(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0}ms")
    } else if ms < 60_000.0 {
        format!("{:.1}s", ms / 1000.0)
    } else {
        format!("{:.1}m", ms / 60_000.0)
    }
}

/// Aligned columns, indented two spaces: the first `left` columns
/// left-aligned (names), the others right-aligned (numbers).
fn table(header: &[&str], rows: Vec<Vec<String>>, left: usize) -> String {
    let mut all = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    all.extend(rows);
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            all.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &all {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                if i < left {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str("  ");
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}
