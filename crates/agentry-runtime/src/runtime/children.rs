//! The runtime's [`AgentDesk`]: what `agent.spawn`, `agent.wait` and
//! `agent.cancel` call to start children under a run, wait for them and stop them.
//!
//! One per run. It knows its run's handle (set right after the run starts)
//! and the handles of the children it started; it holds no run state.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use agentry_protocol::envelope::{ErrorCode, ToolError};
use agentry_protocol::stop::StopReason;
use agentry_protocol::stored_policy::{ChildSpec, StoredPolicy};
use agentry_tools::agents::{AgentDesk, ChildRequest, WaitMode};
use async_trait::async_trait;
use futures::future::{select_all, try_join_all};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Runtime;
use super::handle::RunHandle;
use crate::RunOutcome;
use crate::budget::BudgetMsg;
use crate::error::RuntimeError;
use crate::policy::{Policy, Script};
use crate::registry::Grants;

/// Starts and waits for the children of one run.
pub(crate) struct RunChildren {
    runtime: Runtime,
    workdir: std::path::PathBuf,
    /// The parent's sandbox and host places: a child's processes run under
    /// the same.
    sandbox: agentry_sandbox::SandboxSpec,
    sandbox_host: crate::sandbox::SandboxHost,
    /// The run's own handle; set right after the run starts, which can be after
    /// its first step has begun. Boxed: the channel is allocated for every
    /// run, children or not.
    parent: tokio::sync::watch::Sender<Option<Box<RunHandle>>>,
    /// By id and by name.
    children: Mutex<HashMap<String, ChildRef>>,
    /// The child each `agent.spawn` (by its operation id) started.
    spawns: Mutex<HashMap<String, String>>,
    /// False while a resumed run's stored children are being adopted: its
    /// `agent.*` calls wait for them.
    ready: tokio::sync::watch::Sender<bool>,
}

/// A child as its parent's desk knows it: running (or ended in this
/// process), or ended before a restart (its outcome read from the store).
#[derive(Clone)]
// A few per run, cloned into a wait: boxing the handle would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum ChildRef {
    Live(RunHandle),
    Ended(Box<RunOutcome>),
}

impl ChildRef {
    async fn outcome(&self) -> Result<RunOutcome, RuntimeError> {
        match self {
            ChildRef::Live(handle) => handle.wait().await,
            ChildRef::Ended(outcome) => Ok((**outcome).clone()),
        }
    }

    fn ended(&self) -> bool {
        match self {
            ChildRef::Live(handle) => handle.outcome().is_some(),
            ChildRef::Ended(_) => true,
        }
    }
}

impl RunChildren {
    /// `ready`: false for a resumed run whose stored children are adopted
    /// after it starts ([`RunChildren::adopt`], then [`RunChildren::open`]).
    pub(crate) fn new(runtime: Runtime, config: &crate::RunConfig, ready: bool) -> Self {
        RunChildren {
            runtime,
            workdir: config.workdir.clone(),
            sandbox: config.sandbox.clone(),
            sandbox_host: config.sandbox_host.clone(),
            parent: tokio::sync::watch::channel(None).0,
            children: Mutex::new(HashMap::new()),
            spawns: Mutex::new(HashMap::new()),
            ready: tokio::sync::watch::channel(ready).0,
        }
    }

    /// A stored child of a resumed run, under its id and its name.
    pub(crate) fn adopt(&self, id: &str, name: Option<&str>, child: ChildRef) {
        if let Ok(mut children) = self.children.lock() {
            if let Some(name) = name {
                children.insert(name.to_string(), child.clone());
            }
            children.insert(id.to_string(), child);
        }
    }

    /// The spawn with `operation_id` started child `child_id` (a stored child's
    /// spec says which spawn started it).
    pub(crate) fn remember_spawn(&self, operation_id: &str, child_id: &str) {
        if let Ok(mut spawns) = self.spawns.lock() {
            spawns.insert(operation_id.to_string(), child_id.to_string());
        }
    }

