//! The drift report on stdout: a table per step for people, or (`--json`)
//! one object. Everything in it comes from the two traces, which the runs'
//! redactors wrote: no live value of either run is printed.

use std::fmt::Write as _;
use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use super::compare::{StepStatus, StepVerdict, Verdict};
use super::recorded::{Recorded, RecordedStop};

/// What the replay was, besides the verdict.
#[derive(Debug, Serialize)]
pub(crate) struct Report<'a> {
    /// The recorded run.
    pub(crate) recorded_run_id: &'a str,
    /// The replay's own (new) run id.
    pub(crate) run_id: &'a str,
    pub(crate) task_dir: String,
    pub(crate) workdir: String,
    /// The replay's own trace, when kept (`--out`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) until: Option<u64>,
    #[serde(flatten)]
    pub(crate) verdict: &'a Verdict,
    /// How the replay stopped (with `--fork-at`: the forked run's ending).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outcome: Option<Outcome<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fork: Option<Fork>,
}

/// The replay's stop, from its trace's stop line.
#[derive(Debug, Serialize)]
pub(crate) struct Outcome<'a> {
    pub(crate) stop_reason: agentry::StopReason,
    pub(crate) detail: &'a str,
    pub(crate) steps: u64,
    pub(crate) answer: Option<&'a str>,
}

impl<'a> Outcome<'a> {
    pub(crate) fn of(stop: &'a RecordedStop) -> Self {
        Outcome {
            stop_reason: stop.reason,
            detail: &stop.detail,
            steps: stop.steps,
            answer: stop.answer.as_deref(),
        }
    }
}

/// `--fork-at`.
#[derive(Debug, Serialize)]
pub(crate) struct Fork {
    /// The first step the fork's policy decided.
    pub(crate) at: u64,
    /// The policy, as given (`script:FILE`, `openai:MODEL`).
    pub(crate) policy: String,
}

/// Prints the report.
pub(crate) fn print(report: &Report<'_>, recorded: &Recorded, json: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
    } else {
        // The recording's strings (tool names, answers): escaped for a terminal.
        let table = table(report, recorded);
        write!(out, "{}", agentry::protocol::terminal::escape_text(&table))?;
    }
    out.flush()
}

/// The human report: a header, one line per step (and one per difference),
/// the stop, and the verdict.
pub(crate) fn table(report: &Report<'_>, recorded: &Recorded) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "replay of run {} as run {} (task {}, working directory {})",
        report.recorded_run_id, report.run_id, report.task_dir, report.workdir
    );
    let _ = writeln!(s, "STEP  VERDICT  DETAIL");
    for step in &report.verdict.steps {
        step_lines(&mut s, step, recorded);
    }
    let stop = &report.verdict.stop;
    let name = |r: Option<agentry::StopReason>| r.map_or("(none)".to_string(), |r| r.to_string());
    if stop.judged {
        let verdict = if stop.same { "same" } else { "drifted" };
        let _ = writeln!(
            s,
            "stop  {verdict:<7}  recorded {}, replayed {}",
            name(stop.recorded),
            name(stop.replayed)
        );
    }
    if let (Some(fork), Some(outcome)) = (&report.fork, &report.outcome) {
        let _ = writeln!(
            s,
            "fork  at step {} with {}: stopped {} after {} steps{}{}",
            fork.at,
            fork.policy,
            outcome.stop_reason,
            outcome.steps,
            detail(outcome.detail),
            outcome
                .answer
                .map(|a| format!(", answer {a:?}"))
                .unwrap_or_default()
        );
    } else if let Some(until) = report.until {
        let _ = writeln!(s, "until step {until}: the stop is not judged");
    }
    let _ = writeln!(s, "{}", summary(report.verdict));
    s
}

fn detail(d: &str) -> String {
    if d.is_empty() {
        String::new()
    } else {
        format!(" ({d})")
    }
}

fn step_lines(s: &mut String, step: &StepVerdict, recorded: &Recorded) {
    let (word, text) = match step.status {
        StepStatus::Same => ("same", String::new()),
        StepStatus::Drifted if step.diffs.is_empty() => ("refused", String::new()),
        StepStatus::Drifted => ("drifted", String::new()),
        StepStatus::Missing => ("missing", "the replay stopped before this step".to_string()),
        StepStatus::Extra => (
            "extra",
            format!(
                "the recording stopped after step {}",
                recorded.steps.last().map_or(0, |s| s.step)
            ),
        ),
    };
    let line = format!("{:<4}  {word:<7}  {text}", step.step);
    let _ = writeln!(s, "{}", line.trim_end());
    for r in &step.refused {
        let _ = writeln!(
            s,
            "                 call {} ({}) refused: {} {}",
            r.call_id, r.tool, r.code, r.message
        );
    }
    for d in &step.diffs {
        let _ = writeln!(
            s,
            "                 call {} ({}) {}: {} -> {}",
            d.call_id,
            d.tool,
            if d.path.is_empty() { "result" } else { &d.path },
            compact(&d.recorded),
            compact(&d.replayed)
        );
    }
}

/// A value on one line, long ones cut.
fn compact(v: &Value) -> String {
    const MAX: usize = 80;
    let text = v.to_string();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

/// The last line: no drift, or which steps drifted.
fn summary(verdict: &Verdict) -> String {
    if !verdict.drifted {
        return format!("no drift ({} steps compared)", verdict.steps.len());
    }
    let steps: Vec<String> = verdict
        .steps
        .iter()
        .filter(|s| s.status != StepStatus::Same)
        .map(|s| s.step.to_string())
        .collect();
    let mut parts = Vec::new();
    if !steps.is_empty() {
        parts.push(format!("step {}", steps.join(", ")));
    }
    if verdict.stop.judged && !verdict.stop.same {
        parts.push("the stop reason".to_string());
    }
    format!("drift: {}", parts.join("; "))
}
