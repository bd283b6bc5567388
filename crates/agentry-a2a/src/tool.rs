//! [`A2aTool`]: one remote agent as the tool `<name>.ask`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use agentry_protocol::ErrorCode;
use agentry_protocol::RemoteRef;
use agentry_protocol::envelope::ToolError;
use agentry_protocol::tool::{Effect, Idempotency, ToolCall, ToolContract};
use agentry_tools::{HumanAnswer, Tool, ToolContext, ToolOutput, parse_args, schema_for};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::card::{Discovered, discover};
use crate::client::{A2aClient, A2aOptions, SendRequest};
use crate::describe::card_description;
use crate::error::{A2aError, call_error};
use crate::remote::{Reach, RemoteTask};
use crate::stream::{ArtifactUpdate, EventStream, StatusUpdate, StreamEvent};
use crate::types::{Message, SendResult, Task, TaskState};
use crate::watch::{Watch, settled, task_error};

/// The kind of the remote tasks this tool records ([`RemoteRef::kind`]).
pub const REMOTE_KIND: &str = "a2a";

/// How often a running task is polled with `GetTask`.
const DEFAULT_POLL: Duration = Duration::from_millis(250);
/// The default limit on one call (the contract's timeout).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a cancelled call waits for its `CancelTask` before the executor
/// drops it (the runtime caps every tool's grace; the request goes on in a
/// task of its own either way).
const CANCEL_GRACE: Duration = Duration::from_millis(75);

/// The arguments of `<name>.ask`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct AskArgs {
    /// What to tell or ask the remote agent.
    message: String,
    /// To answer a remote agent that asked for input: the `task_id` its
    /// question came with. Omit to start a new task.
    #[serde(default)]
    task_id: Option<String>,
}

/// A remote A2A agent as a tool: `<name>.ask` sends a message, waits for
/// the task to end (polling `GetTask`), and returns its artifacts' text.
#[derive(Debug, Clone)]
pub struct A2aTool {
    name: String,
    description: String,
    reach: Arc<Reach>,
    effect: Effect,
    poll: Duration,
    timeout: Duration,
    stream: bool,
    input: InputRequired,
    max_retries: u32,
}

impl A2aTool {
    /// The tool `<name>.ask` for the agent `client` reaches; `description`
    /// is shown to the model. Effect `irreversible_external` (a run parks
    /// each call for approval unless its config says otherwise).
    pub fn new(name: impl Into<String>, description: impl Into<String>, client: A2aClient) -> Self {
        A2aTool {
            name: name.into(),
            description: description.into(),
            reach: Arc::new(Reach::Ready(Arc::new(client))),
            effect: Effect::IrreversibleExternal,
            poll: DEFAULT_POLL,
            timeout: DEFAULT_TIMEOUT,
            stream: true,
            input: InputRequired::Model,
            max_retries: 0,
        }
    }

    /// The tool for an agent found by its card (`discover`): the card's
    /// description and skills become the tool's description.
    pub fn from_discovered(name: impl Into<String>, found: Discovered) -> Self {
        let name = name.into();
        let description = card_description(&name, None, &found.card);
        A2aTool::new(name, description, found.client)
    }

    /// Discovers the agent at `url` (see [`discover`]) and makes its tool.
    pub async fn discover(
        name: impl Into<String>,
        url: &str,
        options: &A2aOptions,
    ) -> Result<Self, A2aError> {
        Ok(A2aTool::from_discovered(
            name,
            discover(url, options).await?,
        ))
    }

    /// The tool `<name>.ask` for the agent whose card is at `url`, found at
    /// its first call (not before: declaring it costs no request, and an
    /// agent that is down fails its calls, not the run's start). The card
    /// is read once; a failure is the call's error and the next call reads
    /// it again.
    pub fn declared(
        name: impl Into<String>,
        description: impl Into<String>,
        url: impl Into<String>,
        options: A2aOptions,
    ) -> Self {
        A2aTool {
            name: name.into(),
            description: description.into(),
            reach: Arc::new(Reach::Card {
                url: url.into(),
                options,
                found: tokio::sync::OnceCell::new(),
            }),
            effect: Effect::IrreversibleExternal,
            poll: DEFAULT_POLL,
            timeout: DEFAULT_TIMEOUT,
            stream: true,
            input: InputRequired::Model,
            max_retries: 0,
        }
    }

