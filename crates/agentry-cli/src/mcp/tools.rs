//! The four tools of `agentry mcp`, their argument shapes (the JSON Schemas a
//! client sees come from these types) and their results.
//!
//! Bad arguments and a task that does not load are tool results with
//! `isError: true` and a message naming what is wrong (so a model can correct
//! them); a run that stops other than `done` is a normal result carrying its
//! stop reason, as `agentry run --json` reports it.

use std::path::PathBuf;
use std::sync::Arc;

use agentry::RunHandle;
use agentry::protocol::decision::Decision;
use agentry::protocol::event::RunEvent;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, Peer, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::args::RunTaskArgs;
use super::error::ArgError;
use super::inline::{InlineTask, discard, write_task_dir};
use super::runs::{self, ServerRuns, StartError, StartRequest};
use super::stored;

/// `get_run`'s and `cancel_run`'s argument.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunIdArgs {
    /// The run id run_task returned.
    pub(crate) run_id: String,
}

/// `list_runs`' argument.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListRunsArgs {
    /// List finished runs too (default: unfinished ones only, as `agentry runs`).
    #[serde(default)]
    pub(crate) all: bool,
}

/// The MCP server: its tools over the runs it started.
#[derive(Clone)]
pub(crate) struct AgentryServer {
    runs: Arc<ServerRuns>,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl AgentryServer {
    /// A server over `runs` (one per MCP session; the runs are shared).
    pub(crate) fn new(runs: Arc<ServerRuns>) -> Self {
        AgentryServer {
            runs,
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Run an agentry task: a task directory (task_dir) or inline task.toml fields (task, with script and files). Waits for the outcome (run_id, stop_reason, detail, answer, steps, tool_calls, checks, budget: the fields of `agentry run --json`) unless wait is false, which returns the run id at once. Sends a progress notification per step when the request has a progressToken.",
        // Read by `RunTaskArgs::parse`, so a mistyped field is named.
        input_schema = RunTaskArgs::schema(),
        annotations(
            title = "Run an agentry task",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = true
        )
    )]
    async fn run_task(
        &self,
        arguments: JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = match RunTaskArgs::parse(arguments) {
            Ok(args) => args,
            Err(e) => return Ok(tool_error(&ArgError::Shape(e))),
        };
        let wait = args.wait.unwrap_or(true);
        // The caller's trace context (`_meta.traceparent`, MCP's SEP-414 key):
        // the run joins that trace; the runtime ignores an invalid value.
        let traceparent = context.meta.0.get_traceparent().map(str::to_string);
        let handle = match self.start(args, traceparent).await {
            Ok(handle) => handle,
            Err(e) => return Ok(tool_error(&e)),
        };
        if !wait {
            let run_id = handle.run_id().to_string();
            return Ok(structured(
                format!("run {run_id} started; follow it with get_run"),
                json!({"run_id": run_id, "status": "running"}),
            ));
        }
        let total = handle.budget().await.and_then(|b| b.limits.max_steps);
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
            total,
        });
        match wait_for(&handle, progress, &context.ct).await {
            Ok(report) => Ok(structured(summary(&report), report)),
            Err(e) => Ok(tool_error(&ArgError::Start(e))),
        }
    }

    #[tool(
        description = "A run's status, and its outcome once it has ended (the fields of `agentry run --json`): a run this server started, or one in its store.",
        annotations(title = "Get a run", read_only_hint = true, open_world_hint = false)
    )]
    async fn get_run(
        &self,
        Parameters(RunIdArgs { run_id }): Parameters<RunIdArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        if let Some(handle) = self.runs.get(&run_id) {
            let value = live_run(&handle).await;
            return Ok(structured(status_line(&value), value));
        }
        match stored::get(self.runs.store_path(), &run_id).await {
            Ok(value) => Ok(structured(status_line(&value), value)),
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "The runs of the server's store (as `agentry runs --json`: unfinished ones unless all is true), and runs this server started without a store.",
        annotations(title = "List runs", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_runs(
        &self,
        Parameters(ListRunsArgs { all }): Parameters<ListRunsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        match stored::list(self.runs.store_path(), &self.runs.all(), all).await {
            Ok(value) => {
                let n = value["runs"].as_array().map_or(0, Vec::len);
                Ok(structured(format!("{n} runs"), value))
            }
            Err(e) => Ok(tool_error(&e)),
        }
    }

    #[tool(
        description = "Abort a run this server started: its tools are cancelled and it stops with user_abort. Returns its outcome.",
        annotations(
            title = "Cancel a run",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn cancel_run(
        &self,
        Parameters(RunIdArgs { run_id }): Parameters<RunIdArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(handle) = self.runs.get(&run_id) else {
            let store = self.runs.store_path();
            let err = match stored::get(store.clone(), &run_id).await {
                Ok(_) => ArgError::NotOurs {
                    run_id,
                    store: store.unwrap_or_default(),
                },
                Err(e) => e,
            };
            return Ok(tool_error(&err));
        };
        handle.abort();
        match runs::finish(&handle).await {
            Ok(report) => Ok(structured(summary(&report), report)),
            Err(e) => Ok(tool_error(&ArgError::Start(e))),
        }
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "agentry",
    instructions = "agentry runs LLM agent tasks to a verified outcome. run_task runs a task directory or an inline task; get_run, list_runs and cancel_run follow the runs."
)]
impl ServerHandler for AgentryServer {}

impl AgentryServer {
    /// Checks `run_task`'s arguments, writes an inline task's directory and
    /// starts the run.
    async fn start(
        &self,
        args: RunTaskArgs,
        traceparent: Option<String>,
    ) -> Result<RunHandle, ArgError> {
        let (task_dir, inline) = match (args.task_dir, args.task) {
            (Some(dir), None) => {
                for (name, given) in [
                    ("script", args.script.is_some()),
                    ("files", args.files.is_some()),
                ] {
                    if given {
                        return Err(ArgError::InlineOnly(name));
                    }
                }
                (PathBuf::from(dir), false)
            }
            (None, Some(task)) => {
                // Without these the task directory would have no policy at
                // all; say so in the caller's terms, not script.json's.
                if args.script.is_none() && args.policy.is_none() && !task.contains_key("policy") {
                    return Err(ArgError::NoPolicy);
                }
                let inline = InlineTask {
                    task,
                    script: args.script,
                    files: args.files.unwrap_or_default(),
                };
                // Blocking file writes, off the async workers.
                let dir = tokio::task::spawn_blocking(move || write_task_dir(inline))
                    .await
                    .map_err(|e| {
                        ArgError::Store(format!("writing the inline task failed: {e}"))
                    })??;
                (dir, true)
            }
            (Some(_), Some(_)) | (None, None) => return Err(ArgError::TaskSource),
        };
        let overrides = Overrides {
            policy: args.policy,
            max_steps: args.max_steps,
            deadline: args.deadline,
            traceparent,
            inline,
        };
        let started = self.start_in(task_dir.clone(), overrides).await;
        if inline && started.is_err() {
            discard(&task_dir);
        }
        started
    }

    /// Checks the overrides and starts the run of `task_dir`.
    async fn start_in(
        &self,
        task_dir: PathBuf,
        overrides: Overrides,
    ) -> Result<RunHandle, ArgError> {
        let Overrides {
            policy,
            max_steps,
            deadline,
            traceparent,
            inline,
        } = overrides;
        let max_steps = match max_steps {
            Some(n) if n == 0 || n > agentry::task::MAX_COUNT => {
                return Err(ArgError::MaxSteps { found: n });
            }
            other => other,
        };
        let deadline = match deadline {
            Some(value) => {
                Some(
                    crate::args::parse_deadline(&value).map_err(|why| ArgError::Deadline {
                        value: value.clone(),
                        why,
                    })?,
                )
            }
            None => None,
        };
        let request = StartRequest {
            task_dir,
            policy,
            max_steps,
            deadline,
            traceparent,
            inline,
        };
        Ok(self.runs.start(request).await?)
    }
}

/// What `run_task` sets over the task's own, unchecked.
struct Overrides {
    policy: Option<String>,
    max_steps: Option<u64>,
    deadline: Option<String>,
    /// From the request's `_meta.traceparent`.
    traceparent: Option<String>,
    /// The task directory was written for this run.
    inline: bool,
}

/// Where a waiting `run_task`'s progress notifications go.
struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    /// The step budget, when the task has one.
    total: Option<u64>,
}

impl Progress {
    /// One notification per decided step: progress = the step number.
    async fn event(&self, event: &RunEvent) {
        let RunEvent::DecisionMade { step, decision } = event else {
            return;
        };
        let what = match decision.as_ref() {
            Decision::ToolCalls { calls } => {
                let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
                format!("called {}", names.join(", "))
            }
            Decision::Final { .. } => "answered".to_string(),
            Decision::Failed { message, .. } => format!("the model's turn failed: {message}"),
        };
        let mut param = ProgressNotificationParam::new(self.token.clone(), *step as f64)
            .with_message(format!("step {step}: {what}"));
        if let Some(total) = self.total {
            param = param.with_total(total as f64);
        }
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "a progress notification was not sent");
        }
    }
}

