//! [`Watch`]: how a call follows its remote task until it settles — over
//! the agent's stream while there is one, else (or once a stream broke off)
//! by polling `GetTask` — each new state, and each streamed artifact, a
//! progress report (`tool_progress`).

use std::time::{Duration, Instant};

use agentry_protocol::ErrorCode;
use agentry_protocol::envelope::ToolError;
use agentry_tools::{ToolContext, ToolProgress};

use crate::client::A2aClient;
use crate::error::{A2aError, call_error};
use crate::stream::{EventStream, StreamEvent};
use crate::types::{Message, Task, TaskState, TaskStatus};

/// One call following its task.
pub(crate) struct Watch<'a> {
    pub(crate) agent: &'a str,
    pub(crate) client: &'a A2aClient,
    pub(crate) ctx: &'a ToolContext,
    /// How often a task is polled.
    pub(crate) poll: Duration,
    /// The limit on the wait (the tool's timeout), from `started`.
    pub(crate) timeout: Duration,
    pub(crate) started: Instant,
    /// Progress reports made so far.
    pub(crate) reports: u32,
}

impl Watch<'_> {
    /// Follows `task` until it settles: over `stream` while it lasts, then
    /// by polling.
    pub(crate) async fn settle(
        &mut self,
        task: Task,
        stream: Option<Box<EventStream>>,
    ) -> Result<Task, ToolError> {
        self.report_state(&task);
        let task = match stream {
            Some(stream) => {
                let task = self.stream(task, *stream).await?;
                if settled(task.status.state) {
                    // Updates carry statuses and artifact chunks; the task
                    // as the agent keeps it has them whole.
                    return self
                        .client
                        .get_task(&task.id)
                        .await
                        .map_err(|e| task_error(self.agent, e, &task.id));
                }
                task
            }
            None => task,
        };
        self.poll(task).await
    }

    /// Reads the stream until the task settles or the stream ends (or
    /// breaks: the caller polls on from the last state seen).
    async fn stream(&mut self, mut task: Task, mut stream: EventStream) -> Result<Task, ToolError> {
        while !settled(task.status.state) {
            let left = self.left(&task)?;
            let event = match tokio::time::timeout(left, stream.next()).await {
                Ok(Some(Ok(event))) => event,
                Ok(Some(Err(e))) => {
                    tracing::debug!(task_id = %task.id, error = %e, "an A2A stream broke off; polling");
                    return Ok(task);
                }
                Ok(None) => return Ok(task),
                Err(_) => return Err(self.timed_out(&task)),
            };
            match event {
                StreamEvent::Task(now) if now.id == task.id => {
                    let changed = said_more(&task.status, &now.status);
                    task = now;
                    if changed {
                        self.report_state(&task);
                    }
                }
                StreamEvent::StatusUpdate(update) if update.task_id == task.id => {
                    let changed = said_more(&task.status, &update.status);
                    task.status = update.status;
                    if changed {
                        self.report_state(&task);
                    }
                }
                StreamEvent::ArtifactUpdate(update) if update.task_id == task.id => {
                    let name = update.artifact.name.unwrap_or(update.artifact.artifact_id);
                    self.report(format!("remote task {}: artifact {name}", task.id));
                }
                // Another task's, or a reply: nothing of this task.
                StreamEvent::Task(_)
                | StreamEvent::StatusUpdate(_)
                | StreamEvent::ArtifactUpdate(_)
                | StreamEvent::Message(_) => {}
            }
        }
        Ok(task)
    }

    /// Polls `GetTask` until the task settles, reporting each new state.
    async fn poll(&mut self, mut task: Task) -> Result<Task, ToolError> {
        while !settled(task.status.state) {
            let left = self.left(&task)?;
            tokio::time::sleep(self.poll.min(left)).await;
            let before = task.status.clone();
            task = self
                .client
                .get_task(&task.id)
                .await
                .map_err(|e| task_error(self.agent, e, &task.id))?;
            if said_more(&before, &task.status) {
                self.report_state(&task);
            }
        }
        Ok(task)
    }

    /// The time left to wait, or `ETIMEDOUT` (the caller's drop of the
    /// remote task then sends `CancelTask`).
    fn left(&self, task: &Task) -> Result<Duration, ToolError> {
        match self.timeout.checked_sub(self.started.elapsed()) {
            Some(left) if !left.is_zero() => Ok(left),
            Some(_) | None => Err(self.timed_out(task)),
        }
    }

    fn timed_out(&self, task: &Task) -> ToolError {
        ToolError::new(
            ErrorCode::Etimedout,
            format!(
                "remote task {} of A2A agent {} still {} after {} ms",
                task.id,
                self.agent,
                task.status.state.as_str(),
                self.timeout.as_millis()
            ),
        )
    }

    /// Reports the remote task's id and state, and what the agent says
    /// with it, so they are on record while the call runs.
    fn report_state(&mut self, task: &Task) {
        let state = task.status.state.as_str();
        let said = task.status.message.as_ref().map(Message::text);
        let report = match said.as_deref().map(str::trim) {
            Some(text) if !text.is_empty() => {
                let text: String = text.chars().take(SAID_CHARS).collect();
                format!("remote task {}: {state}: {text}", task.id)
            }
            Some(_) | None => format!("remote task {}: {state}", task.id),
        };
        self.report(report);
    }

    fn report(&mut self, message: String) {
        if let Some(sink) = &self.ctx.run.progress {
            self.reports += 1;
            sink.progress(
                &self.ctx.call_id,
                ToolProgress {
                    progress: f64::from(self.reports),
                    total: None,
                    message: Some(message),
                },
            );
        }
    }
}

/// The most of an agent's status message a progress report repeats.
const SAID_CHARS: usize = 200;

/// Whether the agent's status says something new: another state, or the
/// same state with another message ("working: 2 of 5 done").
fn said_more(before: &TaskStatus, now: &TaskStatus) -> bool {
    let text = |status: &TaskStatus| status.message.as_ref().map(Message::text);
    now.state != before.state || (now.message.is_some() && text(now) != text(before))
}

/// Whether a task waits for nothing more from this call: ended, or
/// interrupted for the client's answer.
pub(crate) fn settled(state: TaskState) -> bool {
    state.is_terminal() || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
}

/// A client error about the remote task `id` as the call's error: not
/// retried (a retry would send the message again, a second task).
pub(crate) fn task_error(agent: &str, e: A2aError, id: &str) -> ToolError {
    let mut error = call_error(agent, e).retryable(false);
    error.message = format!("{} (remote task {id})", error.message);
    error
}