    fn started_by(&self, operation_id: &str) -> Option<String> {
        self.spawns.lock().ok()?.get(operation_id).cloned()
    }

    /// What `agent.spawn` answers for child `id`.
    async fn spawned(&self, id: &str) -> Result<Value, ToolError> {
        let budget = match self.child(id)? {
            ChildRef::Live(child) => child.about.limits(),
            ChildRef::Ended(outcome) => outcome.budget.limits,
        };
        Ok(json!({
            "child_id": id,
            "budget": budget,
            "left_to_delegate": self.left_to_delegate().await,
        }))
    }

    /// Every stored child is adopted: `agent.*` calls go on.
    pub(crate) fn open(&self) {
        self.ready.send_replace(true);
    }

    async fn until_ready(&self) {
        let mut rx = self.ready.subscribe();
        let _ = rx.wait_for(|ready| *ready).await;
    }

    /// Called once the run's handle exists.
    pub(crate) fn set_parent(&self, handle: RunHandle) {
        self.parent.send_replace(Some(Box::new(handle)));
    }
}

/// A child not started, for the model: `EBUDGET` when the parent's budget
/// cannot cover it, else `EPERM` (a tree limit, a grant, a stopped parent).
fn refused(e: RuntimeError) -> ToolError {
    let budget = if let RuntimeError::ChildRefused { reason, .. } = &e {
        reason.is_budget()
    } else {
        false
    };
    let code = if budget {
        ErrorCode::Ebudget
    } else {
        ErrorCode::Eperm
    };
    ToolError::new(code, e.to_string()).with_action("ask for less, or do it yourself")
}

