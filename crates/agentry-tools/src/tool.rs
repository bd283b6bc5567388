//! The tool seam: the [`Tool`] trait, what a call gets ([`ToolContext`]) and
//! returns ([`ToolOutput`]), and the two helpers every tool's contract and
//! arguments go through ([`schema_for`], [`parse_args`]).

use std::path::Path;
use std::sync::Arc;

use std::time::Duration;

use agentry_protocol::child::ChildRequest;
use agentry_protocol::envelope::{ResourceRef, ToolError};
use agentry_protocol::tool::ToolContract;
use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::fs::WorkRoot;

/// What a tool gets besides its arguments: the run's shared part ([`RunScope`],
/// built once per run) and what belongs to this one call.
#[derive(Clone)]
pub struct ToolContext {
    /// What every call of the run shares: its id, directories, desks and
    /// sandboxes.
    pub run: Arc<RunScope>,
    /// The model's call id.
    pub call_id: String,
    /// Cancelled when the call must stop (deadline, abort, shutdown). The executor
    /// also drops the call's future then; long-running tools that hold resources
    /// outside the future (processes) watch this token to release them.
    pub cancel: CancellationToken,
    /// Attempt number, from 1.
    pub attempt: u32,
    /// Host-issued operation id of this action: the same for every attempt, for a
    /// re-run after a crash, and for the same action re-proposed under a fresh call
    /// id. Tools with `idempotency = required_key` pass it to the system they act
    /// on so it can drop duplicates.
    pub operation_id: Arc<str>,
    /// Where a tool that starts processes records each process group, with the
    /// call's intent (a durable run's ledger); `None` where nothing records.
    pub processes: Option<Arc<dyn ProcessLog>>,
    /// Where a call that starts a task on another system (a remote A2A
    /// agent) records that task with the call's intent, and what it follows
    /// when the call is run again after a crash ([`RemoteLog`]); `None`
    /// where nothing records.
    pub remote: Option<Arc<dyn RemoteLog>>,
    /// When the call must end: the earlier of its contract's timeout and the
    /// run's wall-clock deadline, and the run's deadline alone. The executor
    /// enforces both; a tool passes them on to what it calls (a remote agent
    /// gets them as metadata). Unset outside a run.
    pub deadlines: Deadlines,
    /// The W3C `traceparent` of this call (its `execute_tool` span when spans
    /// are exported, else the run's), passed on to what the tool calls: process
    /// tools get it as `TRACEPARENT`, MCP calls in `_meta`. `None` outside a run.
    pub traceparent: Option<Arc<str>>,
}

// Held inline in each call's future (W2's bytes per call); the run's share stays behind `run`.
const _: () = assert!(std::mem::size_of::<ToolContext>() <= 144);

/// The part of a [`ToolContext`] that is the same for every call of a run,
/// built once per run and shared by its calls.
#[derive(Clone)]
pub struct RunScope {
    /// The run the calls belong to.
    pub run_id: Arc<str>,
    /// The run's working directory; file tools must stay inside it.
    pub workdir: Arc<Path>,
    /// The working directory as a handle, opened once for the run: every file
    /// operation on a model-given path resolves beneath it (see [`WorkRoot`]).
    pub root: Arc<WorkRoot>,
    /// Where a tool may keep large artifacts (full process output) referenced from
    /// its envelope. By default `<workdir>/.agentry`, so the model can read them
    /// back with `fs.read`; created on first use.
    pub artifacts: Arc<Path>,
    /// Starts and waits for child agents of this run (`agent.spawn`, `agent.wait`);
    /// `None` where the host runs no agent trees.
    pub agents: Option<Arc<dyn AgentDesk>>,
    /// Where a call puts a question to a human (a remote agent's
    /// INPUT_REQUIRED) through the run's approval path ([`HumanDesk`]);
    /// `None` where no human can be asked.
    pub human: Option<Arc<dyn HumanDesk>>,
    /// Where a long call reports progress (published as `tool_progress` run
    /// events); `None` where nobody listens.
    pub progress: Option<Arc<dyn ProgressSink>>,
    /// The run's kernel sandboxes: every process a tool starts runs under
    /// the one for its override ([`Tool::sandbox`]). `None` only where no run
    /// set one (a tool called outside the runtime): processes then run with
    /// the operator's full reach. The runtime always sets it (the default
    /// spec is workspace-write, no network).
    pub sandbox: Option<Arc<crate::proc::RunSandboxes>>,
}