/// Waits for the outcome, sending a progress notification per step (every
/// one before the result: the events left when the run stops are sent
/// first). A client that cancels the request aborts the run.
async fn wait_for(
    handle: &RunHandle,
    progress: Option<Progress>,
    cancelled: &tokio_util::sync::CancellationToken,
) -> Result<Value, StartError> {
    // The first subscriber of a run sees its events from the start.
    let mut events = handle.subscribe();
    let finish = runs::finish(handle);
    tokio::pin!(finish);
    let mut aborted = false;
    loop {
        tokio::select! {
            report = &mut finish => {
                if let Some(progress) = &progress {
                    while let Ok(record) = events.try_recv() {
                        progress.event(&record.event).await;
                    }
                }
                return report;
            }
            record = events.recv(), if progress.is_some() => {
                if let (Ok(record), Some(progress)) = (record, &progress) {
                    progress.event(&record.event).await;
                }
            }
            () = cancelled.cancelled(), if !aborted => {
                aborted = true;
                handle.abort();
            }
        }
    }
}

/// A live run of this server: its status, and its outcome once it ended.
async fn live_run(handle: &RunHandle) -> Value {
    match handle.outcome() {
        Some(outcome) => {
            let report = runs::report(&outcome, None);
            json!({
                "run_id": handle.run_id(),
                "task_id": outcome.task_id,
                "status": "stopped",
                "stop_reason": outcome.stop_reason,
                "answer": outcome.answer,
                "steps": outcome.steps,
                "started_here": true,
                "outcome": report,
            })
        }
        None => {
            let live = runs::live_status(handle).await;
            json!({
                "run_id": handle.run_id(),
                "status": live["status"],
                "stop_reason": null,
                "steps": live["steps"],
                "started_here": true,
                "outcome": null,
            })
        }
    }
}

