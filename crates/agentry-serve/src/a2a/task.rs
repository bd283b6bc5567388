//! A run seen as an A2A task: its state by the map of the module docs, its
//! status message, and the answer as its artifact. Read from the same
//! places `GET /runs/{id}` reads (the run's snapshot, its outcome).

use std::time::Duration;

use agentry::protocol::state::{PendingApproval, RunSnapshot};
use agentry::protocol::stop::StopReason;
use agentry::{RunOutcome, RunStatus};
use serde_json::{Value, json};

use super::super::table::{App, Run, RunEntry};
use super::super::tenants::Tenant;
use super::wire::RpcError;

/// One task as a call names it: run `id` of agent `agent`, for `tenant`,
/// looked for in `app` (`look.rs`); any other run is TaskNotFound, never
/// another tenant's.
#[derive(Clone, Copy)]
pub(super) struct TaskRef<'a> {
    pub(super) app: &'a App,
    pub(super) tenant: &'a Tenant,
    pub(super) agent: &'a str,
    pub(super) id: &'a str,
}

/// Whether a look at a completed task reads its declared files (a listing
/// without artifacts needs none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Files {
    Read,
    Skip,
}

/// A task's state, as A2A names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl State {
    pub(super) fn name(self) -> &'static str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Failed => "TASK_STATE_FAILED",
            State::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// Nothing more happens to the task.
    pub(super) fn terminal(self) -> bool {
        match self {
            State::Completed | State::Failed | State::Canceled => true,
            State::Submitted | State::Working | State::InputRequired => false,
        }
    }
}

/// A task as observed now.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Observed {
    pub(super) id: String,
    pub(super) state: State,
    /// The status message's parts (none: no message).
    pub(super) parts: Vec<Value>,
    /// The run's answer so far.
    pub(super) answer: Option<String>,
    /// Inputs the run has applied (a message sent is seen once it counts).
    pub(super) inputs: u64,
    /// An event-driven run between inputs.
    pub(super) asleep: bool,
    /// The declared files of a completed task, as artifacts (`files.rs`).
    pub(super) files: Vec<Value>,
}

impl Observed {
    /// The answer as an artifact.
    pub(super) fn artifact(&self) -> Option<Value> {
        let answer = self.answer.as_ref()?;
        Some(json!({
            "artifactId": format!("{}-answer", self.id),
            "name": "answer",
            "parts": [{"text": answer}],
        }))
    }

    /// Every artifact: the answer, then the declared files.
    pub(super) fn artifacts(&self) -> Vec<Value> {
        self.artifact()
            .into_iter()
            .chain(self.files.iter().cloned())
            .collect()
    }

    /// `TaskStatus`.
    pub(super) fn status(&self) -> Value {
        let mut status = json!({
            "state": self.state.name(),
            "timestamp": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        });
        if !self.parts.is_empty() {
            status["message"] = json!({
                "messageId": format!("{}-{}", self.id, agentry::protocol::now_millis()),
                "role": "ROLE_AGENT",
                "taskId": self.id,
                "contextId": self.id,
                "parts": self.parts,
            });
        }
        status
    }

    /// `Task` (its artifacts left out unless asked for, as ListTasks does).
    pub(super) fn task(&self, artifacts: bool) -> Value {
        let mut task = json!({"id": self.id, "contextId": self.id, "status": self.status()});
        let all = self.artifacts();
        if artifacts && !all.is_empty() {
            task["artifacts"] = json!(all);
        }
        task
    }
}

/// `task`, in this node's table, as observed now; its declared files read
/// (as `files` says) once it completed.
pub(super) async fn observe_held(task: TaskRef<'_>, files: Files) -> Result<Observed, RpcError> {
    let id = task.id;
    let entry = task
        .app
        .run(task.tenant, id)
        .ok()
        .filter(|entry| entry.meta.agent.as_deref() == Some(task.agent))
        .ok_or_else(|| RpcError::task_not_found(id))?;
    let declared = match files {
        Files::Read => entry.meta.artifacts.clone(),
        Files::Skip => Vec::new(),
    };
    let mut now = observe_entry(&entry, id).await?;
    if now.state == State::Completed && !declared.is_empty() {
        now.files = read_files(id, &entry, declared).await;
    }
    Ok(now)
}

/// The declared files of a completed run, read off the async workers.
async fn read_files(id: &str, entry: &RunEntry, declared: Vec<String>) -> Vec<Value> {
    let workdir = match entry.current() {
        Run::Stopped(outcome) => outcome.workdir.clone(),
        Run::Live(handle) => match handle.outcome() {
            Some(outcome) => outcome.workdir,
            None => return Vec::new(),
        },
        Run::Queued => return Vec::new(),
    };
    let id = id.to_string();
    tokio::task::spawn_blocking(move || super::files::read(&id, &workdir, &declared))
        .await
        .unwrap_or_default()
}

/// A run of the table as a task (its files not read).
async fn observe_entry(entry: &RunEntry, id: &str) -> Result<Observed, RpcError> {
    let handle = match entry.current() {
        Run::Queued => return Ok(queued(id)),
        Run::Stopped(outcome) => return Ok(stopped(id, &outcome, None)),
        Run::Live(handle) => *handle,
    };
    if let Some(outcome) = handle.outcome() {
        return Ok(stopped(id, &outcome, None));
    }
    let Some(snapshot) = handle.snapshot().await else {
        return Err(RpcError::internal("the run's state is unavailable"));
    };
    if snapshot.status == RunStatus::Stopped {
        // As `GET /runs/{id}`: the outcome follows the stop by a moment.
        let outcome = tokio::time::timeout(Duration::from_secs(1), handle.wait())
            .await
            .ok()
            .and_then(Result::ok);
        if let Some(outcome) = outcome {
            return Ok(stopped(id, &outcome, Some(&snapshot)));
        }
    }
    Ok(live(id, &snapshot))
}

