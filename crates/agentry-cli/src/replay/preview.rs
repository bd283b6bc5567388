//! What a replay will run, shown before it runs anything: a trace is code.
//! The recorded decisions' calls (step, call id, tool, the tool's effect as
//! the task registers it, the arguments as they will be sent), what a fork's
//! policy may call, the task's acceptance commands and MCP servers, and the
//! task directory they all run against. Anything but read-only calls needs a
//! yes: `--yes`, or an answer at a terminal.

use std::io::{BufRead, IsTerminal, Write};

use agentry::protocol::decision::Decision;
use agentry::protocol::tool::ToolArguments;
use agentry::{AcceptCheck, Effect, TaskSpec, ToolRegistry};
use serde::Serialize;
use serde_json::Value;

use super::error::{Contradiction, ReplayError};
use super::recorded::Recorded;

/// Where the task directory came from: the person, or the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum TaskFrom {
    /// `--task DIR`.
    #[serde(rename = "--task")]
    Flag,
    /// The trace's stop line (`origin.task_dir`).
    #[serde(rename = "trace")]
    Trace,
    /// The store's record of the run.
    #[serde(rename = "store")]
    Store,
}

/// What the replay is asked to do besides the recording.
pub(crate) struct Scope<'a> {
    pub(crate) task_dir: String,
    pub(crate) task_from: TaskFrom,
    /// The last step whose recorded decision is played.
    pub(crate) last: Option<u64>,
    /// `--fork-at STEP` and the policy, as given.
    pub(crate) fork: Option<(u64, String)>,
    pub(crate) contradictions: &'a [Contradiction],
}

/// One recorded call the replay sends again.
#[derive(Debug, Serialize)]
pub(crate) struct PlannedCall {
    pub(crate) step: u64,
    pub(crate) call_id: String,
    pub(crate) tool: String,
    /// `read_only`, `reversible`, `irreversible_external`, or `unknown` (a
    /// tool of an MCP server, known only once started, or of none).
    pub(crate) effect: &'static str,
    /// As they will be sent (raw text when the model's was not JSON).
    pub(crate) arguments: Value,
    /// The recorded error code, when the recorded call failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) recorded_error: Option<String>,
}

/// A tool and its effect.
#[derive(Debug, Serialize)]
pub(crate) struct ToolEffect {
    pub(crate) tool: String,
    pub(crate) effect: &'static str,
}

/// `--fork-at`: the policy decides from `at` on; its calls are not known.
#[derive(Debug, Serialize)]
pub(crate) struct ForkPlan {
    pub(crate) at: u64,
    pub(crate) policy: String,
    /// The task's granted tools that are not read-only: what it may call.
    pub(crate) may_call: Vec<ToolEffect>,
}

/// Everything the replay would run.
#[derive(Debug, Serialize)]
pub(crate) struct Preview<'a> {
    pub(crate) recorded_run_id: &'a str,
    pub(crate) task_dir: String,
    pub(crate) task_from: TaskFrom,
    pub(crate) calls: Vec<PlannedCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fork: Option<ForkPlan>,
    /// The task's acceptance commands (argv), run once the replay finishes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) accept_commands: Vec<Vec<String>>,
    /// The task's MCP servers, started before the replay.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) mcp_servers: Vec<String>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub(crate) contradictions: &'a [Contradiction],
    /// Whether running it needs a yes: anything but read-only calls.
    pub(crate) confirm: bool,
}

impl<'a> Preview<'a> {
    /// What replaying `recorded` against `task` would run. Reads the task's
    /// declarations only: no MCP server is started to learn its tools.
    pub(crate) fn of(
        recorded: &'a Recorded,
        task: &TaskSpec,
        scope: Scope<'a>,
    ) -> Result<Self, ReplayError> {
        let registry = task.registry()?;
        let effect = |tool: &str| registry.get(tool).map(|t| t.contract.effect);
        let calls = planned_calls(recorded, scope.last, &effect);
        let fork = scope.fork.map(|(at, policy)| ForkPlan {
            at,
            policy,
            may_call: writers(task, &registry),
        });
        let accept_commands: Vec<Vec<String>> = task
            .accept
            .iter()
            .filter_map(|check| match check {
                AcceptCheck::Command { argv, .. } => Some(argv.clone()),
                AcceptCheck::File { .. } => None,
            })
            .collect();
        let mcp_servers: Vec<String> = task.mcp_servers.iter().map(|s| s.name.clone()).collect();
        let confirm = calls.iter().any(|c| c.effect != Effect::ReadOnly.as_str())
            || fork.as_ref().is_some_and(|f| !f.may_call.is_empty())
            || !accept_commands.is_empty()
            || !mcp_servers.is_empty();
        Ok(Preview {
            recorded_run_id: &recorded.run_id,
            task_dir: scope.task_dir,
            task_from: scope.task_from,
            calls,
            fork,
            accept_commands,
            mcp_servers,
            contradictions: scope.contradictions,
            confirm,
        })
    }