    /// Overrides the effect (e.g. `read_only` for a lookup agent).
    pub fn effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self
    }

    /// How often a running task is polled.
    pub fn poll_interval(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Whether a call follows its task over the agent's stream when its
    /// card offers one (`capabilities.streaming`; the default), or polls.
    pub fn streaming(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Who answers the remote agent's questions ([`InputRequired`]).
    pub fn input_required(mut self, input: InputRequired) -> Self {
        self.input = input;
        self
    }

    /// How many times the executor may retry a retryable failure of a call
    /// (a timeout, an unreachable agent) whose effect allows retries; 0 by
    /// default, as each retry sends the message again: a new remote task.
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The limit on one call, from the send to the task's end.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The tool's name, `<name>.ask`.
    pub fn tool_name(&self) -> String {
        format!("{}.ask", self.name)
    }

    /// Sends the message (or, for a call run again after a crash, takes up
    /// the task it had started), then follows the task until it ends or is
    /// interrupted: over the agent's stream when its card offers one, else
    /// by polling `GetTask`.
    async fn run(
        &self,
        args: AskArgs,
        remote: &RemoteTask,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let client = &remote.client;
        let streams = self.stream && client.streams();
        // The call as a human asked the remote agent's question sees it.
        let shown = json!({"message": args.message, "task_id": args.task_id});
        let (task, stream) = match self.start(args, client, ctx, streams).await? {
            Started::Task(task, stream) => (task, stream),
            Started::Reply(reply) => return Ok(self.reply(reply)),
        };
        remote.set(&task.id);
        let mut watch = Watch {
            agent: &self.name,
            client,
            ctx,
            poll: self.poll,
            timeout: self.timeout,
            started: Instant::now(),
            reports: 0,
        };
        let mut task = watch.settle(task, stream).await?;
        let mut answers = 0u32;
        while task.status.state == TaskState::InputRequired && self.input == InputRequired::Human {
            let Some(human) = &ctx.run.human else { break };
            let call = ToolCall::new(ctx.call_id.clone(), self.tool_name(), shown.clone());
            let asked = human
                .ask(&call, self.effect, &task.status_text(), &ctx.cancel)
                .await?;
            let answer = match asked {
                HumanAnswer::Text(answer) => answer,
                HumanAnswer::Pass => break,
                // The remote task is not settled: dropping it sends CancelTask.
                HumanAnswer::Refused(reason) => return Err(refused(&self.name, &task.id, reason)),
            };
            answers += 1;
            let args = AskArgs {
                message: answer,
                task_id: Some(task.id.clone()),
            };
            let (next, stream) = match self.send(args, client, ctx, streams, answers).await? {
                Started::Task(next, stream) => (next, stream),
                Started::Reply(reply) => return Ok(self.reply(reply)),
            };
            task = watch.settle(next, stream).await?;
        }
        remote.settle();
        self.outcome(task)
    }

    /// The call's task: the one it started before a crash (followed, not
    /// sent again: it would be a second task), or a new one from its
    /// message; recorded before the call waits, so a crash from here on is
    /// followed by the resume.
    async fn start(
        &self,
        args: AskArgs,
        client: &A2aClient,
        ctx: &ToolContext,
        streams: bool,
    ) -> Result<Started, ToolError> {
        let followed = ctx
            .remote
            .as_ref()
            .and_then(|log| log.follow())
            .filter(|r| r.kind == REMOTE_KIND);
        let Some(reference) = followed else {
            let started = self.send(args, client, ctx, streams, 0).await?;
            if let Started::Task(task, _) = &started {
                record(ctx, task);
            }
            return Ok(started);
        };
        let task = client
            .get_task(&reference.id)
            .await
            .map_err(|e| task_error(&self.name, e, &reference.id))?;
        // Kept on the call's new intent row by the runtime; set again here
        // for a runtime that does not.
        record(ctx, &task);
        // A task that ended is not subscribed to (the agent refuses).
        let stream = match streams && !settled(task.status.state) {
            true => client.subscribe(&task.id).await.ok().map(Box::new),
            false => None,
        };
        Ok(Started::Task(task, stream))
    }

    /// A direct reply (no task) as the call's result.
    fn reply(&self, reply: Message) -> ToolOutput {
        ToolOutput::data(json!({
            "agent": self.name,
            "text": reply.text(),
            "context_id": reply.context_id,
        }))
    }

    /// Sends the call's message: the task (at once: `returnImmediately`, or
    /// a stream's first event) and its stream, or the agent's reply.
    async fn send(
        &self,
        args: AskArgs,
        client: &A2aClient,
        ctx: &ToolContext,
        streams: bool,
        answers: u32,
    ) -> Result<Started, ToolError> {
        let context_id = match &args.task_id {
            // The agent wants the task's context with its id.
            Some(id) => Some(
                client
                    .get_task(id)
                    .await
                    .map_err(|e| self.error(e))?
                    .context_id,
            ),
            None => None,
        };
        let request = SendRequest {
            text: args.message,
            task_id: args.task_id,
            context_id,
            return_immediately: true,
            message_id: Some(message_id(ctx, answers)),
            metadata: Some(metadata(ctx)),
        };
        if !streams {
            return match client.send_message(&request).await {
                Ok(SendResult::Message(reply)) => Ok(Started::Reply(reply)),
                Ok(SendResult::Task(task)) => Ok(Started::Task(task, None)),
                Err(e) => Err(self.error(e)),
            };
        }
        let mut stream = client
            .send_streaming(&request)
            .await
            .map_err(|e| self.error(e))?;
        let first = tokio::time::timeout(self.timeout, stream.next()).await;
        let task = match first {
            Ok(Some(Ok(StreamEvent::Task(task)))) => task,
            Ok(Some(Ok(StreamEvent::Message(reply)))) => return Ok(Started::Reply(reply)),
            // Not the order the protocol says; the task is read instead.
            Ok(Some(Ok(StreamEvent::StatusUpdate(StatusUpdate { task_id, .. }))))
            | Ok(Some(Ok(StreamEvent::ArtifactUpdate(ArtifactUpdate { task_id, .. })))) => client
                .get_task(&task_id)
                .await
                .map_err(|e| task_error(&self.name, e, &task_id))?,
            Ok(Some(Err(e))) => return Err(self.error(e)),
            Ok(None) => {
                return Err(ToolError::new(
                    ErrorCode::Eunavail,
                    format!(
                        "A2A agent {}: its stream ended before it sent the task",
                        self.name
                    ),
                ));
            }
            Err(_) => {
                return Err(ToolError::new(
                    ErrorCode::Etimedout,
                    format!(
                        "A2A agent {}: no task within {} ms of the message",
                        self.name,
                        self.timeout.as_millis()
                    ),
                ));
            }
        };
        Ok(Started::Task(task, Some(Box::new(stream))))
    }

    /// A settled task as the call's result.
    fn outcome(&self, task: Task) -> Result<ToolOutput, ToolError> {
        let state = task.status.state;
        let data = |text: String| {
            json!({
                "agent": self.name,
                "task_id": task.id,
                "context_id": task.context_id,
                "state": state.as_str(),
                "text": text,
            })
        };
        let failed = |code: ErrorCode| {
            let said = task.status_text();
            ToolError::new(
                code,
                format!(
                    "remote task {} of A2A agent {} ended {}{}",
                    task.id,
                    self.name,
                    state.as_str(),
                    if said.is_empty() {
                        String::new()
                    } else {
                        format!(": {said}")
                    }
                ),
            )
            .retryable(false)
        };
        match state {
            TaskState::Completed => {
                let mut out = data(task.artifact_text());
                let parts = task.other_parts();
                if !parts.is_empty() {
                    out["parts"] = Value::Array(parts);
                }
                Ok(ToolOutput::data(out))
            }
            TaskState::InputRequired => {
                let mut out = data(task.status_text());
                out["input_required"] = Value::Bool(true);
                out["next"] = Value::String(format!(
                    "The remote agent asks for input (text). To answer, call {} with {{\"message\": <answer>, \"task_id\": \"{}\"}}.",
                    self.tool_name(),
                    task.id
                ));
                Ok(ToolOutput::data(out))
            }
            TaskState::AuthRequired => Err(failed(ErrorCode::Eperm)),
            TaskState::Rejected => Err(failed(ErrorCode::Eperm)),
            TaskState::Canceled => Err(failed(ErrorCode::Ecanceled)),
            TaskState::Failed | TaskState::Unspecified => Err(failed(ErrorCode::Eunavail)),
            TaskState::Submitted | TaskState::Working => Err(failed(ErrorCode::Einternal)),
        }
    }

    /// A client error as the call's error.
    fn error(&self, e: A2aError) -> ToolError {
        call_error(&self.name, e)
    }
}

/// Records the remote task with the call's intent (a durable run's ledger),
/// so that a resume after a crash follows it.
fn record(ctx: &ToolContext, task: &Task) {
    if let Some(log) = &ctx.remote {
        log.started(RemoteRef {
            kind: REMOTE_KIND.to_string(),
            id: task.id.clone(),
            context: Some(task.context_id.clone()).filter(|c| !c.is_empty()),
        });
    }
}

/// The id of a call's message: the same for the same action of the run and
/// attempt (see `ToolContext::operation_id`), so a message a crash left
/// unrecorded can be found in the remote task's history by a human settling
/// the call. A human's `n`th answer within the call gets `-<n>`.
fn message_id(ctx: &ToolContext, n: u32) -> String {
    let id = format!(
        "agentry-{}-{}-{}",
        ctx.operation_id, ctx.call_id, ctx.attempt
    );
    match n {
        0 => id,
        n => format!("{id}-{n}"),
    }
}

/// The request's metadata: when the call must end (`deadline_ms`, Unix ms)
/// and how long the run has left (`run_remaining_ms`), so the agent can fit
/// its work to them; the call is cut locally at its deadline either way.
fn metadata(ctx: &ToolContext) -> Value {
    let epoch_ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    };
    let mut agentry = json!({
        "run_id": &*ctx.run.run_id,
        "call_id": ctx.call_id,
        "operation_id": &*ctx.operation_id,
    });
    if let Some(call) = ctx.deadlines.call {
        agentry["deadline_ms"] = json!(epoch_ms(call));
    }
    if let Some(run) = ctx.deadlines.run {
        let left = run.duration_since(SystemTime::now()).unwrap_or_default();
        agentry["run_remaining_ms"] = json!(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    }
    json!({ "agentry": agentry })
}

/// Who answers a remote agent's question (`TASK_STATE_INPUT_REQUIRED`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InputRequired {
    /// The model: the question is the call's result, answered by another
    /// call with its `task_id`.
    #[default]
    Model,
    /// A human, through the run's approval path (`ToolContext::human`):
    /// the answer goes to the remote task within the same call; a human who
    /// approves without an answer (or none within the approval timeout)
    /// passes the question to the model; a refusal ends the call `EPERM`
    /// and cancels the remote task.
    Human,
}

