//! Running the replay: the task's real tools in a fresh working directory,
//! the recorded decisions as the policy (and a fork's policy after them), each
//! call that waits for approval answered as its step record shows
//! (`Recorded::answer`; nothing approved up front), the recorded messages
//! sent again, a new run id, no store, and its own trace to be judged from.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agentry::policy::ReplayPolicy;
use agentry::protocol::event::RunEvent;
use agentry::protocol::trace::{RunInput, TraceOrigin};
use agentry::{Policy, RunHandle, RunOutcome, Runtime, TaskSpec};

use super::error::ReplayError;
use super::recorded::{Recorded, RecordedInput};
use crate::args::{PolicyArg, absolute};
use crate::policy::{ContextSettings, LoadedPolicy, ModelOptions, model_policy};
use crate::run::FreshWorkdir;

/// What the replay is told besides the recording.
pub(crate) struct Plan<'a> {
    /// The task, loaded from its directory.
    pub(crate) task: &'a TaskSpec,
    pub(crate) until: Option<u64>,
    /// `--fork-at STEP --policy ...` (and the model server for a model policy).
    pub(crate) fork: Option<(u64, &'a PolicyArg, Option<&'a str>)>,
    /// The replay's own trace.
    pub(crate) trace: PathBuf,
    pub(crate) workdir: Option<&'a Path>,
}

/// The replay's run, once it stopped.
pub(crate) struct Replayed {
    pub(crate) outcome: RunOutcome,
    /// Volatile result fields, by tool name, from the task's contracts.
    pub(crate) volatile: BTreeMap<String, Vec<String>>,
}

/// Starts the replay and waits for it to stop.
pub(crate) async fn replay(recorded: &Recorded, plan: Plan<'_>) -> Result<Replayed, ReplayError> {
    let mut task = plan.task.clone();
    if let Some(limits) = recorded.limits {
        // The limits the recorded run had, `--max-steps` and `--deadline` included.
        task.limits = limits;
    }
    let policy = policy(recorded, &plan, &task).await?;
    let fresh = FreshWorkdir::prepare(&task, plan.workdir)?;
    let sandbox_host = crate::store::sandbox_host(None);
    let sandboxes = task.sandboxes(&fresh.path, &sandbox_host)?;
    task.read_a2a_cards().await;
    let mcp = task.start_mcp(&fresh.path, &sandboxes).await?;
    let registry = task.registry_with(&mcp)?;
    let volatile = registry
        .specs()
        .iter()
        .filter_map(|spec| registry.get(&spec.name))
        .filter(|tool| !tool.contract.volatile.is_empty())
        .map(|tool| (tool.contract.name.clone(), tool.contract.volatile.clone()))
        .collect();
    let runtime = Runtime::new(registry);
    let mut config = task.run_config(fresh.keep());
    config.sandbox_host = sandbox_host;
    config.trace = Some(plan.trace.clone());
    config.origin = Some(TraceOrigin {
        task_dir: Some(absolute(&task.dir).display().to_string()),
        workdir: Some(config.workdir.display().to_string()),
        approved: Vec::new(),
    });
    let handle = runtime.start_boxed(config, policy).await?;
    let outcome = drive(&handle, recorded).await;
    mcp.shutdown().await;
    Ok(Replayed {
        outcome: outcome?,
        volatile,
    })
}

/// The recorded decisions, then the fork's policy if there is one.
async fn policy(
    recorded: &Recorded,
    plan: &Plan<'_>,
    task: &TaskSpec,
) -> Result<Box<dyn Policy>, ReplayError> {
    let mut replay = ReplayPolicy::new(recorded.decisions());
    if let Some(until) = plan.until {
        replay = replay.until(until);
    }
    if let Some((at, arg, base_url)) = plan.fork {
        let LoadedPolicy { policy, .. } = match arg {
            PolicyArg::Script(file) => LoadedPolicy::script(file)?,
            PolicyArg::Model { provider, model } => {
                let options = ModelOptions {
                    fallback: &[],
                    prompt_cache: task.prompt_cache,
                    ca_cert: task.ca_cert.as_deref(),
                    context: ContextSettings::of_task(task),
                };
                model_policy(*provider, model, base_url, options).await?
            }
        };
        replay = replay.fork_at(at, policy);
    }
    Ok(Box::new(replay))
}