/// A result with this text and structured content.
fn structured(text: String, value: Value) -> CallToolResult {
    let mut result = CallToolResult::structured(value);
    result.content = vec![ContentBlock::text(text)];
    result
}

/// A tool-level error: `isError: true` with the message.
fn tool_error(e: &ArgError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_string())])
}

/// One line about an outcome report, for clients that show text only.
fn summary(report: &Value) -> String {
    let answer = report["answer"]
        .as_str()
        .map_or("(none)".to_string(), |a| format!("{a:?}"));
    format!(
        "run {} (task {}) stopped {}: {}; answer {answer}; {} steps, {} tool calls; workdir {}",
        report["run_id"].as_str().unwrap_or_default(),
        report["task_id"].as_str().unwrap_or_default(),
        report["stop_reason"].as_str().unwrap_or_default(),
        report["detail"].as_str().unwrap_or_default(),
        report["steps"],
        report["tool_calls"],
        report["workdir"].as_str().unwrap_or_default(),
    )
}

/// One line about a `get_run` result.
fn status_line(value: &Value) -> String {
    match value["stop_reason"].as_str() {
        Some(reason) => format!(
            "run {} stopped {reason}",
            value["run_id"].as_str().unwrap_or_default()
        ),
        None => format!(
            "run {} is {}",
            value["run_id"].as_str().unwrap_or_default(),
            value["status"].as_str().unwrap_or("running")
        ),
    }
}