#[async_trait]
impl AgentDesk for RunChildren {
    async fn spawn(&self, request: ChildRequest, operation_id: &str) -> Result<Value, ToolError> {
        self.until_ready().await;
        if let Some(started) = self.started_by(operation_id) {
            return self.spawned(&started).await;
        }
        let mut rx = self.parent.subscribe();
        let parent = rx
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|p| p.clone())
            .ok_or_else(|| ToolError::new(ErrorCode::Eunavail, "the run is stopping"))?;
        let parent = &parent;
        let policy = child_policy(&self.runtime, &request)?;
        if let Some(name) = &request.name
            && self.children.lock().is_ok_and(|c| c.contains_key(name))
        {
            return Err(ToolError::new(
                ErrorCode::Einval,
                format!("a child named {name:?} already exists"),
            )
            .with_action("pick another name"));
        }
        let mut config = crate::RunConfig::new(request.goal.clone(), self.workdir.clone());
        config.sandbox = self.sandbox.clone();
        config.sandbox_host = self.sandbox_host.clone();
        // Its id is chosen here so that its parent holds its release before it
        // is reserved (same sender, so in that order; see `HoldRelease`).
        let id = uuid::Uuid::now_v7().to_string();
        config.run_id = Some(id.clone());
        if let Some(budget) = parent.live.budget() {
            let _ = budget.cast(BudgetMsg::HoldRelease {
                child_id: id.clone(),
            });
        }
        config.task_id = request
            .name
            .clone()
            .unwrap_or_else(|| format!("{}/child", parent.run_id()));
        config.limits = request.limits;
        // Children share the parent's world (its working directory); traces are per
        // run and linked by parent id, so a child writes none of its own here.
        config.grants = match &request.grants {
            Some(g) => Grants::new(g.iter().cloned()),
            None => parent.grants().clone(),
        };
        // What rebuilds its policy should it be resumed after a crash, and the
        // spawn it came from (a re-run of that spawn gets this child).
        config.policy_spec = Some(StoredPolicy::Child(ChildSpec::new(
            &request,
            operation_id,
            &policy.name(),
        )));
        // Stored with a durable child: regrown after a restart, it rejoins the
        // trace under the span that spawned it (this call's).
        config.traceparent = agentry_telemetry::traceparent(&tracing::Span::current());
        let child = self
            .runtime
            .start_child_boxed(parent, config, policy)
            .await
            .map_err(|e| {
                // Never started: nothing of it to hold.
                self.collect(&id);
                refused(e)
            })?;
        self.adopt(&id, request.name.as_deref(), ChildRef::Live(child.clone()));
        self.remember_spawn(operation_id, &id);
        // As carved: asking the child's supervisor found none once it had
        // stopped. What is left does not move with the child's end (held).
        Ok(json!({
            "child_id": id,
            "budget": child.about.limits(),
            "left_to_delegate": parent.delegable().await,
        }))
    }

    async fn wait(
        &self,
        children: &[String],
        mode: WaitMode,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Result<Value, ToolError> {
        self.until_ready().await;
        let handles = children
            .iter()
            .map(|c| self.child(c))
            .collect::<Result<Vec<_>, _>>()?;
        let waited = async {
            match mode {
                WaitMode::All => {
                    let outcomes = try_join_all(handles.iter().map(ChildRef::outcome)).await?;
                    outcomes.iter().for_each(|o| self.collect(&o.run_id));
                    let outcomes: Vec<Value> = outcomes.iter().map(outcome_json).collect();
                    Ok(json!({
                        "mode": "all",
                        "outcomes": outcomes,
                        "left_to_delegate": self.left_to_delegate().await,
                    }))
                }
                WaitMode::Any => {
                    let (first, index, _) =
                        select_all(handles.iter().map(|h| Box::pin(h.outcome()))).await;
                    let first = first?;
                    self.collect(&first.run_id);
                    let still: Vec<&str> = still_running(children, &handles)
                        .filter(|c| *c != children[index])
                        .collect();
                    Ok(json!({
                        "mode": "any",
                        "first": children[index],
                        "outcome": outcome_json(&first),
                        "still_running": still,
                        "left_to_delegate": self.left_to_delegate().await,
                    }))
                }
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => Err(ToolError::new(ErrorCode::Ecanceled, "stopped waiting: the run is stopping")),
            _ = tokio::time::sleep(timeout.unwrap_or(Duration::MAX)) => {
                let still: Vec<&str> = still_running(children, &handles).collect();
                Err(ToolError::new(ErrorCode::Etimedout, format!("still running: {}", still.join(", ")))
                    .with_action("wait again later, or agent.cancel a child"))
            }
            o = waited => o.map_err(|e: RuntimeError| ToolError::new(ErrorCode::Einternal, e.to_string())),
        }
    }

    async fn cancel(&self, child_id: &str) -> Result<Value, ToolError> {
        self.until_ready().await;
        let child = match self.child(child_id)? {
            ChildRef::Live(child) => child,
            ChildRef::Ended(outcome) => {
                self.collect(&outcome.run_id);
                let mut answer = outcome_json(&outcome);
                answer["left_to_delegate"] = self.left_to_delegate().await;
                return Ok(answer);
            }
        };
        child.abort();
        // Its stop releases what it did not use before its outcome is published,
        // so the parent's next step can give it out again.
        let outcome = child
            .wait()
            .await
            .map_err(|e| ToolError::new(ErrorCode::Einternal, e.to_string()))?;
        self.collect(&outcome.run_id);
        let mut answer = outcome_json(&outcome);
        answer["left_to_delegate"] = self.left_to_delegate().await;
        Ok(answer)
    }
}

impl RunChildren {
    /// The model has learnt that child `child_id` ended: what it did not use
    /// returns to this run now (sent before `left_to_delegate` is asked, from
    /// the same task, so counted in it).
    fn collect(&self, child_id: &str) {
        if let Some(parent) = self.parent.borrow().as_ref()
            && let Some(budget) = parent.live.budget()
        {
            let _ = budget.cast(BudgetMsg::Collect {
                child_id: child_id.to_string(),
            });
        }
    }

    /// What this run can still give a child, per dimension it limits
    /// ([`RunHandle::delegable`]); null before the run's handle exists.
    async fn left_to_delegate(&self) -> Value {
        let parent = self.parent.borrow().clone();
        match parent {
            Some(p) => json!(p.delegable().await),
            None => Value::Null,
        }
    }

    /// A child of this run by id or name; `EINVAL` naming it otherwise.
    fn child(&self, child_id: &str) -> Result<ChildRef, ToolError> {
        self.children
            .lock()
            .ok()
            .and_then(|c| c.get(child_id).cloned())
            .ok_or_else(|| {
                ToolError::new(
                    ErrorCode::Einval,
                    format!("no child {child_id:?} of this run"),
                )
                .with_action("use a child_id or name that agent.spawn returned")
            })
    }
}

/// The asked-for children that have not ended yet.
fn still_running<'a>(
    children: &'a [String],
    handles: &'a [ChildRef],
) -> impl Iterator<Item = &'a str> {
    children
        .iter()
        .zip(handles)
        .filter(|(_, h)| !h.ended())
        .map(|(c, _)| c.as_str())
}