impl RunScope {
    /// A run `run_id` in `workdir` (opened as its [`WorkRoot`]), with artifacts
    /// in `<workdir>/.agentry` and no desks, progress sink or sandbox: what a
    /// tool called outside the runtime gets.
    pub fn new(run_id: &str, workdir: &Path) -> std::io::Result<RunScope> {
        Ok(RunScope {
            run_id: Arc::from(run_id),
            workdir: Arc::from(workdir),
            root: Arc::new(WorkRoot::open(workdir)?),
            artifacts: Arc::from(workdir.join(".agentry").as_path()),
            agents: None,
            human: None,
            progress: None,
            sandbox: None,
        })
    }
}

/// How far a running call has got, as a tool reports it (an MCP server's
/// progress notifications).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolProgress {
    /// Progress so far; grows with each report.
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What is happening, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Takes the progress reports of a run's calls (one per run, shared by its calls).
pub trait ProgressSink: Send + Sync {
    /// Call `call_id` reports `update`.
    fn progress(&self, call_id: &str, update: ToolProgress);
}

/// Records the process groups a call starts, so that after a crash they are
/// killed before the call is run again, settled or reported.
pub trait ProcessLog: Send + Sync {
    /// A group started (its leader spawned). Called before the tool waits for it.
    fn started(&self, group: agentry_protocol::ProcessGroupRecord);

    /// The run's fence mark, set on every process it starts as
    /// `AGENTRY_RUN_MARK` (see [`crate::proc::ENV_RUN_MARK`]): unique to the
    /// run across stores and the same for all its attempts, so a resume finds
    /// the processes the log never recorded (started in the instant before a
    /// crash, or escaped from their group) by it. `None` (the default): no mark.
    fn run_mark(&self) -> Option<&str> {
        None
    }
}

/// Records the task a call started on another system, so that a resume
/// after a crash follows that task instead of starting a second one.
pub trait RemoteLog: Send + Sync {
    /// The call started `task` (the other system accepted it). Called
    /// before the tool waits for it; a later call replaces the record.
    fn started(&self, task: agentry_protocol::RemoteRef);

    /// The task this call started before a crash, which the call should
    /// follow to its end rather than start anew; `None` for a fresh call.
    fn follow(&self) -> Option<agentry_protocol::RemoteRef>;
}

/// A human's answer to a question a running call put ([`HumanDesk::ask`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HumanAnswer {
    /// The answer's text.
    Text(String),
    /// No answer: approved without a text, or nobody answered within the
    /// run's approval timeout. The question goes back to the model.
    Pass,
    /// Refused, with the human's reason: the call should not go on.
    Refused(Option<String>),
}

/// Puts a question from a running call to a human, through the run's
/// approval path: the call shows as waiting for approval (the run
/// `awaiting_approval`), the question as its preview; approving it with a
/// text answers it (`RunHandle::answer`), approving without one passes it
/// back, denying refuses it.
#[async_trait]
pub trait HumanDesk: Send + Sync {
    /// Asks `question` for the running call `call` (shown to the human as
    /// the call waiting, with its effect) and waits for the answer (or
    /// `cancel`, then `ECANCELED`; the question is withdrawn).
    async fn ask(
        &self,
        call: &agentry_protocol::tool::ToolCall,
        effect: agentry_protocol::tool::Effect,
        question: &str,
        cancel: &CancellationToken,
    ) -> Result<HumanAnswer, ToolError>;
}

/// The deadlines of a call, as wall-clock times (they go to other systems).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Deadlines {
    /// When the call is cut: the earlier of its timeout and the run's deadline.
    pub call: Option<std::time::SystemTime>,
    /// The run's wall-clock deadline, if it has one.
    pub run: Option<std::time::SystemTime>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("run_id", &self.run.run_id)
            .field("call_id", &self.call_id)
            .field("workdir", &self.run.workdir)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// A tool's successful output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOutput {
    /// The data returned to the model.
    pub data: Value,
    /// References to world objects read or written (path + sha256 + length).
    pub refs: Vec<ResourceRef>,
}