/// A human's refusal to answer the remote agent, as the call's error.
fn refused(agent: &str, task_id: &str, reason: Option<String>) -> ToolError {
    let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
    ToolError::new(
        ErrorCode::Eperm,
        format!("a human refused to answer the question of A2A agent {agent} (remote task {task_id}, cancelled){why}"),
    )
    .retryable(false)
    .with_action("do not ask the agent the same again; choose another way or finish")
}

/// How a call's message started: the agent's task (with its stream, when
/// streamed), or a direct reply.
enum Started {
    Task(Task, Option<Box<EventStream>>),
    Reply(Message),
}

#[async_trait]
impl Tool for A2aTool {
    fn contract(&self) -> ToolContract {
        ToolContract::new(
            self.tool_name(),
            self.description.clone(),
            schema_for::<AskArgs>(),
        )
        .effect(self.effect)
        // A repeated send is a second task on the remote agent.
        .idempotency(Idempotency::None)
        .max_retries(self.max_retries)
        // A run grants the agent by its name, or the tool by `<name>.ask`.
        .scope(self.name.clone())
        .timeout_ms(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
        .version("a2a-1.0")
        // Ids the remote agent makes anew every time.
        .volatile_fields(["task_id", "context_id"])
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: AskArgs = parse_args(args)?;
        let client = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                return Err(ToolError::new(
                    ErrorCode::Ecanceled,
                    format!("call of A2A agent {} cancelled before its card was read", self.name),
                ));
            }
            found = self.reach.client() => found.map_err(|e| self.error(e))?,
        };
        let remote = RemoteTask {
            client,
            id: Mutex::new(None),
        };
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                let what = match remote.cancel() {
                    Some((id, sent)) => {
                        // Joined while the executor's grace lasts; a dropped
                        // join leaves the request running.
                        let _ = sent.await;
                        format!("; its remote task {id} was sent CancelTask")
                    }
                    None => String::new(),
                };
                Err(ToolError::new(
                    ErrorCode::Ecanceled,
                    format!("call of A2A agent {} cancelled{what}", self.name),
                ))
            }
            out = self.run(args, &remote, ctx) => out,
        }
    }

    fn cancel_grace(&self) -> Duration {
        CANCEL_GRACE
    }
}