/// Waits for the replay to stop, answering each call that waits for approval
/// as its step record shows (a call the recording shows refused, or has no
/// result for, is denied, saying so) and sending each recorded message or event once the replay has
/// decided as many steps as the recording had taken before it (best effort:
/// the runtime places it at its next safe point).
async fn drive(handle: &RunHandle, recorded: &Recorded) -> Result<RunOutcome, ReplayError> {
    let mut events = handle.subscribe();
    let mut messages = recorded.messages.iter().peekable();
    send_due(handle, &mut messages, 0);
    let wait = handle.wait();
    tokio::pin!(wait);
    loop {
        tokio::select! {
            outcome = &mut wait => return Ok(outcome?),
            event = events.recv() => match event {
                Ok(record) => on_event(handle, recorded, &mut messages, record.event).await?,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    for pending in handle.pending_approvals().await {
                        answer(handle, recorded, &pending.call.id).await?;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(wait.await?),
            },
        }
    }
}

/// What the replay does on an event: answer an approval as recorded, send
/// the messages due after a decision.
// `RunEvent` is non_exhaustive (agentry-protocol): other events need nothing.
#[allow(clippy::wildcard_enum_match_arm)]
async fn on_event<'a>(
    handle: &RunHandle,
    recorded: &Recorded,
    messages: &mut std::iter::Peekable<impl Iterator<Item = &'a RecordedInput>>,
    event: RunEvent,
) -> Result<(), ReplayError> {
    match event {
        RunEvent::AwaitingApproval { call, .. } => answer(handle, recorded, &call.id).await?,
        // Sent while step N acts, a message is in the session before step
        // N + 1 decides, as it was recorded.
        RunEvent::DecisionMade { step, .. } => send_due(handle, messages, step),
        RunEvent::StepStarted { .. }
        | RunEvent::TokenDelta { .. }
        | RunEvent::ToolCallStarted { .. }
        | RunEvent::ToolProgress { .. }
        | RunEvent::ToolCallFinished { .. }
        | RunEvent::StateUpdated { .. }
        | RunEvent::BudgetSpent { .. }
        | RunEvent::InputApplied { .. }
        | RunEvent::AwaitingDecision { .. }
        | RunEvent::StepInterrupted { .. }
        | RunEvent::TickSkipped { .. }
        | RunEvent::RunStopped { .. }
        | _ => {}
    }
    Ok(())
}

async fn answer(handle: &RunHandle, recorded: &Recorded, call_id: &str) -> Result<(), ReplayError> {
    let answer = recorded.answer(call_id);
    if answer.approved {
        handle.approve(call_id).await?;
    } else {
        handle.deny(call_id, answer.reason).await?;
    }
    Ok(())
}

/// Sends the recorded messages and events due once `steps` steps are decided.
/// One the run refuses (it stopped, its inbox is full) is reported, not fatal:
/// the drift report shows what it changed.
fn send_due<'a>(
    handle: &RunHandle,
    messages: &mut std::iter::Peekable<impl Iterator<Item = &'a RecordedInput>>,
    steps: u64,
) {
    while let Some(due) = messages.next_if(|m| m.after_steps <= steps) {
        let sent = match &due.input {
            RunInput::Message { text } => handle.send_message(text.clone()),
            RunInput::Event { name, payload } => handle.inject(name.clone(), payload.clone()),
            RunInput::Interrupt { .. }
            | RunInput::Tick { .. }
            | RunInput::Pause
            | RunInput::Resume
            | RunInput::Approval { .. }
            | RunInput::Settlement { .. } => Ok(()),
        };
        if let Err(e) = sent {
            eprintln!("agentry: warning: a recorded input could not be sent again: {e}");
        }
    }
}