    /// The listing for people. Everything from the trace or the task is
    /// printed escaped: a call's arguments cannot move the cursor or turn
    /// text around.
    pub(crate) fn table(&self) -> String {
        let mut s = String::new();
        let from = match self.task_from {
            TaskFrom::Flag => "given with --task",
            TaskFrom::Trace => "named by the trace",
            TaskFrom::Store => "named by the store",
        };
        s.push_str(&format!(
            "replay of run {} runs, in a fresh working directory, against the task directory {} ({from}):\n",
            printable(self.recorded_run_id),
            printable(&self.task_dir)
        ));
        s.push_str("STEP  CALL  TOOL (EFFECT)  ARGUMENTS\n");
        for c in &self.calls {
            let recorded = c
                .recorded_error
                .as_ref()
                .map(|code| format!("  (recorded: {})", printable(code)))
                .unwrap_or_default();
            s.push_str(&format!(
                "{:<4}  {}  {} ({})  {}{recorded}\n",
                c.step,
                printable(&c.call_id),
                printable(&c.tool),
                c.effect,
                printable(&c.arguments.to_string())
            ));
        }
        if let Some(fork) = &self.fork {
            let tools: Vec<String> = fork
                .may_call
                .iter()
                .map(|t| format!("{} ({})", printable(&t.tool), t.effect))
                .collect();
            s.push_str(&format!(
                "from step {} on {} decides; besides read-only tools it may call: {}\n",
                fork.at,
                printable(&fork.policy),
                if tools.is_empty() {
                    "nothing".to_string()
                } else {
                    tools.join(", ")
                }
            ));
        }
        for argv in &self.accept_commands {
            let argv = serde_json::to_string(argv).unwrap_or_default();
            s.push_str(&format!(
                "acceptance command, run at the end: {}\n",
                printable(&argv)
            ));
        }
        for name in &self.mcp_servers {
            s.push_str(&format!(
                "MCP server started first: {} (its tools' effects are known once it runs)\n",
                printable(name)
            ));
        }
        for c in self.contradictions {
            s.push_str(&format!(
                "the recording contradicts itself: {}\n",
                printable(&c.to_string())
            ));
        }
        s
    }
}

/// The recorded calls of the steps played, in order.
fn planned_calls(
    recorded: &Recorded,
    last: Option<u64>,
    effect: &dyn Fn(&str) -> Option<Effect>,
) -> Vec<PlannedCall> {
    let mut calls = Vec::new();
    for step in recorded
        .steps
        .iter()
        .filter(|s| last.is_none_or(|l| s.step <= l))
    {
        let Decision::ToolCalls { calls: made } = &step.output.decision else {
            continue;
        };
        for (i, call) in made.iter().enumerate() {
            let result = step.results.get(i);
            let failed = result.filter(|r| r.get("ok") != Some(&Value::Bool(true)));
            calls.push(PlannedCall {
                step: step.step,
                call_id: call.id.clone(),
                tool: call.name.clone(),
                effect: effect(&call.name).map_or("unknown", Effect::as_str),
                arguments: match &call.arguments {
                    ToolArguments::Parsed(v) => v.clone(),
                    ToolArguments::Raw(raw) => Value::String(raw.clone()),
                },
                recorded_error: failed.map(|r| {
                    let code = r.pointer("/error/code").and_then(Value::as_str);
                    code.unwrap_or("failed").to_string()
                }),
            });
        }
    }
    calls
}

/// The task's granted tools that are not read-only, by name.
fn writers(task: &TaskSpec, registry: &ToolRegistry) -> Vec<ToolEffect> {
    registry
        .names()
        .into_iter()
        .filter_map(|name| registry.get(name))
        .filter(|t| task.grants.allows(&t.contract) && t.contract.effect != Effect::ReadOnly)
        .map(|t| ToolEffect {
            tool: t.contract.name.clone(),
            effect: t.contract.effect.as_str(),
        })
        .collect()
}

/// `--dry-run`: the listing on stdout (or, with `--json`, one object).
pub(crate) fn print(preview: &Preview<'_>, json: bool) -> Result<(), ReplayError> {
    let mut out = std::io::stdout().lock();
    let written = if json {
        serde_json::to_writer(&mut out, preview)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        write!(out, "{}", preview.table())
    };
    written
        .and_then(|()| out.flush())
        .map_err(ReplayError::Listing)
}

/// Shows what will run (on stderr) when it needs a yes, and takes it:
/// `--yes`, else an answer at a terminal; with neither, nothing runs.
pub(crate) fn consent(preview: &Preview<'_>, yes: bool) -> Result<(), ReplayError> {
    if !preview.confirm {
        return Ok(());
    }
    eprint!("{}", preview.table());
    if yes {
        return Ok(());
    }
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(ReplayError::NotConfirmed {
            task_dir: printable(&preview.task_dir),
        });
    }
    eprint!("run them? [y/N] ");
    std::io::stderr().flush().map_err(ReplayError::Prompt)?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(ReplayError::Prompt)?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(ReplayError::Declined),
    }
}

/// `text` with control characters and bidirectional overrides escaped
/// (`\u{1b}`), so what a trace holds is read as it is.
fn printable(text: &str) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(hidden) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if hidden(c) {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Escapes, control characters and bidirectional overrides cannot
    /// disguise what a listed call runs.
    #[test]
    fn control_and_bidi_characters_are_shown_escaped() {
        assert_eq!(printable("touch x"), "touch x");
        assert_eq!(printable("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(printable("rm \u{202e}fdp.x"), "rm \\u{202e}fdp.x");
        assert_eq!(printable("a\u{7f}\u{85}"), "a\\u{7f}\\u{85}");
    }
}