impl ToolOutput {
    /// Output with data and no references.
    pub fn data(data: Value) -> Self {
        ToolOutput {
            data,
            refs: Vec::new(),
        }
    }
}

/// An action the runtime can execute on a model's behalf.
///
/// Implementations only do the work: the executor has already checked that the
/// tool exists, that the arguments match [`ToolContract::input_schema`], and that
/// the run's grants allow it, and it enforces the timeout and cancellation.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The full contract. Called once, at registration.
    fn contract(&self) -> ToolContract;

    /// Checks preconditions before execution; a failure becomes `EPRECOND` (or the
    /// code returned) and the call does not run.
    async fn precondition(&self, _args: &Value, _ctx: &ToolContext) -> Result<(), ToolError> {
        Ok(())
    }

    /// Runs the call.
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;

    /// What the call would change, for the human asked to approve it (a
    /// diff of the file it would write), if the tool can say without running
    /// it; `None` (the default) otherwise. Changes nothing; called only for a
    /// call that waits for approval.
    fn preview(&self, _args: &Value, _ctx: &ToolContext) -> Option<String> {
        None
    }

    /// `Some` for a tool that runs processes: the override of the run's
    /// `[sandbox]` they run under (the default override: the run's own spec).
    /// `None` (the default): the tool starts no process. Read for spans,
    /// traces, `agentry tools`, and to prepare every spec a run needs before
    /// it starts.
    fn sandbox(&self) -> Option<agentry_sandbox::SandboxOverride> {
        None
    }

    /// How long the executor keeps polling a cancelled call so it can release what
    /// it holds outside its future (a process group: SIGTERM, wait, SIGKILL, reap)
    /// before dropping it. Zero (the default) drops the future at once: right for
    /// tools whose cleanup is their `Drop`. Read once, at registration.
    fn cancel_grace(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

/// A JSON Schema for `T`, derived with schemars. With `#[serde(deny_unknown_fields)]`
/// on `T` the schema says `additionalProperties: false`, as every contract should.
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    let schema = schemars::schema_for!(T);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// Deserializes already-validated arguments into `T`; a mismatch is `EINVAL`.
pub fn parse_args<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args).map_err(|e| {
        ToolError::new(
            agentry_protocol::ErrorCode::Einval,
            format!("arguments do not match the tool's schema: {e}"),
        )
    })
}

/// How `agent.wait` waits on several children.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitMode {
    /// Until every child has ended: every outcome, in the order asked.
    #[default]
    All,
    /// Until the first one ends: its outcome, and which are still running.
    Any,
}

/// The host side of agent delegation, provided by the runtime per run.
#[async_trait]
pub trait AgentDesk: Send + Sync {
    /// Starts a child of the calling run; returns its run id (`child_id`), its
    /// budget (`budget`) and what the parent can still delegate
    /// (`left_to_delegate`), or a typed refusal (`EBUDGET` when the parent
    /// cannot cover the budget, `EPERM` for grants or tree limits, `EINVAL` for
    /// a bad request).
    async fn spawn(&self, request: ChildRequest, operation_id: &str) -> Result<Value, ToolError>;

    /// Waits for children to end ([`WaitMode`]); each outcome is data
    /// (`child_id`, `name`, `stop_reason`, `answer`, `steps`, `tool_calls`,
    /// `tokens`, `cost_micros`, and for a child that did not finish `done`, a
    /// one-line `why`), with what the parent can still delegate
    /// (`left_to_delegate`). Stops waiting (`ECANCELED`) when `cancel` fires, or
    /// `ETIMEDOUT` after `timeout`; an unknown child is `EINVAL`.
    async fn wait(
        &self,
        children: &[String],
        mode: WaitMode,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError>;

    /// Cancels a child and its subtree (they stop `user_abort`; what the child
    /// did not use returns to the parent) and returns its outcome.
    async fn cancel(&self, child: &str) -> Result<Value, ToolError>;
}