/// A child's outcome as its parent's model sees it: enough to retry, re-plan or
/// give up.
fn outcome_json(outcome: &RunOutcome) -> Value {
    let spent = &outcome.budget.spent;
    let why = (outcome.stop_reason != StopReason::Done).then(|| {
        let line = outcome.detail.lines().next().unwrap_or_default();
        line.chars().take(240).collect::<String>()
    });
    json!({
        "child_id": outcome.run_id,
        "name": outcome.task_id,
        "stop_reason": outcome.stop_reason,
        "answer": outcome.answer,
        "why": why,
        "detail": outcome.detail,
        "steps": outcome.steps,
        "tool_calls": outcome.tool_calls,
        "tokens": spent.tokens(),
        "cost_micros": spent.cost_micros,
        "spent": spent,
    })
}

/// A child's policy: its inline script, the named model it asks for, or
/// the runtime's default child model.
fn child_policy(runtime: &Runtime, request: &ChildRequest) -> Result<Box<dyn Policy>, ToolError> {
    if let Some(script) = &request.script {
        return Ok(Box::new(
            Script::from_value(script)
                .map_err(|m| ToolError::new(ErrorCode::Einval, format!("script: {m}")))?
                .into_policy(),
        ));
    }
    let factory = match &request.model {
        Some(name) => runtime.child_models().get(name).ok_or_else(|| {
            let names: Vec<&str> = runtime.child_models().keys().map(String::as_str).collect();
            ToolError::new(
                ErrorCode::Einval,
                format!(
                    "no child model named {name:?}; the models are: {}",
                    names.join(", ")
                ),
            )
            .with_action("pick one of those names, or leave model unset")
        })?,
        None => runtime.child_policy().ok_or_else(|| {
            ToolError::new(
                ErrorCode::Einval,
                "this runtime has no model for children: pass a script",
            )
        })?,
    };
    factory(request).ok_or_else(|| ToolError::new(ErrorCode::Einval, "no policy for this child"))
}

impl RunChildren {
    /// The policy of a stored child, from its record's policy text (a
    /// [`ChildSpec`]): its script, or the named (or default) child model.
    pub(crate) fn policy_of_spec(
        runtime: &Runtime,
        run_id: &str,
        spec: &StoredPolicy,
    ) -> Result<Box<dyn Policy>, RuntimeError> {
        let refused = |message: String| RuntimeError::NotResumable {
            run_id: run_id.to_string(),
            message,
        };
        let StoredPolicy::Child(child) = spec else {
            return Err(refused(format!(
                "its policy is not a child's: {:?}",
                spec.to_string()
            )));
        };
        child_policy(runtime, &child.request()).map_err(|e| refused(e.message))
    }
}