pub(super) fn queued(id: &str) -> Observed {
    Observed {
        id: id.to_string(),
        state: State::Submitted,
        parts: Vec::new(),
        answer: None,
        inputs: 0,
        asleep: false,
        files: Vec::new(),
    }
}

fn stopped(id: &str, outcome: &RunOutcome, snapshot: Option<&RunSnapshot>) -> Observed {
    let inputs = snapshot.map_or(0, |s| s.inputs);
    ended(
        id,
        outcome.stop_reason,
        &outcome.detail,
        outcome.answer.clone(),
        inputs,
    )
}

/// A run that stopped for `reason`.
pub(super) fn ended(
    id: &str,
    reason: StopReason,
    detail: &str,
    answer: Option<String>,
    inputs: u64,
) -> Observed {
    // Every other stop reason, present and future (`StopReason` is
    // non-exhaustive), is a failure.
    let state = if reason == StopReason::Done {
        State::Completed
    } else if reason == StopReason::UserAbort {
        State::Canceled
    } else {
        State::Failed
    };
    let parts = if state == State::Completed {
        Vec::new()
    } else {
        vec![
            json!({"text": match detail {
                "" => format!("stopped: {}", reason.as_str()),
                detail => format!("stopped: {}: {detail}", reason.as_str()),
            }}),
            json!({"data": {"stop_reason": reason.as_str(), "detail": detail}}),
        ]
    };
    Observed {
        id: id.to_string(),
        state,
        parts,
        answer,
        inputs,
        asleep: false,
        files: Vec::new(),
    }
}

/// What a run that has not stopped shows, from its snapshot or its view.
pub(super) struct Going<'a> {
    pub(super) status: RunStatus,
    pub(super) approvals: &'a [PendingApproval],
    pub(super) decisions: &'a [PendingApproval],
    pub(super) answer: Option<String>,
    pub(super) inputs: u64,
}

fn live(id: &str, snapshot: &RunSnapshot) -> Observed {
    going(
        id,
        Going {
            status: snapshot.status,
            approvals: &snapshot.pending_approvals,
            decisions: &snapshot.pending_decisions,
            answer: snapshot.task.answer.clone(),
            inputs: snapshot.inputs,
        },
    )
}

/// A run that has not stopped, as a task.
pub(super) fn going(id: &str, run: Going<'_>) -> Observed {
    let (state, parts) = match run.status {
        RunStatus::Running | RunStatus::Paused | RunStatus::Stopped => (State::Working, Vec::new()),
        RunStatus::AwaitingApproval => (
            State::InputRequired,
            pending_parts("approval", run.approvals),
        ),
        RunStatus::AwaitingDecision => (
            State::InputRequired,
            pending_parts("decision", run.decisions),
        ),
        RunStatus::Sleeping => {
            let mut parts = Vec::new();
            if let Some(answer) = &run.answer {
                parts.push(json!({"text": answer}));
            }
            parts.push(json!({"data": {"awaiting": "message"}}));
            (State::InputRequired, parts)
        }
    };
    Observed {
        id: id.to_string(),
        state,
        parts,
        answer: run.answer,
        inputs: run.inputs,
        asleep: run.status == RunStatus::Sleeping,
        files: Vec::new(),
    }
}

/// The parts saying which calls wait for a human, and how to answer.
fn pending_parts(kind: &str, pending: &[PendingApproval]) -> Vec<Value> {
    let calls: Vec<Value> = pending
        .iter()
        .map(|p| {
            let mut call = json!({
                "call_id": p.call.id,
                "tool": p.call.name,
                "args": serde_json::to_value(&p.call.arguments).unwrap_or(Value::Null),
                "effect": p.effect.and_then(|e| serde_json::to_value(e).ok()),
            });
            if let Some(preview) = &p.preview {
                call["preview"] = json!(preview);
            }
            if let Some(question) = p.question() {
                call["question"] = json!(question);
            }
            call
        })
        .collect();
    let how = match kind {
        "approval" => {
            "answer on this task with a data part {\"approval\": {\"call_id\": ID, \"approve\": true|false, \"reason\"?: TEXT}}"
        }
        _ => {
            "answer on this task with a data part {\"decision\": {\"call_id\": ID, \"settle\": \"happened\"|\"retry\"|\"skip\"}}"
        }
    };
    let names: Vec<String> = pending
        .iter()
        .map(|p| format!("{} ({})", p.call.id, p.call.name))
        .collect();
    // A remote agent's question (`input_required = "human"`) is answered
    // with text, which goes on to that agent.
    let questions: Vec<String> = pending
        .iter()
        .filter_map(|p| {
            p.question().map(|q| {
                format!(
                    "; {} is a question from the remote agent ({q:?}): answer it with a data part {{\"approval\": {{\"call_id\": \"{}\", \"answer\": TEXT}}}}",
                    p.call.id, p.call.id
                )
            })
        })
        .collect();
    vec![
        json!({"text": format!("awaiting a human's {kind} on {}: {how}{}", names.join(", "), questions.concat())}),
        json!({"data": {"awaiting": kind, "calls": calls}}),
    ]
}
